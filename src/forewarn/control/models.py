"""Shapes shared by the control API's routers: the changes a clock move reports, and errors."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, Field, TypeAdapter
from starlette.responses import Response, StreamingResponse

from forewarn.app.turns import Turns
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
# Changes counted, or let go of, between two looks at the clock of the turn (``app/turns.py``): each costs about a
# microsecond, too little to look at the clock after each.
LOOKED_EVERY = 256


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
    between turns (a clock move over a million VMs makes hundreds of thousands of changes)."""
    listed: list[ChangeOut] = []
    total = 0
    reported_kinds: dict[tuple[type, Any], bool] = {}
    reports = change_reports()
    turns = Turns()
    for position, change in enumerate(changes):
        if position % LOOKED_EVERY == 0:
            await turns.pause()
        report = reports.get(type(change))
        if report is None:
            continue
        if len(listed) < MAX_LISTED_CHANGES:
            out = report(change)  # some 10 µs: the clock looked at after each
            if out is not None:
                listed.append(out)
                total += 1
                await turns.pause()
            continue
        kind = (type(change), getattr(change, "what", None))
        counts = reported_kinds.get(kind)
        if counts is None:
            counts = reported_kinds[kind] = report(change) is not None
        total += counts
    return listed, total


async def let_go(items: list[Any]) -> None:
    """Empty ``items`` (what only an answer holds: a command's outcome, the ended events a listing decoded) a turn
    of the event loop at a time, the loop answering others between turns. Freed at once, the changes of a clock move
    over a million VMs (the events it ended, which only they still hold, and the wave's progress each unit's change
    keeps) took 100 ms of the loop in one stretch, where the answer's last reference went (bench/stalls.py, the
    wave's end step); 300,000 decoded events take 74 ms."""
    turns = Turns()
    while items:
        del items[-LOOKED_EVERY:]
        await turns.pause()


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
    ``shown(item)`` of each item: shown and encoded a turn of the event loop at a time (``app/turns.py``), the loop
    answering others between turns (45,000 events are a second of it)."""
    adapter = _list_of(model)
    parts: list[bytes] = []
    turns = Turns()
    await turns.next()  # the route's own work (a command's outcome) came before: a turn of its own
    slice_: list[BaseModel] = []
    for item in items:
        slice_.append(shown(item))  # tens of µs: the clock looked at after each
        if turns.over():
            parts.append(adapter.dump_json(slice_)[1:-1])
            slice_ = []
            await turns.next()
    if slice_ or not parts:
        parts.append(adapter.dump_json(slice_)[1:-1])
    if len(parts) < 2:
        return Response(b"[" + b"".join(parts) + b"]", status_code, media_type="application/json")
    # Sent part by part, with its length: joined, 45,000 events are 25 MB copied in one stretch of the loop (41 ms).
    length = sum(map(len, parts)) + len(parts) + 1  # the brackets and the commas between the parts
    return StreamingResponse(
        _bracketed(parts), status_code, {"content-length": str(length)}, media_type="application/json"
    )


def model_response(content: BaseModel, status_code: int = 200) -> Response:
    """The answer of a route whose ``response_model`` is ``content``'s model, byte for byte as FastAPI encodes it,
    without FastAPI's validating it again (``content`` was built by the route, tens of milliseconds again for a
    million-VM wave's units in flight)."""
    return Response(content.model_dump_json(), status_code, media_type="application/json")


async def _bracketed(parts: list[bytes]) -> AsyncIterator[bytes]:
    """``[`` part ``,`` part ... ``]``, a part a chunk, each let go of once sent."""
    for index in range(len(parts)):
        part, parts[index] = parts[index], b""
        yield (b"[" if index == 0 else b",") + part
    yield b"]"
