"""The control API's Compute Engine routes: schedule host maintenance (live migration or termination, announced ahead
or with the instance's notice only: 60 seconds, an hour with GPUs), cancel it, Spot and preemptible preemption, host
errors, and what the Compute Engine API offers its users (simulateMaintenanceEvent, performMaintenance, setScheduling,
start), and rescheduling announced maintenance within its latest window start."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from forewarn.app.runtime import Check, Command, Maintenance, Parts, checked_then_made, sliced
from forewarn.control.models import ERRORS, ChangeOut, ChangeReport, json_array, let_go
from forewarn.control.service import ControlService
from forewarn.core.changes import Change
from forewarn.core.durations import parse_optional_duration
from forewarn.core.enums import parse_enum
from forewarn.core.errors import Invalid
from forewarn.core.times import parse_optional_time
from forewarn.engine.engine import Engine
from forewarn.gcp.changes import GceEventChanged, GceStateChanged
from forewarn.gcp.component import GcePlan, GceRequest, GcpComponent
from forewarn.gcp.fleet import gce_fleet
from forewarn.gcp.metadata.server import hanging_gets
from forewarn.gcp.model import MaintenanceKind, MaintenanceType, OnHostMaintenance
from forewarn.gcp.views import GceEventOut

_KINDS = {"migrate": MaintenanceKind.MIGRATE, "terminate": MaintenanceKind.TERMINATE}


class GceInstanceOut(BaseModel):
    name: str
    id: str
    project: str
    zone: str
    machine_type: str
    status: str
    host: str
    on_host_maintenance: str
    automatic_restart: bool
    provisioning_model: str
    preemptible: bool
    gpus: int
    maintenance_event: str = Field(description="the maintenance-event metadata value now")
    notice_seconds: float = Field(
        description="how long before its maintenance starts maintenance-event changes: 60, or 3600 with GPUs"
    )
    preempted: bool
    deleted: bool
    watched: bool = Field(description="asked for maintenance-event since its last maintenance (gets the notice)")
    upcoming: GceEventOut | None


class GceMaintenanceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instances: list[str] = Field(min_length=1)
    kind: str | None = Field(
        default=None, description="migrate or terminate (default: the instance's onHostMaintenance)"
    )
    notice: str | None = Field(
        default=None,
        description="time until the maintenance starts (default: each instance's maintenance-event notice only, "
        "60s, or 1h for an instance with GPUs)",
    )
    start: str | None = Field(default=None, description="explicit start, ISO 8601")
    window: str | None = Field(default=None, description="the window upcoming maintenance shows (default 1h)")
    can_reschedule: bool = Field(
        default=True, description="performMaintenance may start it early, rescheduling may move it (announced only)"
    )
    latest: str | None = Field(
        default=None,
        description="how much later than the start its user may reschedule it (latestWindowStartTime; default 0)",
    )
    type: str = Field(default="SCHEDULED", description="SCHEDULED or UNSCHEDULED")


class RescheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: str | None = Field(default=None, description="the new start, ISO 8601")
    notice: str | None = Field(default=None, description="or the time from now to the new start, e.g. 3d")


class GceInstancesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instances: list[str] = Field(min_length=1)


class SchedulingIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    on_host_maintenance: str | None = Field(default=None, description="MIGRATE or TERMINATE")
    automatic_restart: bool | None = None


class GceOutcomeOut(BaseModel):
    events: list[GceEventOut]
    instances: list[GceInstanceOut]


def _event_change(change: GceEventChanged) -> ChangeOut:
    event = change.event
    return ChangeOut(
        kind="gce_event",
        id=event.event_id,
        what=change.what,
        reason=change.reason,
        type=event.kind.value,
        status=event.state.value,
        targets=[event.instance],
    )


def _state_change(change: GceStateChanged) -> ChangeOut | None:
    if change.what == "watched":  # an agent read maintenance-event: bookkeeping, as the log says
        return None
    state = change.state
    return ChangeOut(
        kind="gce_instance",
        id=state.name,
        what=change.what,
        reason=change.reason,
        status=state.status.value,
        targets=[state.name],
    )


# Compute Engine's changes worth a line of ``clock next`` (control/models.py's change_out).
CHANGE_REPORTS: dict[type, ChangeReport] = {GceEventChanged: _event_change, GceStateChanged: _state_change}


def gcp(service: Maintenance) -> GcpComponent:
    """The Compute Engine component of the service's engine as the database has it."""
    return service.settled_engine().component(GcpComponent)


