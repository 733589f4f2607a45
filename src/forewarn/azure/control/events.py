"""The control API's Azure event routes: schedule, list, show, approve and cancel events, the fleet's VMs and
scopes, and the document each VM's IMDS serves."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.changes import EventChanged, VmChanged
from forewarn.azure.component import MAX_EXTRA_IMPACTS, AzureComponent
from forewarn.azure.control.imds import ServedImds
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.imds.scheduled_events import SCHEDULED_EVENTS_VERSIONS
from forewarn.azure.model import EventSource, EventType, ScheduleRequest
from forewarn.azure.views import EventOut
from forewarn.azure.vms import VM
from forewarn.control.models import ERRORS, ChangeOut, ChangeReport, json_array, let_go
from forewarn.control.service import ControlService
from forewarn.core.bounds import MAX_DURATION_SECONDS
from forewarn.core.durations import parse_optional_duration
from forewarn.core.enums import parse_enum
from forewarn.core.errors import Invalid
from forewarn.core.times import parse_optional_time


class ScheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = Field(description="Freeze, Reboot, Redeploy, Preempt or Terminate", examples=["Freeze"])
    vms: list[str] = Field(default_factory=list, description="VM names")
    hosts: list[str] = Field(default_factory=list, description="host names: every VM on them is affected")
    source: str = Field(default="Platform", description="Platform or User")
    notice: str | None = Field(default=None, description="time until NotBefore: 30s, 15m, PT15M (default per type)")
    not_before: str | None = Field(default=None, description="explicit NotBefore, ISO 8601 (instead of notice)")
    duration_seconds: int | None = Field(
        default=None, strict=True, ge=-1, le=MAX_DURATION_SECONDS, description="DurationInSeconds; -1 means unknown"
    )
    description: str | None = None
    impact_window: str | None = Field(default=None, description="how long the event stays Started (default per type)")
    extra_impacts: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=MAX_EXTRA_IMPACTS,
        description="short freezes while Started (Azure may impact a VM more than once)",
    )
    group: str | None = Field(default=None, description="a scale set or availability set, with a domain")
    update_domain: int | None = Field(
        default=None, strict=True, ge=0, description="with group: the VMs of this update domain"
    )
    fault_domain: int | None = Field(
        default=None, strict=True, ge=0, description="with group: the VMs of this fault domain"
    )


class ApproveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    event_ids: list[str]
    by: str = "control"


def azure(service: Maintenance) -> AzureComponent:
    """The Azure component of the service's engine as the database has it."""
    return service.settled_engine().component(AzureComponent)


async def resolved(service: Maintenance, text: str) -> str:
    """The EventId ``text`` names (AzureComponent.resolve_event_id). The EventIds of a prefix are read in a thread:
    no index holds them, and reading every event would hold the event loop a third of a second at a million events."""
    prefix = azure(service).prefix_to_search(text)
    starting = None if prefix is None else await asyncio.to_thread(azure(service).ids_starting, prefix)
    return azure(service).resolve_event_id(text, starting)


def _event_change(change: EventChanged) -> ChangeOut:
    event = change.event
    return ChangeOut(
        kind="event",
        id=event.event_id,
        what=change.what,
        reason=change.reason,
        type=event.event_type.value,
        status=event.status.value,
        targets=list(event.resources),
    )


def _vm_change(change: VmChanged) -> ChangeOut:
    return ChangeOut(
        kind="vm",
        id=change.state.name,
        what=change.what,
        reason=change.reason,
        status=change.state.power.value,
        targets=[change.state.name],
    )


# Azure's changes worth a line of ``clock next`` (control/models.py's change_out).
CHANGE_REPORTS: dict[type, ChangeReport] = {EventChanged: _event_change, VmChanged: _vm_change}


# The event routes, in the order the OpenAPI document lists them; ``document_router`` is included after them where
# the server runs the metadata listener.
router = APIRouter()
document_router = APIRouter()


@router.get("/v1/events", tags=["events"], response_model=list[EventOut])
async def list_events(
    service: ControlService, all: bool = Query(False, description="include Completed and Canceled events")
):
    service.catch_up()
    component = azure(service)
    held = list(component.events.values())
    if all:  # the ended events are read from the database, in a thread: at a million VMs, seconds
        events = await asyncio.to_thread(component.all_events, held)
    else:
        events = sorted((event for event in held if event.status.live), key=lambda e: e.seq)
    answer = await json_array(events, EventOut.of, EventOut)
    await let_go(events)  # the ended events decoded for it: only this list holds them
    return answer


@router.post("/v1/events", tags=["events"], status_code=201, response_model=list[EventOut], responses=ERRORS)
async def schedule(service: ControlService, body: ScheduleIn):
    # Committed with the other commands that arrive while the transaction before theirs is under way (group
    # commit); answered once durable.
    events = await azure_commands.schedule_soon(service, schedule_request(body))
    return await json_array(events, EventOut.of, EventOut, status_code=201)


