"""Shapes shared by the control API's routers: the changes a clock move reports, and errors."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, Field, TypeAdapter
from starlette.responses import Response, StreamingResponse

from forewarn.cloud import registered
from forewarn.core.changes import Change
from forewarn.waves.component import WaveChanged
from forewarn.waves.units import units_named

# A clock move reports at most this many changes one by one (a wave step can touch 100,000 events); the rest are
# counted in ``changes_total`` and are in the journal (GET /v1/journal).
MAX_LISTED_CHANGES = 1000


class ChangeOut(BaseModel):
    kind: str = Field(description="event, vm (Azure); ec2_event, instance (EC2); gce_event, gce_instance; wave")
    id: str
    what: str = Field(description="scheduled, approved, started, completed, canceled, impacted, recovered, ...")
    reason: str
    type: str | None = Field(default=None, description="the event type (Azure), code (EC2) or kind (Compute Engine)")
    status: str | None = None
    targets: list[str] = Field(default_factory=list, description="VMs or the instance the change is about")


# A change's report for a person reading ``clock next``: None for bookkeeping (incarnations, the clock itself,
# policies, enabling, an instance's metadata being read). Whether it is None depends on the change's kind and its
# ``what`` only: the changes past the listed ones are counted by those (``changes_out``), not reported one by one.
ChangeReport = Callable[[Any], "ChangeOut | None"]
# Changes counted between two turns of the event loop (a few milliseconds' work): a clock move over a million VMs
# makes hundreds of thousands. 20,000 a turn, with the first turn's reports, held the loop for 20 ms and more.
COUNTED_PER_TURN = 5_000
# Changes reported one by one (a ``ChangeOut`` each, some 10 µs) between two turns of the event loop.
REPORTED_PER_TURN = 250
# Items of a long answer (a schedule's events) shown and encoded between two turns of the event loop.
SHOWN_PER_TURN = 500
# Changes a command's answer lets go of between two turns of the event loop (``let_go``).
FREED_PER_TURN = 2_000


def _wave_out(change: WaveChanged) -> ChangeOut:
    wave = change.wave
    return ChangeOut(
        kind="wave",
        id=wave.wave_id,
        what=change.what,
        reason=change.reason,
        type=units_named(wave.spec.cloud).kind(wave.spec),
        status=wave.status.value,
    )


@functools.cache
def change_reports() -> dict[type, ChangeReport]:
    """Each kind of change worth reporting, and its report: the waves' here, every registered cloud's from it."""
    reports: dict[type, ChangeReport] = {WaveChanged: _wave_out}
    for cloud in registered():
        reports.update(cloud.change_reports())
    return reports


def change_out(change: Change) -> ChangeOut | None:
    """What a person reading ``clock next`` wants to know of one change (None: nothing worth a line)."""
    report = change_reports().get(type(change))
    return None if report is None else report(change)


async def changes_out(changes: Sequence[Change]) -> tuple[list[ChangeOut], int]:
    """The changes worth reporting, the first ``MAX_LISTED_CHANGES`` of them, and how many there were. Only the
    listed ones are reported; the others are counted by kind (``ChangeReport``), the event loop answering others
    every ``COUNTED_PER_TURN`` changes and every ``REPORTED_PER_TURN`` reports."""
    listed: list[ChangeOut] = []
    total = 0
    reported_kinds: dict[tuple[type, Any], bool] = {}
    reports = change_reports()
    for position, change in enumerate(changes):
        if position % COUNTED_PER_TURN == COUNTED_PER_TURN - 1:
            await asyncio.sleep(0)
        report = reports.get(type(change))
        if report is None:
            continue
        if len(listed) < MAX_LISTED_CHANGES:
            out = report(change)
            if out is not None:
                listed.append(out)
                total += 1
                if len(listed) % REPORTED_PER_TURN == 0:
                    await asyncio.sleep(0)
            continue
        kind = (type(change), getattr(change, "what", None))
        counts = reported_kinds.get(kind)
        if counts is None:
            counts = reported_kinds[kind] = report(change) is not None
        total += counts
    return listed, total


async def let_go(items: list[Any]) -> None:
    """Empty ``items`` (what only an answer holds: a command's outcome, the ended events a listing decoded)
    ``FREED_PER_TURN`` at a time, the event loop answering others between slices. Freed at once, the changes of a
    clock move over a million VMs (the events it ended, which only they still hold, and the wave's progress each
    unit's change keeps) took 100 ms of the loop in one stretch, where the answer's last reference went
    (bench/stalls.py, the wave's end step); 300,000 decoded events take 74 ms."""
    while items:
        del items[-FREED_PER_TURN:]
        await asyncio.sleep(0)


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorBody


ERRORS: dict[int | str, dict[str, Any]] = {400: {"model": ErrorOut}, 404: {"model": ErrorOut}, 409: {"model": ErrorOut}}


T = TypeVar("T")


@functools.cache
def _list_of(model: type[BaseModel]) -> TypeAdapter[list[Any]]:
    return TypeAdapter(list[model])  # type: ignore[valid-type]


async def json_array(
    items: Sequence[T], shown: Callable[[T], BaseModel], model: type[BaseModel], status_code: int = 200
) -> Response:
    """The answer of a route whose ``response_model`` is ``list[model]``, byte for byte as FastAPI encodes it, for
    ``shown(item)`` of each item: shown and encoded ``SHOWN_PER_TURN`` items at a time, the event loop answering
    others between them (45,000 events are a second of it)."""
    adapter = _list_of(model)
    parts: list[bytes] = []
    for start in range(0, len(items), SHOWN_PER_TURN):
        await asyncio.sleep(0)  # the first slice too: the route's own work (a command's outcome) came before it
        parts.append(adapter.dump_json([shown(item) for item in items[start : start + SHOWN_PER_TURN]])[1:-1])
    if len(parts) < 2:
        return Response(b"[" + b"".join(parts) + b"]", status_code, media_type="application/json")
    # Sent part by part, with its length: joined, 45,000 events are 25 MB copied in one stretch of the loop (41 ms).
    length = sum(map(len, parts)) + len(parts) + 1  # the brackets and the commas between the parts
    return StreamingResponse(
        _bracketed(parts), status_code, {"content-length": str(length)}, media_type="application/json"
    )


async def _bracketed(parts: list[bytes]) -> AsyncIterator[bytes]:
    """``[`` part ``,`` part ... ``]``, a part a chunk, each let go of once sent."""
    for index in range(len(parts)):
        part, parts[index] = parts[index], b""
        yield (b"[" if index == 0 else b",") + part
    yield b"]"
