"""The control API's wave routes: roll maintenance across a fleet by update domain, fault domain or host (Azure VMs),
or by zone or host (Compute Engine instances). The request's cloud-specific fields are read by that cloud's wave
units (``waves/units.py``); these routes name no cloud."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from forewarn.app.runtime import Maintenance
from forewarn.app.turns import Turns
from forewarn.control.models import ERRORS, json_array, model_response
from forewarn.core.bounds import MAX_DURATION_SECONDS
from forewarn.core.changes import Change
from forewarn.core.durations import parse_optional_duration
from forewarn.core.enums import parse_enum
from forewarn.core.times import format_optional_time, format_time
from forewarn.waves.component import MACHINES_PER_COMMAND, MAX_CONCURRENCY, Wave, WaveChanged, WaveOrder, WaveRunner
from forewarn.waves.model import UnitRun, WaveRequest, plain
from forewarn.waves.units import WaveUnits, units_named


class WaveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cloud: str = Field(default="azure", description="azure (Azure VMs) or gce (Compute Engine instances)")
    type: str | None = Field(
        default=None,
        description="Azure: Freeze (default), Reboot or Redeploy; Compute Engine: SCHEDULED (default) or UNSCHEDULED",
    )
    by: str | None = Field(
        default=None,
        description="Azure: update-domain (default), fault-domain or host; Compute Engine: zone (default) or host",
    )
    concurrency: int = Field(
        default=1,
        strict=True,
        ge=1,
        le=MAX_CONCURRENCY,
        description="units (domains, zones or hosts) in flight at once",
    )
    groups: list[str] = Field(
        default_factory=list,
        description="Azure: scale sets, availability sets or VMs; Compute Engine: zones or instances; "
        "the whole fleet (of that cloud) when empty",
    )
    source: str | None = Field(default=None, description="Azure: Platform (default) or User")
    notice: str | None = Field(
        default=None,
        description="e.g. 15m; default: the type's notice (Azure), each instance's maintenance-event notice "
        "(Compute Engine: 60s, 1h with GPUs)",
    )
    duration_seconds: int | None = Field(
        default=None, strict=True, ge=-1, le=MAX_DURATION_SECONDS, description="DurationInSeconds; -1 means unknown"
    )
    impact_window: str | None = None
    description: str | None = None
    window: str | None = Field(default=None, description="Compute Engine: the window upcoming maintenance shows")
    can_reschedule: bool = Field(default=True, description="Compute Engine: the user may start or move it")
    latest: str | None = Field(
        default=None, description="Compute Engine: how much later than the start its user may reschedule it"
    )
    name: str = Field(default="", max_length=200)


class UnitOut(BaseModel):
    unit: str
    operations: list[str]


class WaveOut(BaseModel):
    wave_id: str
    name: str
    status: str
    cloud: str
    type: str = Field(description="Azure: the event type; Compute Engine: the maintenance type")
    by: str
    concurrency: int
    groups: list[str]
    units: int
    done: int
    skipped: list[str]
    next_unit: str | None
    in_flight: list[UnitOut]
    created_at: str
    finished_at: str | None

    @classmethod
    def of(cls, wave: Wave, in_flight: list[UnitOut] | None = None) -> WaveOut:
        """``in_flight``: the units in flight as ``shown`` showed them (None: shown here, at once)."""
        if in_flight is None:
            in_flight = [unit_out(wave, run) for run in wave.in_flight]
        return cls(
            wave_id=wave.wave_id,
            name=wave.spec.name,
            status=wave.status.value,
            cloud=plain(wave.spec.cloud),
            type=units_named(wave.spec.cloud).kind(wave.spec),
            by=plain(wave.spec.order),
            concurrency=wave.spec.concurrency,
            groups=list(wave.spec.groups),
            units=len(wave.units),
            done=wave.done,
            skipped=[wave.units[i] for i in wave.skipped],
            next_unit=wave.units[wave.next_unit] if wave.next_unit < len(wave.units) else None,
            in_flight=in_flight,
            created_at=format_time(wave.created_at),
            finished_at=format_optional_time(wave.finished_at),
        )


def unit_out(wave: Wave, run: UnitRun) -> UnitOut:
    return UnitOut(unit=wave.units[run.unit], operations=list(run.operations))


async def shown(wave: Wave) -> WaveOut:
    """``WaveOut.of(wave)``, its units in flight shown a turn of the event loop at a time (``app/turns.py``): a
    whole-fleet wave over a million VMs has 5,000 in flight, 25 ms of work at once."""
    in_flight = []
    turns = Turns()
    for run in wave.in_flight:
        in_flight.append(unit_out(wave, run))
        await turns.pause()
    return WaveOut.of(wave, in_flight)


class WaveOutcome(BaseModel):
    wave: WaveOut
    scheduled: int = Field(description="events this command scheduled")
    canceled: int = Field(description="events this command canceled")


class _Counts:
    """The events a wave's commands scheduled and canceled, counted as each command is answered. Their changes are not
    kept until the last: a wave's start or cancel over a million VMs makes a hundred thousand or more, which, freed
    at once with what only they held (the events a cancel ended), held the event loop for tens of milliseconds."""

    def __init__(self, units: WaveUnits, changes: list[Change]) -> None:
        self.units = units
        self.scheduled = self.canceled = 0
        self.add(changes)

    def add(self, changes: list[Change]) -> None:
        scheduled, canceled = self.units.scheduled_and_canceled(changes)
        self.scheduled += scheduled
        self.canceled += canceled


def _wave_order(wave_id: str) -> int:
    return int(wave_id.rsplit("-", 1)[-1])


def wave_request(body: WaveIn) -> tuple[WaveUnits, WaveRequest]:
    """The cloud's wave units a request names, and the request, its durations parsed."""
    units = units_named(body.cloud)
    order = None if body.by is None else parse_enum(WaveOrder, body.by, "wave order")
    return units, WaveRequest(
        cloud=units.cloud,
        type=body.type,
        by=None if order is None else order.value,
        concurrency=body.concurrency,
        groups=tuple(body.groups),
        source=body.source,
        notice=parse_optional_duration(body.notice),
        duration_seconds=body.duration_seconds,
        impact_window=parse_optional_duration(body.impact_window),
        description=body.description,
        window=parse_optional_duration(body.window),
        can_reschedule=body.can_reschedule,
        latest=parse_optional_duration(body.latest),
        name=body.name,
    )


