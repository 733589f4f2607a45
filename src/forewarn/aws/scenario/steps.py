"""Amazon EC2's steps of a scenario (``do: ec2-schedule``, ``ec2-interrupt``, ``ec2-api``, ...): each a call of the
control API, or a form of the EC2 Query API for what only it can do (event windows); and the queue path's steps
(``sqs-create-queue``, ``events-put-rule``, ``asg-put-hook``, ``asg-terminate``, ``sqs-handle``, ``asg-complete``,
``queue-faults``), each what a user or a queue-mode handler does through SQS, EventBridge and Auto Scaling.

A client of the server: it reads and writes through the runner's client (forewarn.scenarios.api), never through
EC2's engine component or model (tests/test_dependencies.py).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from forewarn.aws.scenario.checks import INSTANCE_CHECK
from forewarn.core.times import parse_optional_time
from forewarn.scenario_steps import StepAction, StepApi, StepCall, StepRefused, event_ids_of, event_of, flat


def schedule(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    events = api.post("/v1/ec2/events", params)
    return events, event_ids_of(events)


def cancel(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params["event"])
    return [api.post(f"/v1/ec2/events/{i}/cancel") for i in ids], ids


def reschedule(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params["event"])
    return [api.post(f"/v1/ec2/events/{i}/reschedule", {"not_before": params["not_before"]}) for i in ids], ids


def start(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    outcome = api.post(f"/v1/ec2/instances/{params['instance']}/start")
    return outcome, event_ids_of(outcome)


def spot(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    path = "/v1/ec2/spot/interrupt" if step.do == "ec2-interrupt" else "/v1/ec2/spot/rebalance"
    outcome = api.post(path, params)
    return outcome, event_ids_of(outcome)


def query_api(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    """A form of the EC2 Query API: one text value a parameter (a `$step` reference gives a list of one)."""
    form = {}
    for key, value in params.items():
        if isinstance(value, list):
            if len(value) != 1:
                raise StepRefused(f"steps[{step.index}].with.{key}: {len(value)} values for one Query parameter")
            value = value[0]
        form[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return api.ec2_query(form)


AUTOSCALING_VERSION = "2011-01-01"
TRANSITIONS = {"terminating": "autoscaling:EC2_INSTANCE_TERMINATING", "launching": "autoscaling:EC2_INSTANCE_LAUNCHING"}
LONGEST_WAIT = 20  # seconds of wall-clock time a receive waits at most (SQS's WaitTimeSeconds)


def _queue_url(api: StepApi, name: str) -> str:
    return str(api.ec2_json("AmazonSQS.GetQueueUrl", {"QueueName": name})["QueueUrl"])


def _queue_arn(api: StepApi, name: str) -> str:
    body = {"QueueUrl": _queue_url(api, name), "AttributeNames": ["QueueArn"]}
    return str(api.ec2_json("AmazonSQS.GetQueueAttributes", body)["Attributes"]["QueueArn"])


def create_queue(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    attributes = {"VisibilityTimeout": str(params["visibility_timeout"])} if "visibility_timeout" in params else {}
    answer = api.ec2_json("AmazonSQS.CreateQueue", {"QueueName": params["name"], "Attributes": attributes})
    return answer, [params["name"]]


def put_rule(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    """A rule of the default bus with the pattern given (a mapping), its target the queue named."""
    pattern = json.dumps(params["pattern"])
    api.ec2_json("AWSEvents.PutRule", {"Name": params["name"], "EventPattern": pattern})
    target = {"Id": params["queue"], "Arn": _queue_arn(api, params["queue"])}
    return api.ec2_json("AWSEvents.PutTargets", {"Rule": params["name"], "Targets": [target]}), [params["name"]]


def put_hook(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    form = {
        "Action": "PutLifecycleHook",
        "Version": AUTOSCALING_VERSION,
        "AutoScalingGroupName": params["group"],
        "LifecycleHookName": params["name"],
        "LifecycleTransition": TRANSITIONS[params.get("transition", "terminating")],
    }
    if "heartbeat_timeout" in params:
        form["HeartbeatTimeout"] = str(params["heartbeat_timeout"])
    if "default_result" in params:
        form["DefaultResult"] = str(params["default_result"])
    if "queue" in params:
        form["NotificationTargetARN"] = _queue_arn(api, params["queue"])
    answer, _ = api.ec2_query(form)
    return answer, [params["name"]]


def terminate_in_group(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    form = {
        "Action": "TerminateInstanceInAutoScalingGroup",
        "Version": AUTOSCALING_VERSION,
        "InstanceId": params["instance"],
        "ShouldDecrementDesiredCapacity": str(params.get("decrement", True)).lower(),
    }
    return api.ec2_query(form)[0], [params["instance"]]


def complete_action(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    form = {
        "Action": "CompleteLifecycleAction",
        "Version": AUTOSCALING_VERSION,
        "AutoScalingGroupName": params["group"],
        "LifecycleHookName": params["hook"],
        "InstanceId": params["instance"],
        "LifecycleActionResult": params.get("result", "CONTINUE"),
    }
    return api.ec2_query(form)[0], [params["instance"]]


def kind_of(body: dict) -> str:
    """What a message on a queue is: an event's detail-type, or a lifecycle hook's transition."""
    return str(body.get("detail-type") or body.get("LifecycleTransition") or body.get("Event") or "message")


def handle(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    """What a queue-mode handler does: receive (long polls of up to ``wait`` seconds, wall-clock), complete the
    lifecycle actions of the hook messages with ``complete`` (CONTINUE or ABANDON; none: leave them waiting), and
    delete every message. With ``expect`` (kinds: detail-types, lifecycle transitions), it receives until each has
    come, and fails the run when one has not within ``wait``."""
    url = _queue_url(api, params["queue"])
    expected = list(flat(params.get("expect")))
    deadline = time.monotonic() + float(params.get("wait", 5))
    handled: list[dict] = []
    while True:
        left = deadline - time.monotonic()
        body = {"QueueUrl": url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": max(0, min(LONGEST_WAIT, int(left)))}
        for message in api.ec2_json("AmazonSQS.ReceiveMessage", body).get("Messages", []):
            handled.append(_handle_one(api, url, message, params.get("complete")))
        missing = [kind for kind in expected if kind not in [kind_of(m) for m in handled]]
        if not missing or time.monotonic() >= deadline:
            break
    if missing:
        got = ", ".join(kind_of(m) for m in handled) or "nothing"
        raise StepRefused(f"steps[{step.index}]: {params['queue']} gave {got}, not {', '.join(missing)}")
    return handled, [kind_of(m) for m in handled]


def _handle_one(api: StepApi, url: str, message: dict, complete: str | None) -> dict:
    body = json.loads(message["Body"])
    if complete and body.get("LifecycleActionToken"):
        form = {
            "Action": "CompleteLifecycleAction",
            "Version": AUTOSCALING_VERSION,
            "AutoScalingGroupName": body["AutoScalingGroupName"],
            "LifecycleHookName": body["LifecycleHookName"],
            "LifecycleActionToken": body["LifecycleActionToken"],
            "LifecycleActionResult": complete,
        }
        api.ec2_query(form)
    api.ec2_json("AmazonSQS.DeleteMessage", {"QueueUrl": url, "ReceiptHandle": message["ReceiptHandle"]})
    return body


def queue_faults(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    """Throttle a service's actions (``throttle``: {service, actions, rate, burst}) and set the delivery faults
    (``deliveries``: {duplicate, delayed, delay}), through the control API."""
    answers: dict[str, Any] = {}
    if "throttle" in params:
        answers["throttle"] = api.post("/v1/ec2/faults/throttles", params["throttle"])
    if "deliveries" in params:
        answers["deliveries"] = api.put("/v1/ec2/faults/deliveries", params["deliveries"])
    return answers, []


SCHEDULE_KEYS = ("notice", "not_before", "window", "no_not_after", "deadline", "no_deadline", "description")

ACTIONS: dict[str, StepAction] = {
    "ec2-schedule": StepAction(schedule, ("code", "instances"), SCHEDULE_KEYS, summary="POST /v1/ec2/events"),
    "ec2-cancel": StepAction(cancel, ("event",), (), summary="POST /v1/ec2/events/{id}/cancel"),
    "ec2-reschedule": StepAction(
        reschedule, ("event", "not_before"), (), summary="POST /v1/ec2/events/{id}/reschedule"
    ),
    "ec2-start": StepAction(start, ("instance",), (), summary="POST /v1/ec2/instances/{instance}/start"),
    "ec2-interrupt": StepAction(
        spot, ("instances",), ("action",), summary="POST /v1/ec2/spot/interrupt", targets_instances=True
    ),
    "ec2-rebalance": StepAction(
        spot, ("instances",), (), summary="POST /v1/ec2/spot/rebalance", targets_instances=True
    ),
    "ec2-api": StepAction(
        query_api, ("Action",), (), any_keys=True, summary="the EC2 Query API (form POST to --ec2-url)"
    ),
    "sqs-create-queue": StepAction(create_queue, ("name",), ("visibility_timeout",), summary="SQS CreateQueue"),
    "events-put-rule": StepAction(
        put_rule, ("name", "pattern", "queue"), (), summary="EventBridge PutRule and PutTargets (an SQS queue)"
    ),
    "asg-put-hook": StepAction(
        put_hook,
        ("group", "name"),
        ("transition", "heartbeat_timeout", "default_result", "queue"),
        summary="Auto Scaling PutLifecycleHook (its notification target a queue)",
    ),
    "asg-terminate": StepAction(
        terminate_in_group,
        ("instance",),
        ("decrement",),
        summary="Auto Scaling TerminateInstanceInAutoScalingGroup",
        targets_instances=True,
    ),
    "asg-complete": StepAction(
        complete_action, ("group", "hook", "instance"), ("result",), summary="Auto Scaling CompleteLifecycleAction"
    ),
    "sqs-handle": StepAction(
        handle,
        ("queue",),
        ("expect", "complete", "wait"),
        summary="a queue-mode handler: SQS ReceiveMessage, CompleteLifecycleAction, DeleteMessage",
    ),
    "queue-faults": StepAction(
        queue_faults, (), ("throttle", "deliveries"), summary="POST /v1/ec2/faults/throttles, PUT .../deliveries"
    ),
}


class Ec2Steps:
    actions = ACTIONS
    checks = {"instance": INSTANCE_CHECK}
    time_keys = ("not_before", "NotBefore")
    scheduled_by_wave = None

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        """The run's live events, the impacts they left on instances, and the Spot actions it asked for that are
        still to come: none of them can be timed from here, so the clock goes deadline by deadline."""
        times: list[datetime | None] = []
        if any(event["event_id"] in created for event in api.get("/v1/ec2/events")):
            times.append(None)
        for instance in api.get("/v1/ec2/instances"):
            if event_of(instance.get("impacted_by")) in created:
                times.append(None)
            action_time = parse_optional_time(instance.get("spot_action_time"))
            if instance["instance_id"] in targets and action_time is not None and action_time > now:
                times.append(None)
        for action in api.get("/v1/ec2/lifecycle-actions"):  # an instance the run terminated, held by a hook
            if action["instance_id"] in targets:
                times.append(parse_optional_time(action["timeout_at"]))
        return times


STEPS = Ec2Steps()
