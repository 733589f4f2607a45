"""Compute Engine's part of the dashboard: its instances in the fleet view, its maintenance events and instances in
the live stream."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from forewarn.app.runtime import Maintenance
from forewarn.cloud import MachineRow, MachineState, Touched
from forewarn.control.models import ERRORS
from forewarn.core.errors import Invalid
from forewarn.engine.engine import Engine
from forewarn.gcp.changes import GceEventChanged, GceStateChanged
from forewarn.gcp.component import GcpComponent
from forewarn.gcp.fleet import gce_fleet
from forewarn.gcp.model import EventState, GceMaintenance, GceState, InstanceStatus
from forewarn.gcp.views import GceEventOut

MAINTENANCE_EVENT_PATH = "/computeMetadata/v1/instance/maintenance-event"


def states_from_events(engine: Engine, wanted: Iterable[str], whole_fleet: bool) -> dict[str, int]:
    """Announced or notified maintenance is scheduled, a live migration under way started. A few instances (one
    commit's): their own events; the whole fleet: one pass over every event."""
    gcp = engine.component(GcpComponent)
    events = gcp.gce_events.values() if whole_fleet else (e for n in wanted for e in gcp.gce_events_of(n))
    from_events: dict[str, int] = {}
    for event in events:
        if event.live:
            code = MachineState.STARTED if event.state is EventState.ONGOING else MachineState.SCHEDULED
            if from_events.get(event.instance, MachineState.OK) < code:
                from_events[event.instance] = code
    return from_events


def state_of(state: GceState, from_events: int | None) -> int:
    """A preempted Spot or preemptible instance is started during its 30-second notice, evicted once stopped or
    deleted; an instance down for maintenance (or after a host error, until automaticRestart) impacted."""
    if state.preempted:
        return MachineState.STARTED if state.status is InstanceStatus.STOPPING else MachineState.EVICTED
    if state.deleted:
        return MachineState.DELETED
    if state.status is not InstanceStatus.RUNNING:
        down_for_platform = state.restart_at is not None or from_events == MachineState.STARTED
        return MachineState.IMPACTED if down_for_platform else MachineState.STOPPED
    return from_events or MachineState.OK


def note_event(change: GceEventChanged, touched: Touched) -> None:
    touched.events[change.event.event_id] = change.event
    touched.machines[change.event.instance] = None


def note_state(change: GceStateChanged, touched: Touched) -> None:
    touched.machines[change.state.name] = None


class GcePanel:
    events_key = "gce_events"

    def machines(self, engine: Engine) -> Iterator[MachineRow]:
        for name, gce in gce_fleet(engine.fleet).instances.items():
            yield MachineRow(name, f"Compute Engine {gce.zone}", gce.zone, 0)

    def machine_count(self, engine: Engine) -> int:
        return len(gce_fleet(engine.fleet).instances)

    def states(self, engine: Engine, names: Iterable[str] | None = None) -> dict[str, int]:
        instances = gce_fleet(engine.fleet).instances
        wanted = list(instances) if names is None else [n for n in names if n in instances]
        from_events = states_from_events(engine, wanted, whole_fleet=names is None)
        gce_states = engine.component(GcpComponent).gce_states
        return {name: state_of(gce_states[name], from_events.get(name)) for name in wanted}

    def host_of(self, engine: Engine) -> Callable[[str], str]:
        states = engine.component(GcpComponent).gce_states
        return lambda name: states[name].host

    def noting(self) -> Mapping[type, Callable[[Any, Touched], None]]:
        return {GceEventChanged: note_event, GceStateChanged: note_state}

    def event_json(self, event: GceMaintenance) -> dict[str, Any]:
        return GceEventOut.of(event).model_dump()

    def unseen(self, engine: Engine, machines: Iterable[str]) -> bool:
        return False

    def views_router(self, service: Maintenance, views: Any) -> APIRouter:
        router = APIRouter()

        @router.get("/v1/gce/instances/{name}/metadata", tags=["gce"], responses=ERRORS)
        async def gce_metadata(
            name: str, path: str = Query(MAINTENANCE_EVENT_PATH, description="a metadata server path")
        ) -> Response:
            """What the instance's metadata server answers for ``path`` now (a plain GET with ``Metadata-Flavor:
            Google``): the same status, bytes, content type and ``ETag`` (by default its maintenance-event; a path it
            does not have: its 404 page). Reading it here does not count as the instance asking for maintenance-event:
            it does not earn the instance the maintenance-event notice."""
            service.catch_up()
            service.settled_engine().component(GcpComponent).gce_instance(name)
            if not path.startswith("/"):
                raise Invalid(f"path must start with '/': {path!r}")
            if views.gce_metadata is None:
                raise Invalid("this server has no Compute Engine metadata surface")
            status, body, content_type, tag = views.gce_metadata(name, path)
            return Response(body, status_code=status, media_type=content_type, headers={"etag": tag} if tag else None)

        return router


PANEL = GcePanel()
