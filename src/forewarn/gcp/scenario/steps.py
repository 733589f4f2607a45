"""Compute Engine's steps of a scenario (``do: gce-maintain``, ``gce-simulate``, ``gce-preempt``, ...): each a call
of the control API.

A client of the server: it reads and writes through the runner's client (forewarn.scenarios.api), never through
Compute Engine's engine component or model (tests/test_dependencies.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from forewarn.gcp.scenario.checks import GCE_CHECK
from forewarn.scenario_steps import StepAction, StepApi, StepCall, event_ids_of, flat

# The control API's route of each step on one instance.
INSTANCE_ROUTES = {
    "gce-perform": "perform-maintenance",
    "gce-reschedule": "reschedule-maintenance",
    "gce-simulate": "simulate-maintenance",
    "gce-scheduling": "scheduling",
    "gce-watch": "watch",
}


def maintain(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    events = api.post("/v1/gce/maintenance", params)
    return events, event_ids_of(events)


def cancel(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params.get("event"))
    return [api.post(f"/v1/gce/maintenance/{i}/cancel") for i in ids], ids


def instance_action(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    body = {key: value for key, value in params.items() if key != "instance"}
    outcome = api.post(f"/v1/gce/instances/{params['instance']}/{INSTANCE_ROUTES[step.do]}", body)
    return outcome, event_ids_of(outcome)


def instances(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    path = "/v1/gce/preempt" if step.do == "gce-preempt" else "/v1/gce/host-error"
    outcome = api.post(path, {"instances": flat(params.get("instances"))})
    return outcome, []


ACTIONS: dict[str, StepAction] = {
    "gce-maintain": StepAction(
        maintain,
        ("instances",),
        ("kind", "notice", "start", "window", "can_reschedule", "latest", "type"),
        summary="POST /v1/gce/maintenance: Compute Engine host maintenance",
    ),
    "gce-cancel": StepAction(cancel, ("event",), (), summary="POST /v1/gce/maintenance/{id}/cancel"),
    "gce-perform": StepAction(
        instance_action, ("instance",), (), summary="POST /v1/gce/instances/{instance}/perform-maintenance"
    ),
    "gce-reschedule": StepAction(
        instance_action,
        ("instance",),
        ("start", "notice"),
        summary="POST /v1/gce/instances/{instance}/reschedule-maintenance: move announced maintenance",
    ),
    "gce-simulate": StepAction(
        instance_action, ("instance",), (), summary="POST /v1/gce/instances/{instance}/simulate-maintenance"
    ),
    "gce-scheduling": StepAction(
        instance_action,
        ("instance",),
        ("on_host_maintenance", "automatic_restart"),
        summary="POST /v1/gce/instances/{instance}/scheduling",
    ),
    "gce-preempt": StepAction(
        instances,
        ("instances",),
        (),
        summary="POST /v1/gce/preempt: Spot or preemptible preemption",
        targets_instances=True,
    ),
    "gce-host-error": StepAction(
        instances, ("instances",), (), summary="POST /v1/gce/host-error", targets_instances=True
    ),
    "gce-watch": StepAction(
        instance_action,
        ("instance",),
        (),
        summary="GET the instance's maintenance-event once, as a watcher does (it gets the notice)",
    ),
}


class GceSteps:
    actions = ACTIONS
    checks = {"gce": GCE_CHECK}
    time_keys = ("start",)
    scheduled_by_wave = "gce scheduled"

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        """The run's live maintenance, and the instances it preempted or crashed that are still stopping: none of
        them can be timed from here, so the clock goes deadline by deadline."""
        times: list[datetime | None] = []
        if any(event["event_id"] in created for event in api.get("/v1/gce/maintenance")):
            times.append(None)
        for instance in api.get("/v1/gce/instances"):
            if instance["name"] in targets and instance["status"] == "STOPPING":
                times.append(None)
        return times


STEPS = GceSteps()