def instance_out(service: Maintenance, name: str) -> GceInstanceOut:
    component = gcp(service)
    record, state = component.gce_instance(name), component.gce_states[name]
    upcoming = component.upcoming(name)
    return GceInstanceOut(
        name=name,
        id=record.instance_id,
        project=record.project,
        zone=record.zone,
        machine_type=record.machine_type,
        status=state.status.value,
        host=state.host,
        on_host_maintenance=state.on_host_maintenance.value,
        automatic_restart=state.automatic_restart,
        provisioning_model=record.provisioning_model.value,
        preemptible=record.preemptible,
        gpus=record.gpus,
        maintenance_event=component.maintenance_event(name),
        notice_seconds=component.notice_of(name).total_seconds(),
        preempted=state.preempted,
        deleted=state.deleted,
        watched=state.watched,
        upcoming=None if upcoming is None else GceEventOut.of(upcoming),
    )


def outcome(service: Maintenance, changes: list[Change]) -> GceOutcomeOut:
    events = {c.event.event_id: c.event for c in changes if isinstance(c, GceEventChanged)}
    names = dict.fromkeys(
        [c.state.name for c in changes if isinstance(c, GceStateChanged)] + [e.instance for e in events.values()]
    )
    return GceOutcomeOut(
        events=[GceEventOut.of(e) for e in events.values()], instances=[instance_out(service, n) for n in names]
    )


router = APIRouter()


@router.get("/v1/gce/instances", tags=["gce"], response_model=list[GceInstanceOut])
async def instances(service: ControlService):
    service.catch_up()
    return [instance_out(service, name) for name in gce_fleet(service.settled_engine().fleet).instances]


@router.get("/v1/gce/instances/{name}", tags=["gce"], response_model=GceInstanceOut, responses=ERRORS)
async def instance(service: ControlService, name: str):
    service.catch_up()
    return instance_out(service, name)


@router.get("/v1/gce/hanging-gets", tags=["gce"])
async def held(service: ControlService) -> dict[str, int]:
    """How many ``wait_for_change`` GETs the metadata server holds now, unanswered."""
    return {"held": hanging_gets(service)}


@router.get("/v1/gce/maintenance", tags=["gce"], response_model=list[GceEventOut])
async def events(
    service: ControlService, all: bool = Query(False, description="include completed and canceled maintenance")
):
    service.catch_up()
    component = gcp(service)
    held = list(component.gce_events.values())
    if all:  # the ended events are read from the database, in a thread: at a million instances, seconds
        found = await asyncio.to_thread(component.all_gce_events, held)
    else:
        found = sorted((e for e in held if e.live), key=lambda e: e.seq)
    answer = await json_array(found, GceEventOut.of, GceEventOut)
    await let_go(found)  # the ended events decoded for it: only this list holds them
    return answer


@router.post("/v1/gce/maintenance", tags=["gce"], status_code=201, response_model=list[GceEventOut], responses=ERRORS)
async def schedule(service: ControlService, body: GceMaintenanceIn):
    """Host maintenance of instances, one event each. maintenance-event changes 60 seconds before the start, an
    hour for an instance with GPUs (at once when the start is closer); a start further ahead than that notice
    is announced to the instance as upcoming maintenance."""
    request = gce_request(body)
    changes = await service.perform_in_parts_soon(scheduling_in_parts(request))
    latest = {c.event.event_id: c.event for c in changes if isinstance(c, GceEventChanged)}
    return await json_array(list(latest.values()), GceEventOut.of, GceEventOut, status_code=201)


def scheduling_in_parts(request: GceRequest) -> Parts:
    """``schedule_gce`` as a command in parts (``perform_in_parts_soon``), a few hundred instances a part: a request
    may name some 80,000 instances (the body's megabyte), a second of the event loop in one command.
    As ``schedule_gce`` does: every instance is checked, then the request planned once (``plan_gce``: the instant
    every start counts from), then the starts checked, then the maintenance made from that plan."""
    names = tuple(dict.fromkeys(request.instances))
    if not names:
        raise Invalid("name at least one instance")
    planned: list[GcePlan] = []

    def gcp(engine: Engine) -> GcpComponent:
        return engine.component(GcpComponent)

    def plan(engine: Engine) -> None:
        planned[:] = [gcp(engine).plan_gce(request)]

    def instances_checked(some: Sequence[str]) -> Check:
        return lambda engine: gcp(engine).check_gce_instances(request, some)

    def starts_checked(some: Sequence[str]) -> Check:
        return lambda engine: gcp(engine).check_gce_starts(planned[0], some)

    def made(some: Sequence[str]) -> Command:
        return lambda engine: gcp(engine).create_gce(planned[0], some)

    parts = sliced(names)
    checks = [*map(instances_checked, parts), plan]
    if request.latest is not None:
        checks += map(starts_checked, parts)
    return checked_then_made(checks, [made(some) for some in parts])


