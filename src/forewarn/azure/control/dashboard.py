"""Azure's part of the dashboard: its VMs in the fleet view, its events and VMs in the live stream."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from fastapi import APIRouter

from forewarn.app.runtime import Maintenance
from forewarn.azure.changes import EventChanged, VmChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.control.events import resolved
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import Event, EventStatus
from forewarn.azure.views import EventOut
from forewarn.azure.vms import VM, Power
from forewarn.cloud import MachineRow, MachineState, Touched
from forewarn.control.models import ERRORS
from forewarn.engine.engine import Engine


def group_of(vm: VM) -> str:
    if vm.scale_set:
        return f"scale set {vm.scale_set}"
    return f"availability set {vm.availability_set}" if vm.availability_set else "standalone"


def states_from_events(engine: Engine, scopes: Iterable[str]) -> dict[str, int]:
    """The most serious state the live events of ``scopes`` give each VM they name."""
    from_events: dict[str, int] = {}
    for scope in scopes:
        for event in engine.component(AzureComponent).live_events(scope):
            code = MachineState.STARTED if event.status is EventStatus.STARTED else MachineState.SCHEDULED
            for resource in event.resources:
                if from_events.get(resource, MachineState.OK) < code:
                    from_events[resource] = code
    return from_events


def note_event(change: EventChanged, touched: Touched) -> None:
    touched.events[change.event.event_id] = change.event
    touched.machines.update(dict.fromkeys(change.event.resources))


def note_vm(change: VmChanged, touched: Touched) -> None:
    touched.machines[change.state.name] = None


class AzurePanel:
    events_key = "events"

    def machines(self, engine: Engine) -> Iterator[MachineRow]:
        for vm in azure_fleet(engine.fleet).vms.values():
            yield MachineRow(vm.name, group_of(vm), f"{vm.location} {vm.zone}".strip(), vm.update_domain)

    def machine_count(self, engine: Engine) -> int:
        return len(azure_fleet(engine.fleet).vms)

    def states(self, engine: Engine, names: Iterable[str] | None = None) -> dict[str, int]:
        """From each VM's power state and the live events that name it."""
        fleet = engine.fleet
        wanted = azure_fleet(fleet).vms.keys() if names is None else [n for n in names if n in azure_fleet(fleet).vms]
        scopes = (
            {azure_fleet(fleet).vms[name].scope for name in wanted}
            if names is not None
            else azure_fleet(fleet).vms_by_scope.keys()
        )
        from_events = states_from_events(engine, scopes)
        power_of = engine.component(AzureComponent).vm_states.power
        states: dict[str, int] = {}
        for name in wanted:
            code = from_events.get(name, MachineState.OK)
            power = power_of(name)
            if power is Power.DELETED:
                code = MachineState.EVICTED if azure_fleet(fleet).vms[name].spot else MachineState.DELETED
            elif power is not Power.RUNNING:
                code = MachineState.IMPACTED
            states[name] = code
        return states

    def host_of(self, engine: Engine) -> Callable[[str], str]:
        return engine.component(AzureComponent).vm_states.host

    def noting(self) -> Mapping[type, Callable[[Any, Touched], None]]:
        return {EventChanged: note_event, VmChanged: note_vm}

    def event_json(self, event: Event) -> dict[str, Any]:
        return EventOut.of(event).model_dump()

    def unseen(self, engine: Engine, machines: Iterable[str]) -> bool:
        return False

    def views_router(self, service: Maintenance, views: Any) -> APIRouter:
        router = APIRouter()

        @router.get("/v1/events/{event_id}/central", tags=["events"], responses=ERRORS)
        async def central(event_id: str) -> dict:
            """The event's row in Resource Graph's maintenanceresources as it is now (null when its VMs' policy does
            not publish centrally, or the ARM port is off)."""
            event_id = await resolved(service, event_id)
            row = views.central_row(event_id) if views.central_row is not None else None
            return {"event_id": event_id, "resource_graph": row}

        return router


PANEL = AzurePanel()
