"""Azure's steps of a scenario (``do: schedule``, ``approve``, ...): each a call or two of the control API.

A client of the server: it reads and writes through the runner's client (forewarn.scenarios.api), never through
Azure's engine component or model (tests/test_dependencies.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from forewarn.azure.scenario.checks import VM_CHECK
from forewarn.core.times import parse_optional_time
from forewarn.scenario_steps import StepAction, StepApi, StepCall, event_ids_of, event_of, flat
from forewarn.scenarios.api import ApiError, parse_document

SCHEDULED_EVENTS_VERSION = "2020-07-01"  # the version the runner reads and approves documents in


def document_text(api: StepApi, vm: str) -> str:
    """The exact bytes the VM's Scheduled Events document is now, as its IMDS serves it."""
    return api.text(f"/v1/vms/{vm}/scheduledevents", **{"api-version": SCHEDULED_EVENTS_VERSION})


def event_ids(api: StepApi, params: dict) -> list[str]:
    """The `event` parameter as EventIds (a `$step` gives that step's events), narrowed to `vm`'s if given."""
    ids = flat(params.get("event"))
    if params.get("vm"):
        ids = [i for i in ids if params["vm"] in api.get(f"/v1/events/{i}")["resources"]]
        if not ids:
            raise ApiError(400, "Invalid", f"none of the events concerns {params['vm']}")
    return ids


def schedule(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    events = api.post("/v1/events", params)
    return events, event_ids_of(events)


def approve(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    actor = step.actor or "control"
    ids = event_ids(api, params) if params.get("event") else None
    if actor != "control":
        ids = visible_to(api, actor, ids)
    events = api.post("/v1/approvals", {"event_ids": ids, "by": actor})
    return events, ids if ids is not None else [event["event_id"] for event in events]


def visible_to(api: StepApi, vm: str, wanted: list[str] | None) -> list[str]:
    """Of the events asked for, those the VM's document shows (none asked for: those it shows Scheduled), as its
    IMDS would take them: an approval of an event the VM does not see is refused there."""
    document = parse_document(document_text(api, vm))
    if wanted is None:
        ids = [e["EventId"] for e in document["Events"] if e["EventStatus"] == "Scheduled"]
        if not ids:
            raise ApiError(400, "Invalid", f"{vm} sees no Scheduled event to approve")
        return ids
    visible = [e["EventId"] for e in document["Events"]]
    ids = [i for i in wanted if i in visible]
    if not ids:
        raise ApiError(400, "Invalid", f"{vm} does not see {', '.join(wanted)}; its IMDS would refuse the approval")
    return ids


def cancel(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    ids = event_ids(api, params)
    return [api.post(f"/v1/events/{i}/cancel") for i in ids], ids


def vm_operation(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    outcome = api.post(f"/v1/vms/{step.do}", params)
    return outcome, event_ids_of(outcome)


def policy(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    body = {k: v for k, v in params.items() if k != "owner"}
    return api.patch(f"/v1/policies/{params['owner']}", body), []


def scale_set(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    name = params["scale_set"]
    if step.do == "scale-in":
        outcome = api.post(f"/v1/scale-sets/{name}/scale-in", {"count": params.get("count", 1)})
    else:
        outcome = api.post(f"/v1/scale-sets/{name}/update-instances", {"vms": params.get("vms") or []})
    return outcome, event_ids_of(outcome)


def platform(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    outcome = api.post(f"/v1/platform/{step.do}", params)
    return outcome, event_ids_of(outcome)


def check_approve(step: Mapping, params: Mapping, members: Mapping[str, Any]) -> list[tuple[tuple, str]]:
    """Who approves: the control API needs the events named; a VM approves what its document shows."""
    problems: list[tuple[tuple, str]] = []
    if "event" not in params and step.get("as") in (None, "control"):
        problems.append(((), "approve needs `with: {event: $STEP}`, or `as: VM` to approve what that VM sees"))
    if "as" in step and step["as"] != "control" and step["as"] not in members["vm"]:
        problems.append((("as",), f"{step['as']!r} is not a VM of the fleet (or `control`)"))
    return problems


SCHEDULE_KEYS = (
    "vms",
    "hosts",
    "source",
    "notice",
    "not_before",
    "duration_seconds",
    "description",
    "impact_window",
    "extra_impacts",
    "group",
    "update_domain",
    "fault_domain",
)
POLICY_KEYS = ("auto_approve_reboot", "auto_approve_redeploy", "terminate_notification", "os_image_notification")

ACTIONS: dict[str, StepAction] = {
    "schedule": StepAction(
        schedule, ("type",), SCHEDULE_KEYS, summary="POST /v1/events: Azure maintenance (one event per host and scope)"
    ),
    "approve": StepAction(
        approve,
        (),
        ("event", "vm"),
        summary="POST /v1/approvals, as `as` (a VM: only events it sees; default control)",
        actor="who approves",
        check=check_approve,
    ),
    "cancel": StepAction(cancel, ("event",), ("vm",), summary="POST /v1/events/{id}/cancel, for each event in order"),
    "restart": StepAction(vm_operation, ("vms",), ("notice",), summary="POST /v1/vms/restart: a User Reboot"),
    "redeploy": StepAction(vm_operation, ("vms",), ("notice",), summary="POST /v1/vms/redeploy: a User Redeploy"),
    "reimage": StepAction(vm_operation, ("vms",), (), summary="POST /v1/vms/reimage"),
    "delete": StepAction(vm_operation, ("vms",), (), summary="POST /v1/vms/delete"),
    "policy": StepAction(policy, ("owner",), POLICY_KEYS, summary="PATCH /v1/policies/{owner}"),
    "scale-in": StepAction(scale_set, ("scale_set",), ("count",), summary="POST /v1/scale-sets/{scale_set}/scale-in"),
    "update-instances": StepAction(
        scale_set, ("scale_set",), ("vms",), summary="POST /v1/scale-sets/{scale_set}/update-instances"
    ),
    "hardware-failure": StepAction(platform, ("hosts",), ("type",), summary="POST /v1/platform/hardware-failure"),
    "predicted-failure": StepAction(platform, ("hosts",), ("notice",), summary="POST /v1/platform/predicted-failure"),
    "evict": StepAction(platform, ("vms",), (), summary="POST /v1/platform/evict: Spot Preempt"),
}


class AzureSteps:
    actions = ACTIONS
    checks = {"vm": VM_CHECK}
    time_keys = ("not_before",)
    scheduled_by_wave = "scheduled"

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        """The run's live events (until their next change: a start, an end); once they are over, the impacts they
        left on VMs (an impact ends with its event at the latest)."""
        times = [
            parse_optional_time(event["not_before"] if event["status"] == "Scheduled" else event["ends_at"])
            for event in api.get("/v1/events")
            if event["event_id"] in created
        ]
        if times:
            return times
        return [
            parse_optional_time(vm["impact_until"])
            for vm in api.get("/v1/vms")
            if vm.get("impact_until") and event_of(vm.get("impacted_by")) in created
        ]


STEPS = AzureSteps()