def gce_request(body: GceMaintenanceIn) -> GceRequest:
    return GceRequest(
        instances=tuple(body.instances),
        kind=None if body.kind is None else _kind(body.kind),
        notice=parse_optional_duration(body.notice),
        start=parse_optional_time(body.start),
        window=parse_optional_duration(body.window),
        can_reschedule=body.can_reschedule,
        maintenance_type=parse_enum(MaintenanceType, body.type, "maintenance type"),
        latest=parse_optional_duration(body.latest),
    )


@router.post("/v1/gce/maintenance/{event_id}/cancel", tags=["gce"], response_model=GceEventOut, responses=ERRORS)
async def cancel(service: ControlService, event_id: str):
    await service.perform_soon(lambda engine: engine.component(GcpComponent).cancel_gce(event_id))
    return GceEventOut.of(gcp(service).gce_event(event_id))


@router.post(
    "/v1/gce/instances/{name}/simulate-maintenance", tags=["gce"], response_model=GceOutcomeOut, responses=ERRORS
)
async def simulate(service: ControlService, name: str):
    """What simulateMaintenanceEvent does: the instance's own maintenance behaviour, after its notice (60
    seconds; an hour for an instance with GPUs)."""
    return outcome(
        service, await service.perform_soon(lambda engine: engine.component(GcpComponent).simulate_gce(name))
    )


@router.post(
    "/v1/gce/instances/{name}/perform-maintenance", tags=["gce"], response_model=GceOutcomeOut, responses=ERRORS
)
async def perform(service: ControlService, name: str):
    """What performMaintenance does: maintenance-event changes now and the announced maintenance starts 60
    seconds later (GPU instances too: the maintenance starts at once when its user asks)."""
    return outcome(
        service, await service.perform_soon(lambda engine: engine.component(GcpComponent).perform_maintenance(name))
    )


@router.post(
    "/v1/gce/instances/{name}/reschedule-maintenance", tags=["gce"], response_model=GceOutcomeOut, responses=ERRORS
)
async def reschedule(service: ControlService, name: str, body: RescheduleIn):
    """Move announced maintenance (pending, can-reschedule) to another start: no earlier than the instance's
    notice from now (60 seconds; an hour with GPUs), no later than its latest window start. Compute Engine's API
    has no such method for a VM: this is the user's choice of time that docs/gcp.md ("Rescheduling")
    describes."""
    start, notice = parse_optional_time(body.start), parse_optional_duration(body.notice)
    return outcome(
        service,
        await service.perform_soon(lambda engine: engine.component(GcpComponent).reschedule_gce(name, start, notice)),
    )


@router.post("/v1/gce/instances/{name}/scheduling", tags=["gce"], response_model=GceOutcomeOut, responses=ERRORS)
async def scheduling(service: ControlService, name: str, body: SchedulingIn):
    """What setScheduling does, with Compute Engine's checks (Spot, preemptible and GPU instances TERMINATE)."""
    policy = (
        None
        if body.on_host_maintenance is None
        else parse_enum(OnHostMaintenance, body.on_host_maintenance, "onHostMaintenance")
    )
    return outcome(
        service,
        await service.perform_soon(
            lambda engine: engine.component(GcpComponent).set_scheduling(name, policy, body.automatic_restart)
        ),
    )


@router.post("/v1/gce/instances/{name}/watch", tags=["gce"], response_model=GceOutcomeOut, responses=ERRORS)
async def watch(service: ControlService, name: str):
    """As if the instance read maintenance-event: its next maintenance gets the notice (a scenario's
    watcher, without a metadata client)."""
    gcp(service).gce_instance(name)
    return outcome(service, await service.perform_soon(lambda engine: engine.component(GcpComponent).watch(name)))


@router.post("/v1/gce/instances/{name}/start", tags=["gce"], response_model=GceOutcomeOut, responses=ERRORS)
async def start(service: ControlService, name: str):
    return outcome(service, await service.perform_soon(lambda engine: engine.component(GcpComponent).start_gce(name)))


@router.post("/v1/gce/preempt", tags=["gce"], response_model=GceOutcomeOut, responses=ERRORS)
async def preempt(service: ControlService, body: GceInstancesIn):
    """Preempt Spot or preemptible instances: preempted is TRUE now, they stop (or are deleted) 30 s later."""
    return outcome(
        service, await service.perform_soon(lambda engine: engine.component(GcpComponent).preempt(body.instances))
    )


@router.post("/v1/gce/host-error", tags=["gce"], response_model=GceOutcomeOut, responses=ERRORS)
async def host_error(service: ControlService, body: GceInstancesIn):
    """The instances' host fails: they crash without notice and restart elsewhere if automaticRestart."""
    return outcome(
        service, await service.perform_soon(lambda engine: engine.component(GcpComponent).host_error(body.instances))
    )


def _kind(text: str) -> MaintenanceKind:
    found = _KINDS.get(text.lower())
    if found is None:
        return parse_enum(MaintenanceKind, text, "maintenance kind")
    return found
