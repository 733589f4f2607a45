"""The waves' part of the store: a wave's plan, written once, and its progress, written at every change.

The plan (targets, units: up to one per host of the fleet) is written once and the progress once per command, so
that a 10,000-unit wave does not rewrite its unit list 10,000 times.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from forewarn.store.records import Reader, Records, Rows, Touched, Writer, time_from_text, time_text
from forewarn.waves.component import StoredWaves, UnitRun, Wave, WaveChanged, WaveOrder, WaveRows, WaveSpec, WaveStatus
from forewarn.waves.model import WaveCloud, plain
from forewarn.waves.units import wave_units

# A plan that names no cloud is an Azure wave's: Azure's were the only waves when plans did not name their cloud.
UNNAMED_CLOUD = WaveCloud.AZURE


def seconds_of(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def encode_wave_plan(wave: Wave) -> str:
    """The plan: every field of the spec (a field the wave's cloud does not read is null), its owners and units.
    The enumerated fields are their values, as the wire spells them."""
    spec = wave.spec
    return json.dumps(
        {
            "wave_id": wave.wave_id,
            "event_type": plain(spec.event_type),
            "order": plain(spec.order),
            "concurrency": spec.concurrency,
            "groups": list(spec.groups),
            "source": plain(spec.source),
            "notice": seconds_of(spec.notice),
            "duration_seconds": spec.duration_seconds,
            "impact_window": seconds_of(spec.impact_window),
            "description": spec.description,
            "name": spec.name,
            "cloud": plain(spec.cloud),
            "window": seconds_of(spec.window),
            "can_reschedule": spec.can_reschedule,
            "latest": seconds_of(spec.latest),
            "maintenance_type": plain(spec.maintenance_type),
            "owners": list(wave.owners),
            "units": list(wave.units),
            "created_at": time_text(wave.created_at),
        },
        separators=(",", ":"),
    )


def encode_wave_progress(wave: Wave) -> str:
    return json.dumps(
        {
            "status": wave.status.value,
            "next_unit": wave.next_unit,
            "in_flight": [[run.unit, list(run.operations)] for run in wave.in_flight],
            "done": wave.done,
            "skipped": list(wave.skipped),
            "finished_at": time_text(wave.finished_at),
        },
        separators=(",", ":"),
    )


def stored_cloud(name: str | None) -> str:
    """The name of the wave units a plan's ``cloud`` names (as they spell it), or the name as stored when no
    registered cloud answers to it."""
    text = UNNAMED_CLOUD.value if name is None else name
    return next((cloud for cloud in wave_units() if plain(cloud) == text), text)


def decode_wave(plan_text: str, progress_text: str) -> Wave:
    plan, progress = json.loads(plan_text), json.loads(progress_text)

    def seconds(value: float | None) -> timedelta | None:
        return None if value is None else timedelta(seconds=value)

    spec = WaveSpec(
        event_type=plan["event_type"],
        order=WaveOrder(plan["order"]),
        concurrency=plan["concurrency"],
        groups=tuple(plan["groups"]),
        source=plan["source"],
        notice=seconds(plan["notice"]),
        duration_seconds=plan["duration_seconds"],
        impact_window=seconds(plan["impact_window"]),
        description=plan["description"],
        name=plan["name"],
        # The fields below are absent from the plans of waves that did not name their cloud.
        cloud=stored_cloud(plan.get("cloud")),
        window=seconds(plan.get("window")),
        can_reschedule=plan.get("can_reschedule", True),
        latest=seconds(plan.get("latest")),
        maintenance_type=plan.get("maintenance_type"),
    )
    return Wave(
        wave_id=plan["wave_id"],
        spec=spec,
        owners=tuple(plan["owners"]),
        units=tuple(plan["units"]),
        created_at=datetime.fromisoformat(plan["created_at"]),
        status=WaveStatus(progress["status"]),
        next_unit=progress["next_unit"],
        in_flight=tuple(UnitRun(unit, tuple(operations)) for unit, operations in progress["in_flight"]),
        done=progress["done"],
        skipped=tuple(progress["skipped"]),
        finished_at=time_from_text(progress["finished_at"]),
    )


def _wave_changed(change: WaveChanged, rows: Rows) -> None:
    wave = change.wave
    if change.what == "started":
        rows.write(
            "INSERT INTO forewarn_waves (wave_id, plan, progress) VALUES (?, ?, '{}')",
            (wave.wave_id, encode_wave_plan(wave)),
        )
    # The progress once per command, at its latest: a step may move one wave many times.
    rows.write_last(
        "UPDATE forewarn_waves SET progress = ? WHERE wave_id = ?",
        wave.wave_id,
        lambda: (encode_wave_progress(wave), wave.wave_id),
    )
    rows.touch("forewarn_waves", wave.wave_id)
    rows.journal(f"wave {change.what}", None, {"wave": wave.wave_id, "reason": change.reason})


def _load(reader: Reader) -> dict[str, Any]:
    rows = reader.rows("SELECT plan, progress FROM forewarn_waves ORDER BY wave_id")
    return {"waves": StoredWaves([decode_wave(plan, progress) for plan, progress in rows])}


def _reload(reader: Reader, touched: Touched) -> dict[str, Any]:
    if "forewarn_waves" not in touched:
        return {}
    waves = reader.current(
        "SELECT wave_id, plan, progress FROM forewarn_waves",
        "wave_id",
        touched["forewarn_waves"],
        lambda row: decode_wave(row[1], row[2]),
    )
    return {"waves": WaveRows(waves)}


WAVE_RECORDS = Records("waves", [Writer(WaveChanged, _wave_changed)], _load, tables=("forewarn_waves",), reload=_reload)
