"""The control API's EC2 routes: schedule, cancel and reschedule EC2 instance events; start instances; Spot
interruptions and rebalance recommendations (what AWS does on its side and no public API can trigger)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from forewarn.app.runtime import Check, Command, Maintenance, Parts, checked_then_made, nth_slice, sliced
from forewarn.aws.changes import Ec2EventChanged, Ec2StateChanged
from forewarn.aws.component import Ec2Component, Ec2Plan, Ec2Request
from forewarn.aws.model import Ec2Code, Ec2EventState
from forewarn.aws.views import Ec2EventOut
from forewarn.control.models import ERRORS, ChangeOut, ChangeReport, json_array, let_go
from forewarn.control.service import ControlService
from forewarn.core.changes import Change
from forewarn.core.durations import parse_optional_duration
from forewarn.core.enums import parse_enum
from forewarn.core.errors import Invalid
from forewarn.core.times import format_optional_time, format_time, parse_optional_time, parse_time
from forewarn.engine.engine import Engine


class InstanceOut(BaseModel):
    instance_id: str
    name: str
    state: str
    host: str
    instance_type: str
    availability_zone: str
    root_device: str
    spot: bool
    auto_scaling_group: str | None
    lifecycle_state: str
    launched_at: str
    booted_at: str
    impacted_by: str | None
    replaces: str | None
    spot_action: str | None
    spot_action_time: str | None
    rebalance_at: str | None


class Ec2EventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str = Field(
        description="instance-reboot, system-reboot, system-maintenance, instance-retirement, instance-stop",
        examples=["system-reboot"],
    )
    instances: list[str] = Field(min_length=1)
    notice: str | None = Field(default=None, description="time until NotBefore (default 14d)")
    not_before: str | None = Field(default=None, description="explicit NotBefore, ISO 8601")
    window: str | None = Field(
        default=None, description="NotAfter - NotBefore (default 2h for reboots and maintenance)"
    )
    no_not_after: bool = False
    deadline: str | None = Field(
        default=None, description="NotBeforeDeadline - NotBefore (default 21d for reboots and maintenance)"
    )
    no_deadline: bool = False
    description: str | None = None


class RescheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    not_before: str


class SpotIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instances: list[str] = Field(min_length=1)
    action: str = Field(default="terminate", description="terminate, stop or hibernate")


class Ec2OutcomeOut(BaseModel):
    events: list[Ec2EventOut]
    instances: list[InstanceOut]


def _event_change(change: Ec2EventChanged) -> ChangeOut:
    event = change.event
    return ChangeOut(
        kind="ec2_event",
        id=event.event_id,
        what=change.what,
        reason=change.reason,
        type=event.code.value,
        status=event.state.value,
        targets=[event.instance_id],
    )


def _state_change(change: Ec2StateChanged) -> ChangeOut:
    state = change.state
    return ChangeOut(
        kind="instance",
        id=state.instance_id,
        what=change.what,
        reason=change.reason,
        status=state.state.value,
        targets=[state.instance_id],
    )


# EC2's changes worth a line of ``clock next`` (control/models.py's change_out).
CHANGE_REPORTS: dict[type, ChangeReport] = {Ec2EventChanged: _event_change, Ec2StateChanged: _state_change}


def ec2(service: Maintenance) -> Ec2Component:
    """The EC2 component of the service's engine as the database has it."""
    return service.settled_engine().component(Ec2Component)


def instance_out(service: Maintenance, instance_id: str) -> InstanceOut:
    component = ec2(service)
    record, state = component.ec2_instances[instance_id], component.ec2_states[instance_id]
    return InstanceOut(
        instance_id=instance_id,
        name=record.name,
        state=state.state.value,
        host=state.host,
        instance_type=record.instance_type,
        availability_zone=record.availability_zone,
        root_device=record.root_device,
        spot=record.spot,
        auto_scaling_group=record.auto_scaling_group,
        lifecycle_state=state.lifecycle_state,
        launched_at=format_time(state.launched_at),
        booted_at=format_time(state.booted_at),
        impacted_by=state.impacted_by,
        replaces=state.origin,
        spot_action=state.spot_action,
        spot_action_time=format_optional_time(state.spot_action_time),
        rebalance_at=format_optional_time(state.rebalance_at),
    )


def outcome(service: Maintenance, changes: list[Change]) -> Ec2OutcomeOut:
    events = {c.event.event_id: c.event for c in changes if isinstance(c, Ec2EventChanged)}
    instances = dict.fromkeys(c.state.instance_id for c in changes if isinstance(c, Ec2StateChanged))
    return Ec2OutcomeOut(
        events=[Ec2EventOut.of(e) for e in events.values()], instances=[instance_out(service, i) for i in instances]
    )


router = APIRouter()


@router.get("/v1/ec2/instances", tags=["ec2"], response_model=list[InstanceOut])
async def instances(service: ControlService):
    service.catch_up()
    return [instance_out(service, iid) for iid in ec2(service).ec2_instances]


@router.get("/v1/ec2/instances/{instance_id}", tags=["ec2"], response_model=InstanceOut, responses=ERRORS)
async def instance(service: ControlService, instance_id: str):
    service.catch_up()
    ec2(service).ec2_instance(instance_id)
    return instance_out(service, instance_id)


