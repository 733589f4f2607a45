"""EC2's part of the dashboard: its instances in the fleet view, its events and instances in the live stream."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from forewarn.app.runtime import Maintenance
from forewarn.aws.changes import Ec2EventChanged, Ec2StateChanged
from forewarn.aws.component import Ec2Component
from forewarn.aws.fleet import ec2_fleet
from forewarn.aws.model import Ec2Event, Ec2EventState, Ec2State, InstanceState
from forewarn.aws.views import Ec2EventOut
from forewarn.cloud import MachineRow, MachineState, Touched
from forewarn.control.models import ERRORS
from forewarn.core.errors import Invalid
from forewarn.engine.engine import Engine

SCHEDULED_PATH = "/latest/meta-data/events/maintenance/scheduled"


def state_of(state: Ec2State, spot: bool, has_active_event: bool) -> int:
    if state.state is InstanceState.TERMINATED:
        return MachineState.EVICTED if spot and state.spot_action else MachineState.DELETED
    if state.state is InstanceState.STOPPED:
        return MachineState.STOPPED
    if state.impacted_by is not None or state.state is not InstanceState.RUNNING:
        return MachineState.IMPACTED
    if state.spot_action is not None:
        return MachineState.STARTED
    return MachineState.SCHEDULED if has_active_event else MachineState.OK


def note_event(change: Ec2EventChanged, touched: Touched) -> None:
    touched.events[change.event.event_id] = change.event
    touched.machines[change.event.instance_id] = None


def note_state(change: Ec2StateChanged, touched: Touched) -> None:
    touched.machines[change.state.instance_id] = None


class Ec2Panel:
    events_key = "ec2_events"

    def machines(self, engine: Engine) -> Iterator[MachineRow]:
        for instance_id, instance in engine.component(Ec2Component).ec2_instances.items():
            group = f"auto scaling group {instance.auto_scaling_group}" if instance.auto_scaling_group else "EC2"
            yield MachineRow(instance_id, group, instance.availability_zone, 0, instance.tags.get("Name", ""))

    def machine_count(self, engine: Engine) -> int:
        return len(engine.component(Ec2Component).ec2_instances)

    def states(self, engine: Engine, names: Iterable[str] | None = None) -> dict[str, int]:
        ec2 = engine.component(Ec2Component)
        instances = ec2.ec2_instances
        wanted = instances.keys() if names is None else [i for i in names if i in instances]
        active = {event.instance_id for event in ec2.ec2_events.values() if event.state is Ec2EventState.ACTIVE}
        return {
            instance_id: state_of(ec2.ec2_states[instance_id], instances[instance_id].spot, instance_id in active)
            for instance_id in wanted
        }

    def host_of(self, engine: Engine) -> Callable[[str], str]:
        states = engine.component(Ec2Component).ec2_states
        return lambda instance_id: states[instance_id].host

    def noting(self) -> Mapping[type, Callable[[Any, Touched], None]]:
        return {Ec2EventChanged: note_event, Ec2StateChanged: note_state}

    def event_json(self, event: Ec2Event) -> dict[str, Any]:
        return Ec2EventOut.of(event).model_dump()

    def unseen(self, engine: Engine, machines: Iterable[str]) -> bool:
        instances = engine.component(Ec2Component).ec2_instances
        return any(i in instances and i not in ec2_fleet(engine.fleet).instances for i in machines)

    def views_router(self, service: Maintenance, views: Any) -> APIRouter:
        router = APIRouter()

        @router.get("/v1/ec2/instances/{instance_id}/metadata", tags=["ec2"], responses=ERRORS)
        async def instance_metadata(
            instance_id: str, path: str = Query(SCHEDULED_PATH, description="an instance metadata path")
        ) -> Response:
            """What the instance's metadata endpoint answers for ``path`` now, the same status and bytes (by default
            its scheduled events: ``/latest/meta-data/events/maintenance/scheduled``; a path it does not have: its
            404 page)."""
            service.catch_up()
            service.settled_engine().component(Ec2Component).ec2_instance(instance_id)
            if not path.startswith("/"):
                raise Invalid(f"path must start with '/': {path!r}")
            status, body, content_type = views.ec2_metadata(instance_id, path)
            return Response(body, status_code=status, media_type=content_type)

        @router.get("/v1/ec2/instances/{instance_id}/status", tags=["ec2"], responses=ERRORS)
        async def instance_status(instance_id: str) -> Response:
            """The instance's item of DescribeInstanceStatus now (with IncludeAllInstances), as the EC2 API
            renders it: XML."""
            service.catch_up()
            service.settled_engine().component(Ec2Component).ec2_instance(instance_id)
            return Response(views.ec2_status(instance_id), media_type="text/xml")

        return router


PANEL = Ec2Panel()