def waves_router(service: Maintenance) -> APIRouter:
    router = APIRouter()

    async def outcome(wave_id: str, counts: _Counts, status_code: int = 200) -> Response:
        wave = service.settled_engine().component(WaveRunner).wave(wave_id)
        shown_wave = await shown(wave)
        return model_response(
            WaveOutcome(wave=shown_wave, scheduled=counts.scheduled, canceled=counts.canceled), status_code
        )

    @router.post("/v1/waves", tags=["waves"], response_model=WaveOutcome, status_code=201, responses=ERRORS)
    async def start_wave(body: WaveIn):
        """Start a wave: units (update domains, fault domains, zones or hosts) go in order, at most `concurrency`
        at a time; the next unit is scheduled as soon as every event of a unit has completed."""
        units, request = wave_request(body)
        spec = units.spec(request, units.orders[0] if request.by is None else WaveOrder(request.by))
        budget = MACHINES_PER_COMMAND
        # The command that starts it reads its targets' hosts (a hundred thousand at a million VMs): it schedules its
        # first unit only (a budget of one machine), so that it holds the event loop for that read and little more.
        changes = await service.perform_soon(lambda engine: engine.component(WaveRunner).start_wave(spec, 1))
        wave_id = next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))
        counts = _Counts(units, changes)
        # The rest of its first units, a command at a time, each committed: all at once, the first units of a wave
        # over a large fleet would hold the event loop (and every metadata request) for seconds. The command that
        # finds nothing left to schedule changes nothing and commits nothing.
        while more := await service.perform_soon(
            lambda engine: engine.component(WaveRunner).fill_wave(wave_id, budget)
        ):
            counts.add(more)
        return await outcome(wave_id, counts, status_code=201)

    @router.get("/v1/waves", tags=["waves"], response_model=list[WaveOut])
    async def list_waves():
        service.catch_up()
        waves = sorted(
            service.settled_engine().component(WaveRunner).waves.values(), key=lambda w: _wave_order(w.wave_id)
        )
        return await json_array([await shown(wave) for wave in waves], lambda out: out, WaveOut)

    @router.get("/v1/waves/{wave_id}", tags=["waves"], response_model=WaveOut, responses=ERRORS)
    async def get_wave(wave_id: str):
        service.catch_up()
        return model_response(await shown(service.settled_engine().component(WaveRunner).wave(wave_id)))

    @router.post("/v1/waves/{wave_id}/cancel", tags=["waves"], response_model=WaveOutcome, responses=ERRORS)
    async def cancel_wave(wave_id: str):
        """Stop a wave: nothing more is scheduled, and the Scheduled events of the units in flight are canceled
        (Started ones finish)."""
        budget = MACHINES_PER_COMMAND
        changes = await service.perform_soon(
            lambda engine: engine.component(WaveRunner).cancel_wave(wave_id, budget=budget)
        )
        cloud = service.settled_engine().component(WaveRunner).wave(wave_id).spec.cloud
        counts = _Counts(units_named(cloud), changes)
        # The rest of the units in flight, a command at a time, as a wave's start schedules them: a wave with
        # thousands of units in flight has tens of thousands of events to cancel.
        while more := await service.perform_soon(
            lambda engine: engine.component(WaveRunner).cancel_more(wave_id, budget)
        ):
            counts.add(more)
        return await outcome(wave_id, counts)

    return router
