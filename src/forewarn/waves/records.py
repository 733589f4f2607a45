"""The waves' part of the store: a wave's plan (``forewarn_waves``), written once, its progress
(``forewarn_wave_progress``), written at every change, and its units in flight, a row each (``forewarn_wave_runs``),
written when the unit starts and deleted when it ends.

The plan (targets, units: up to one per host of the fleet) is written once and the progress once per command, in a
row of its own, so that a 10,000-unit wave does not rewrite its unit list 10,000 times (a database rewrites a whole
row to change one of its columns); the units in flight (5% of a million VMs' hosts at a time) are rows of their own
so that a commit writes the units it started or ended, not all of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from forewarn.store.records import Reader, Records, Rows, Touched, Writer, compact, time_from_text, time_text
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


def encode_operations(run: UnitRun) -> str:
    return compact(list(run.operations))


def decode_run(unit: int, operations_text: str) -> UnitRun:
    return UnitRun(unit, tuple(json.loads(operations_text)))


def decode_wave(plan_text: str, progress_text: str, in_flight: Sequence[UnitRun] = ()) -> Wave:
    """A wave from its plan, its progress and its units in flight (its rows of ``forewarn_wave_runs``, in the order
    the units went)."""
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
        in_flight=tuple(in_flight),
        done=progress["done"],
        skipped=tuple(progress["skipped"]),
        finished_at=time_from_text(progress["finished_at"]),
    )


RUN_INSERT = "INSERT INTO forewarn_wave_runs (wave_id, unit, operations) VALUES (?, ?, ?)"
RUN_DELETE = "DELETE FROM forewarn_wave_runs WHERE wave_id = ? AND unit = ?"
RUNS_SELECT = "SELECT wave_id, unit, operations FROM forewarn_wave_runs"
PROGRESS_PUT = (
    "INSERT INTO forewarn_wave_progress (wave_id, progress) VALUES (?, ?) "
    "ON CONFLICT (wave_id) DO UPDATE SET progress = excluded.progress"
)
WAVES_SELECT = (
    "SELECT forewarn_waves.wave_id, plan, forewarn_wave_progress.progress FROM forewarn_waves "
    "JOIN forewarn_wave_progress ON forewarn_wave_progress.wave_id = forewarn_waves.wave_id"
)


def _wave_changed(change: WaveChanged, rows: Rows) -> None:
    wave = change.wave
    if change.what == "started":
        rows.write(
            "INSERT INTO forewarn_waves (wave_id, plan, progress) VALUES (?, ?, '{}')",
            (wave.wave_id, encode_wave_plan(wave)),
        )
    run = change.run
    if run is not None and change.what == "unit-scheduled":
        rows.write_final((wave.wave_id, run.unit), RUN_INSERT, (wave.wave_id, run.unit, encode_operations(run)))
    elif run is not None and change.what == "unit-completed":
        rows.write_final((wave.wave_id, run.unit), RUN_DELETE, (wave.wave_id, run.unit))
    # The progress once per command, at its latest: a step may move one wave many times.
    rows.write_last(PROGRESS_PUT, wave.wave_id, lambda: (wave.wave_id, encode_wave_progress(wave)))
    rows.touch("forewarn_waves", wave.wave_id)
    rows.journal(f"wave {change.what}", None, {"wave": wave.wave_id, "reason": change.reason})


def _runs_by_wave(rows: Iterable[tuple[Any, ...]]) -> dict[str, list[UnitRun]]:
    """Each wave's units in flight, in the order they went: a wave's units go in the order of their numbers."""
    runs: dict[str, list[UnitRun]] = {}
    for wave_id, unit, operations in rows:
        runs.setdefault(wave_id, []).append(decode_run(int(unit), operations))
    for wave_runs in runs.values():
        wave_runs.sort(key=lambda run: run.unit)
    return runs


def _load(reader: Reader) -> dict[str, Any]:
    runs = _runs_by_wave(reader.rows(RUNS_SELECT))
    rows = reader.rows(f"{WAVES_SELECT} ORDER BY forewarn_waves.wave_id")
    return {
        "waves": StoredWaves([decode_wave(plan, progress, runs.get(wave_id, ())) for wave_id, plan, progress in rows])
    }


def _reload(reader: Reader, touched: Touched) -> dict[str, Any]:
    if "forewarn_waves" not in touched:
        return {}
    wave_ids = touched["forewarn_waves"]
    runs = _runs_by_wave(reader.keyed(RUNS_SELECT, "wave_id", wave_ids))
    waves = reader.current(
        WAVES_SELECT,
        "forewarn_waves.wave_id",
        wave_ids,
        lambda row: decode_wave(row[1], row[2], runs.get(row[0], ())),
    )
    return {"waves": WaveRows(waves)}


WAVE_RECORDS = Records(
    "waves",
    [Writer(WaveChanged, _wave_changed)],
    _load,
    tables=("forewarn_waves", "forewarn_wave_progress", "forewarn_wave_runs"),
    reload=_reload,
)
