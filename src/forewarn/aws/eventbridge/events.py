"""The events forewarn's EC2 changes put on the default event bus, each in the shape the AWS pages document:
"AWS Health Event" (source ``aws.health``, the AWS Health User Guide's "Monitoring AWS Health events with Amazon
EventBridge"), "EC2 Spot Instance Interruption Warning" ("Spot Instance interruption notices"), "EC2 Instance
Rebalance Recommendation" ("EC2 instance rebalance recommendations") and "EC2 Instance State-change Notification"
("Amazon EC2 events" in the EventBridge reference), all from source ``aws.ec2``; and "EC2 Instance-terminate Lifecycle
Action" from ``aws.autoscaling`` ("Amazon EC2 Auto Scaling event reference"), with the message a lifecycle hook sends
straight to its SQS notification target ("Prepare to add a lifecycle hook to your Auto Scaling group")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from forewarn.aws.changes import Ec2EventChanged, Ec2StateChanged
from forewarn.aws.component import Ec2Component
from forewarn.aws.health.events import STATUS_CODES, health_event
from forewarn.aws.lifecycle import TERMINATING, LifecycleAction, LifecycleActionChanged
from forewarn.aws.model import Ec2Instance
from forewarn.core.changes import Change
from forewarn.core.ids import derived_guid
from forewarn.engine.engine import Engine

# An instance state change's ``what`` (aws/changes.py) and the states EC2 reports on the way, in order: forewarn
# moves an instance in one step, EC2 through a transitional state first ("Amazon EC2 instance state changes").
STATES = {
    "started": ("pending", "running"),
    "launched": ("pending", "running"),
    "stopped": ("stopping", "stopped"),
    "terminated": ("shutting-down", "terminated"),
}


def envelope(
    detail_type: str, source: str, instance: Ec2Instance, now: datetime, seed: str, detail: dict[str, Any], *key: object
) -> dict[str, Any]:
    return {
        "version": "0",
        "id": derived_guid(seed, "eventbridge", detail_type, instance.instance_id, now.isoformat(), *key).lower(),
        "detail-type": detail_type,
        "source": source,
        "account": instance.account_id,
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": instance.region,
        "resources": [instance.arn],
        "detail": detail,
    }


def bus_events(changes: list[Change], engine: Engine) -> list[dict[str, Any]]:
    """The events a command's changes put on the bus, in order."""
    component = engine.component(Ec2Component)
    now, seed = engine.now, engine.seed
    found: list[dict[str, Any]] = []
    for change in changes:
        if isinstance(change, Ec2EventChanged) and change.what in STATUS_CODES:
            instance = component.ec2_instances[change.event.instance_id]
            tags = component.notification_attributes.tags_of(instance)
            found.append(health_event(change.event, instance, change.what, now, seed, "arn", tags))
        elif isinstance(change, Ec2StateChanged):
            found += _instance_events(change, component.ec2_instances[change.state.instance_id], now, seed)
        elif isinstance(change, LifecycleActionChanged) and change.what == "started":
            action = change.action
            instance = component.ec2_instances[action.instance_id]
            metadata = _metadata(engine, action)
            detail = hook_message(action, metadata)
            for key in ("Service", "Time", "AccountId", "RequestId"):
                detail.pop(key)
            event = envelope(
                "EC2 Instance-terminate Lifecycle Action"
                if action.transition == TERMINATING
                else "EC2 Instance-launch Lifecycle Action",
                "aws.autoscaling",
                instance,
                now,
                seed,
                detail,
                action.token,
            )
            event["resources"] = [group_arn(instance, action.group, seed)]
            found.append(event)
    return found


def group_arn(instance: Ec2Instance, group: str, seed: str) -> str:
    group_id = derived_guid(seed, "auto-scaling-group", group).lower()
    return (
        f"arn:aws:autoscaling:{instance.region}:{instance.account_id}:autoScalingGroup:{group_id}:"
        f"autoScalingGroupName/{group}"
    )


def _metadata(engine: Engine, action: LifecycleAction) -> str | None:
    hook = engine.component(Ec2Component).lifecycle.hooks.get(f"{action.group}/{action.hook}")
    return None if hook is None else hook.notification_metadata


def hook_message(action: LifecycleAction, metadata: str | None) -> dict[str, Any]:
    """The message a lifecycle hook sends to its notification target (an SQS queue)."""
    origin, destination = (
        ("AutoScalingGroup", "EC2") if action.transition == TERMINATING else ("EC2", "AutoScalingGroup")
    )
    message: dict[str, Any] = {
        "Origin": origin,
        "LifecycleHookName": action.hook,
        "Destination": destination,
        "AccountId": "",
        "RequestId": action.token,
        "LifecycleTransition": action.transition,
        "AutoScalingGroupName": action.group,
        "Service": "AWS Auto Scaling",
        "Time": action.started_at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "EC2InstanceId": action.instance_id,
        "LifecycleActionToken": action.token,
    }
    if metadata is not None:
        message["NotificationMetadata"] = metadata
    return message


def _instance_events(change: Ec2StateChanged, instance: Ec2Instance, now: datetime, seed: str) -> list[dict[str, Any]]:
    state = change.state
    if change.what == "interrupted" and state.spot_action is not None:
        detail = {"instance-id": instance.instance_id, "instance-action": state.spot_action}
        return [envelope("EC2 Spot Instance Interruption Warning", "aws.ec2", instance, now, seed, detail)]
    if change.what == "rebalance":
        detail = {"instance-id": instance.instance_id}
        return [envelope("EC2 Instance Rebalance Recommendation", "aws.ec2", instance, now, seed, detail)]
    return [
        envelope(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            instance,
            now,
            seed,
            {"instance-id": instance.instance_id, "state": reported},
            reported,
        )
        for reported in STATES.get(change.what, ())
    ]
