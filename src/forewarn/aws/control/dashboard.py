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
from forewarn.aws.lifecycle import TERMINATING
from forewarn.aws.model import Ec2Event, Ec2EventState, Ec2State, InstanceState
from forewarn.aws.views import Ec2EventOut
from forewarn.cloud import MachineRow, MachineState, Touched
from forewarn.control.models import ERRORS
from forewarn.core.errors import Invalid
from forewarn.core.times import format_time
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

        @router.get("/v1/dashboard/ec2/queue-path", tags=["dashboard"])
        async def queue_path() -> dict[str, Any]:
            """The queue path as the page's rows show it: each SQS queue's depth (visible), messages in flight and
            delayed, and its dead-letter queue with that queue's depth; each lifecycle action an instance waits on,
            with its hook and the deadline that ends the wait (the heartbeat timeout, never past the global one)."""
            service.catch_up()
            return queue_path_rows(service.settled_engine().component(Ec2Component))

        @router.get("/v1/ec2/instances/{instance_id}/status", tags=["ec2"], responses=ERRORS)
        async def instance_status(instance_id: str) -> Response:
            """The instance's item of DescribeInstanceStatus now (with IncludeAllInstances), as the EC2 API
            renders it: XML."""
            service.catch_up()
            service.settled_engine().component(Ec2Component).ec2_instance(instance_id)
            return Response(views.ec2_status(instance_id), media_type="text/xml")

        return router


def queue_path_rows(ec2: Ec2Component) -> dict[str, Any]:
    queues = ec2.queues
    rows = []
    for name in sorted(queues.queues):
        visible, in_flight, delayed = queues.counts(name)
        redrive = queues.queues[name].settings.redrive
        dead_letter = None if redrive is None else queues.by_arn(redrive.dead_letter_target_arn)
        rows.append(
            {
                "name": name,
                "visible": visible,
                "in_flight": in_flight,
                "delayed": delayed,
                "dead_letter_queue": None if redrive is None else redrive.dead_letter_target_arn.rpartition(":")[2],
                "dead_letter_depth": None if dead_letter is None else sum(queues.counts(dead_letter.name)),
                "max_receive_count": None if redrive is None else redrive.max_receive_count,
            }
        )
    actions = sorted(ec2.lifecycle.actions.values(), key=lambda action: (action.timeout_at, action.token))
    waiting = [
        {
            "instance_id": action.instance_id,
            "name": ec2.ec2_instances[action.instance_id].tags.get("Name", "")
            if action.instance_id in ec2.ec2_instances
            else "",
            "group": action.group,
            "hook": action.hook,
            "state": "Terminating:Wait" if action.transition == TERMINATING else "Pending:Wait",
            "deadline": format_time(min(action.timeout_at, action.global_at)),
            "global_deadline": format_time(action.global_at),
        }
        for action in actions
    ]
    return {"queues": rows, "lifecycle_actions": waiting}


PANEL = Ec2Panel()