def schedule_request(body: ScheduleIn) -> ScheduleRequest:
    return ScheduleRequest(
        event_type=parse_enum(EventType, body.type, "event type"),
        vms=tuple(body.vms),
        hosts=tuple(body.hosts),
        source=parse_enum(EventSource, body.source, "event source"),
        notice=parse_optional_duration(body.notice),
        not_before=parse_optional_time(body.not_before),
        duration_seconds=body.duration_seconds,
        description=body.description,
        impact_window=parse_optional_duration(body.impact_window),
        extra_impacts=body.extra_impacts,
        group=body.group,
        update_domain=body.update_domain,
        fault_domain=body.fault_domain,
    )


@router.get("/v1/events/{event_id}", tags=["events"], response_model=EventOut, responses=ERRORS)
async def get_event(service: ControlService, event_id: str):
    service.catch_up()
    return EventOut.of(azure(service).event(await resolved(service, event_id)))


@router.get("/v1/events/{event_id}/journal", tags=["events"], responses=ERRORS)
async def event_journal(service: ControlService, event_id: str):
    event = azure(service).event(await resolved(service, event_id))
    # The journal has no index by event (one more write at a random place for each of its rows): its rows are read
    # in a thread, the event loop answering others meanwhile.
    entries = await asyncio.to_thread(service.journal, event.event_id)
    return [{"at": entry.at, "what": entry.kind, **entry.detail} for entry in entries]


@router.post("/v1/approvals", tags=["events"], response_model=list[EventOut], responses=ERRORS)
async def approve(service: ControlService, body: ApproveIn):
    ids = [await resolved(service, event_id) for event_id in body.event_ids]
    await azure_commands.approve_soon(service, ids, by=body.by)  # through the group commit, as every command
    return [EventOut.of(azure(service).event(event_id)) for event_id in ids]


@router.post("/v1/events/{event_id}/approve", tags=["events"], response_model=EventOut, responses=ERRORS)
async def approve_one(service: ControlService, event_id: str):
    event_id = await resolved(service, event_id)
    await azure_commands.approve_soon(service, [event_id], by="control")
    return EventOut.of(azure(service).event(event_id))


@router.post("/v1/events/{event_id}/cancel", tags=["events"], response_model=EventOut, responses=ERRORS)
async def cancel(service: ControlService, event_id: str):
    event_id = await resolved(service, event_id)
    await azure_commands.cancel_soon(service, event_id)
    return EventOut.of(azure(service).event(event_id))


@router.get("/v1/fleet", tags=["fleet"])
async def fleet(service: ControlService):
    engine = service.settled_engine()
    vms = azure_fleet(engine.fleet)
    return {
        "default_vm": engine.fleet.default_vm,
        "hosts": [
            {"name": name, "vms": [vm.name for vm in vms.vms_by_host.get(name, ())]} for name in engine.fleet.hosts
        ],
        "scopes": [
            {
                "scope": scope,
                "incarnation": engine.component(AzureComponent).incarnation(scope),
                "vms": [vm.name for vm in in_scope],
            }
            for scope, in_scope in vms.vms_by_scope.items()
        ],
        "vms": [fleet_vm(vm) for vm in vms.vms.values()],
    }


def fleet_vm(vm: VM) -> dict[str, object]:
    """A VM as ``/v1/fleet`` lists it: where it runs, what it belongs to, where its IMDS listens."""
    return {
        "name": vm.name,
        "host": vm.host,
        "scope": vm.scope,
        "subscription_id": vm.subscription_id,
        "resource_group": vm.resource_group,
        "availability_set": vm.availability_set,
        "scale_set": vm.scale_set,
        "location": vm.location,
        "zone": vm.zone,
        "size": vm.size,
        "fault_domain": vm.fault_domain,
        "update_domain": vm.update_domain,
        "spot": vm.spot,
        "vm_id": vm.vm_id,
        "imds_address": vm.imds_address,
        "imds_port": vm.imds_port,
    }


@document_router.get("/v1/vms/{name}/scheduledevents", tags=["fleet"], responses=ERRORS)
async def vm_document(
    service: ControlService, imds: ServedImds, name: str, api_version: str = Query("2020-07-01", alias="api-version")
):
    """The scheduled-events document this VM's IMDS serves right now (same bytes, same ETag)."""
    vm = azure_fleet(service.settled_engine().fleet).vm(name)
    if api_version not in SCHEDULED_EVENTS_VERSIONS:
        raise Invalid(f"unknown api-version {api_version!r}; expected one of {', '.join(SCHEDULED_EVENTS_VERSIONS)}")
    service.catch_up()
    body, etag = imds.document_with_etag(vm.scope, api_version)
    return Response(body, media_type="application/json", headers={"etag": etag})
