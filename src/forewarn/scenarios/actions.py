"""What each scenario step does on the server (``do:`` in a scenario file): one handler per action, each a call or
two of the control API (or the EC2 API) that returns the answer and the ids the step produced (its ``id:`` names
them for later steps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forewarn.scenarios.api import Api, ApiError, parse_document
from forewarn.scenarios.spec import Step


class StepRefused(Exception):
    """A step's parameters cannot be sent as asked (not an answer of the server)."""


def event_ids(api: Api, params: dict) -> list[str]:
    """The `event` parameter as EventIds (a `$step` gives that step's events), narrowed to `vm`'s if given."""
    ids = flat(params.get("event"))
    if params.get("vm"):
        ids = [i for i in ids if params["vm"] in api.get(f"/v1/events/{i}")["resources"]]
        if not ids:
            raise ApiError(400, "Invalid", f"none of the events concerns {params['vm']}")
    return ids


def schedule(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    events = api.post("/v1/events", params)
    return events, [e["event_id"] for e in events]


def approve(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    actor = step.actor or "control"
    ids = event_ids(api, params) if params.get("event") else None
    if actor != "control":
        document = parse_document(api.document(actor))
        visible = [e["EventId"] for e in document["Events"]]
        if ids is None:
            ids = [e["EventId"] for e in document["Events"] if e["EventStatus"] == "Scheduled"]
            if not ids:
                raise ApiError(400, "Invalid", f"{actor} sees no Scheduled event to approve")
        else:
            wanted = ids
            ids = [i for i in wanted if i in visible]
            if not ids:
                raise ApiError(
                    400, "Invalid", f"{actor} does not see {', '.join(wanted)}; its IMDS would refuse the approval"
                )
    events = api.post("/v1/approvals", {"event_ids": ids, "by": actor})
    return events, ids if ids is not None else [event["event_id"] for event in events]


def cancel(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    ids = event_ids(api, params)
    return [api.post(f"/v1/events/{i}/cancel") for i in ids], ids


def vm_operation(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    outcome = api.post(f"/v1/vms/{step.do}", params)
    return outcome, [e["event_id"] for e in outcome["events"]]


def policy(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    body = {k: v for k, v in params.items() if k != "owner"}
    return api.patch(f"/v1/policies/{params['owner']}", body), []


def scale_set(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    name = params["scale_set"]
    if step.do == "scale-in":
        outcome = api.post(f"/v1/scale-sets/{name}/scale-in", {"count": params.get("count", 1)})
    else:
        outcome = api.post(f"/v1/scale-sets/{name}/update-instances", {"vms": params.get("vms") or []})
    return outcome, [e["event_id"] for e in outcome["events"]]


def platform(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    outcome = api.post(f"/v1/platform/{step.do}", params)
    return outcome, [e["event_id"] for e in outcome["events"]]


def wave(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    outcome = api.post("/v1/waves", params)
    return outcome, [outcome["wave"]["wave_id"]]


def cancel_wave(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params["wave"])
    return [api.post(f"/v1/waves/{wave_id}/cancel") for wave_id in ids], ids


def ec2_schedule(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    events = api.post("/v1/ec2/events", params)
    return events, [e["event_id"] for e in events]


def ec2_cancel(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params["event"])
    return [api.post(f"/v1/ec2/events/{i}/cancel") for i in ids], ids


def ec2_reschedule(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params["event"])
    return [api.post(f"/v1/ec2/events/{i}/reschedule", {"not_before": params["not_before"]}) for i in ids], ids


def ec2_start(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    outcome = api.post(f"/v1/ec2/instances/{params['instance']}/start")
    return outcome, [e["event_id"] for e in outcome["events"]]


def ec2_spot(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    path = "/v1/ec2/spot/interrupt" if step.do == "ec2-interrupt" else "/v1/ec2/spot/rebalance"
    outcome = api.post(path, params)
    return outcome, [e["event_id"] for e in outcome["events"]]


def ec2_api(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    form = {}
    for key, value in params.items():
        if isinstance(value, list):
            if len(value) != 1:
                raise StepRefused(f"steps[{step.index}].with.{key}: {len(value)} values for one Query parameter")
            value = value[0]
        form[key] = str(value).lower() if isinstance(value, bool) else str(value)
    text, ids = api.ec2_query(form)
    return text, ids


def gce_maintain(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    events = api.post("/v1/gce/maintenance", params)
    return events, [e["event_id"] for e in events]


def gce_cancel(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params.get("event"))
    return [api.post(f"/v1/gce/maintenance/{i}/cancel") for i in ids], ids


def gce_instance_action(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    action = {
        "gce-perform": "perform-maintenance",
        "gce-reschedule": "reschedule-maintenance",
        "gce-simulate": "simulate-maintenance",
        "gce-scheduling": "scheduling",
        "gce-watch": "watch",
    }[step.do]
    body = {key: value for key, value in params.items() if key != "instance"}
    outcome = api.post(f"/v1/gce/instances/{params['instance']}/{action}", body)
    return outcome, [e["event_id"] for e in outcome.get("events", [])]


def gce_instances(api: Api, step: Step, params: dict) -> tuple[Any, list[str]]:
    path = "/v1/gce/preempt" if step.do == "gce-preempt" else "/v1/gce/host-error"
    outcome = api.post(path, {"instances": flat(params.get("instances"))})
    return outcome, []


Handler = Callable[[Api, Step, dict], tuple[Any, list[str]]]

ACTION_HANDLERS: dict[str, Handler] = {
    "schedule": schedule,
    "approve": approve,
    "cancel": cancel,
    "restart": vm_operation,
    "redeploy": vm_operation,
    "reimage": vm_operation,
    "delete": vm_operation,
    "policy": policy,
    "scale-in": scale_set,
    "update-instances": scale_set,
    "hardware-failure": platform,
    "predicted-failure": platform,
    "evict": platform,
    "ec2-schedule": ec2_schedule,
    "gce-maintain": gce_maintain,
    "gce-cancel": gce_cancel,
    "gce-perform": gce_instance_action,
    "gce-reschedule": gce_instance_action,
    "gce-simulate": gce_instance_action,
    "gce-scheduling": gce_instance_action,
    "gce-watch": gce_instance_action,
    "gce-preempt": gce_instances,
    "gce-host-error": gce_instances,
    "ec2-cancel": ec2_cancel,
    "ec2-reschedule": ec2_reschedule,
    "ec2-start": ec2_start,
    "ec2-interrupt": ec2_spot,
    "ec2-rebalance": ec2_spot,
    "ec2-api": ec2_api,
    "wave": wave,
    "cancel-wave": cancel_wave,
}


def flat(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [item for part in value for item in flat(part)]