@router.get("/v1/ec2/events", tags=["ec2"], response_model=list[Ec2EventOut])
async def events(
    service: ControlService, all: bool = Query(False, description="include completed and canceled events")
):
    service.catch_up()
    component = ec2(service)
    held = list(component.ec2_events.values())
    if all:  # the ended events are read from the database, in a thread: at a million instances, seconds
        found = await asyncio.to_thread(component.all_ec2_events, held)
    else:
        found = sorted((e for e in held if e.state is Ec2EventState.ACTIVE), key=lambda e: e.seq)
    answer = await json_array(found, Ec2EventOut.of, Ec2EventOut)
    await let_go(found)  # the ended events decoded for it: only this list holds them
    return answer


@router.post("/v1/ec2/events", tags=["ec2"], status_code=201, response_model=list[Ec2EventOut], responses=ERRORS)
async def schedule(service: ControlService, body: Ec2EventIn):
    """Schedule an EC2 event on instances: one event each."""
    request = ec2_request(body)
    changes = await service.perform_in_parts_soon(scheduling_in_parts(request))
    events = [c.event for c in changes if isinstance(c, Ec2EventChanged)]
    return await json_array(events, Ec2EventOut.of, Ec2EventOut, status_code=201)


def scheduling_in_parts(request: Ec2Request) -> Parts:
    """``schedule_ec2`` as a command in parts (``perform_in_parts_soon``), a few hundred instances a part: a request
    may name some 40,000 instances (the body's megabyte), 0.4 s of the event loop in one command. Every instance
    is checked, then the request planned once (``plan_ec2``: its NotBefore), then the events made from that plan."""
    if not request.instances:
        raise Invalid("name at least one instance")
    planned: list[Ec2Plan] = []

    def ec2(engine: Engine) -> Ec2Component:
        return engine.component(Ec2Component)

    def plan(engine: Engine) -> None:
        planned[:] = [ec2(engine).plan_ec2(request)]

    def checked(some: Sequence[str]) -> Check:
        return lambda engine: ec2(engine).check_ec2_instances(request, some)

    def made(index: int) -> Command:  # the plan's instances are ids, known once it is made
        return lambda engine: ec2(engine).create_ec2(planned[0], nth_slice(planned[0].instances, index))

    checks = [checked(some) for some in sliced(request.instances)]
    return checked_then_made([*checks, plan], [made(index) for index in range(len(checks))])


def ec2_request(body: Ec2EventIn) -> Ec2Request:
    return Ec2Request(
        code=parse_enum(Ec2Code, body.code, "event code"),
        instances=tuple(body.instances),
        notice=parse_optional_duration(body.notice),
        not_before=parse_optional_time(body.not_before),
        window=parse_optional_duration(body.window),
        no_not_after=body.no_not_after,
        deadline=parse_optional_duration(body.deadline),
        no_deadline=body.no_deadline,
        description=body.description,
    )


@router.post("/v1/ec2/events/{event_id}/cancel", tags=["ec2"], response_model=Ec2EventOut, responses=ERRORS)
async def cancel(service: ControlService, event_id: str):
    await service.perform_soon(lambda engine: engine.component(Ec2Component).cancel_ec2(event_id))
    return Ec2EventOut.of(ec2(service).ec2_event(event_id))


@router.post("/v1/ec2/events/{event_id}/reschedule", tags=["ec2"], response_model=Ec2EventOut, responses=ERRORS)
async def reschedule(service: ControlService, event_id: str, body: RescheduleIn):
    """What ModifyInstanceEventStartTime does, with the same rules."""
    event = ec2(service).ec2_event(event_id)
    when = parse_time(body.not_before)
    await service.perform_soon(
        lambda engine: engine.component(Ec2Component).reschedule_ec2(event.instance_id, event_id, when)
    )
    return Ec2EventOut.of(ec2(service).ec2_event(event_id))


@router.post("/v1/ec2/instances/{instance_id}/start", tags=["ec2"], response_model=Ec2OutcomeOut, responses=ERRORS)
async def start(service: ControlService, instance_id: str):
    """Start a stopped instance (after an instance-stop event it comes up on a new host)."""
    return outcome(
        service, await service.perform_soon(lambda engine: engine.component(Ec2Component).start_instance(instance_id))
    )


@router.post("/v1/ec2/spot/interrupt", tags=["ec2"], response_model=Ec2OutcomeOut, responses=ERRORS)
async def interrupt(service: ControlService, body: SpotIn):
    """A Spot interruption notice: the action happens two minutes later."""
    return outcome(
        service,
        await service.perform_soon(
            lambda engine: engine.component(Ec2Component).interrupt_spot(body.instances, body.action)
        ),
    )


@router.post("/v1/ec2/spot/rebalance", tags=["ec2"], response_model=Ec2OutcomeOut, responses=ERRORS)
async def rebalance(service: ControlService, body: SpotIn):
    """A rebalance recommendation for Spot instances."""
    return outcome(
        service,
        await service.perform_soon(lambda engine: engine.component(Ec2Component).recommend_rebalance(body.instances)),
    )


@router.get("/v1/deliveries", tags=["ec2"])
async def deliveries(service: ControlService, limit: int = Query(1000, ge=1, le=100000)):
    """Outgoing messages (AWS Health events): status pending, delivered or expired, attempts, last error."""
    return service.deliveries(limit)
