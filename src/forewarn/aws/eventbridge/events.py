"""The events forewarn's EC2 changes put on the default event bus, each in the shape the AWS pages document:
"AWS Health Event" (source ``aws.health``, the AWS Health User Guide's "Monitoring AWS Health events with Amazon
EventBridge"), "EC2 Spot Instance Interruption Warning" ("Spot Instance interruption notices"), "EC2 Instance
Rebalance Recommendation" ("EC2 instance rebalance recommendations") and "EC2 Instance State-change Notification"
("Amazon EC2 events" in the EventBridge reference), all from source ``aws.ec2`` but the first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from forewarn.aws.changes import Ec2EventChanged, Ec2StateChanged
from forewarn.aws.component import Ec2Component
from forewarn.aws.health.events import STATUS_CODES, health_event
from forewarn.aws.model import Ec2Instance
from forewarn.core.changes import Change
from forewarn.core.ids import derived_guid
from forewarn.engine.engine import Engine

# An instance state change's ``what`` (aws/changes.py) and the state EC2 reports for it.
STATES = {"started": "running", "launched": "running", "stopped": "stopped", "terminated": "terminated"}


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
    return found


def _instance_events(change: Ec2StateChanged, instance: Ec2Instance, now: datetime, seed: str) -> list[dict[str, Any]]:
    state = change.state
    if change.what == "interrupted" and state.spot_action is not None:
        detail = {"instance-id": instance.instance_id, "instance-action": state.spot_action}
        return [envelope("EC2 Spot Instance Interruption Warning", "aws.ec2", instance, now, seed, detail)]
    if change.what == "rebalance":
        detail = {"instance-id": instance.instance_id}
        return [envelope("EC2 Instance Rebalance Recommendation", "aws.ec2", instance, now, seed, detail)]
    if change.what in STATES:
        detail = {"instance-id": instance.instance_id, "state": STATES[change.what]}
        return [
            envelope(
                "EC2 Instance State-change Notification", "aws.ec2", instance, now, seed, detail, STATES[change.what]
            )
        ]
    return []
