"""AWS Health events for EC2 scheduled events, as EventBridge delivers them ("AWS Health Event", source
``aws.health``, category ``scheduledChange``; the AWS Health User Guide's "Monitoring AWS Health events with Amazon
EventBridge").

Each change of an EC2 event (scheduled, rescheduled, started, completed, canceled) becomes one message per
configured webhook, committed with the change (an outbox) and sent by ``app/outbox.py`` with retries.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.utils import format_datetime
from typing import TYPE_CHECKING

from forewarn.aws.changes import Ec2EventChanged
from forewarn.aws.component import Ec2Component
from forewarn.aws.model import Ec2Code, Ec2Event, Ec2Instance
from forewarn.core.ids import derived_guid
from forewarn.store import Outgoing

if TYPE_CHECKING:
    from forewarn.core.changes import Change
    from forewarn.engine.engine import Engine

# Health event type codes by EC2 event code (aws/aws-health-tools' event list; system-reboot is reported as reboot
# maintenance).
TYPE_CODES = {
    Ec2Code.INSTANCE_REBOOT: "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED",
    Ec2Code.SYSTEM_REBOOT: "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED",
    Ec2Code.SYSTEM_MAINTENANCE: "AWS_EC2_INSTANCE_NETWORK_MAINTENANCE_SCHEDULED",
    Ec2Code.INSTANCE_STOP: "AWS_EC2_INSTANCE_STOP_SCHEDULED",
}
STATUS_CODES = {
    "scheduled": "upcoming",
    "rescheduled": "upcoming",
    "started": "open",
    "completed": "closed",
    "canceled": "closed",
}


@dataclass(frozen=True)
class HealthSettings:
    targets: tuple[str, ...] = ()
    # The docs disagree: current AWS samples put the instance ARN in affectedEntities and resources; older samples,
    # and the handlers tested with them (NTH), use the bare instance id.
    entity: str = "arn"
    # How long a message is retried before it is given up (EventBridge's default retry window: 24 hours).
    retry_for: timedelta = field(default=timedelta(hours=24))


def type_code(event: Ec2Event, instance: Ec2Instance) -> str:
    if event.code is Ec2Code.INSTANCE_RETIREMENT:
        return (
            "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED"
            if instance.root_device == "ebs"
            else "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"
        )
    return TYPE_CODES[event.code]


def _rfc1123(moment: datetime) -> str:
    return format_datetime(moment, usegmt=True)


def health_event(
    event: Ec2Event,
    instance: Ec2Instance,
    what: str,
    now: datetime,
    seed: str,
    entity: str,
    tags: dict[str, str] | None = None,
) -> dict:
    code = type_code(event, instance)
    status = STATUS_CODES[what]
    entity_value = instance.arn if entity == "arn" else instance.instance_id
    number = event.event_id.removeprefix("instance-event-")
    detail = {
        "eventArn": f"arn:aws:health:{instance.region}::event/EC2/{code}/{code}_{number}",
        "service": "EC2",
        "eventTypeCode": code,
        "eventTypeCategory": "scheduledChange",
        "eventScopeCode": "ACCOUNT_SPECIFIC",
        "communicationId": f"{number}-1",
        "startTime": _rfc1123(event.not_before),
        **({"endTime": _rfc1123(event.ended_at or now)} if status == "closed" else {}),
        "lastUpdatedTime": _rfc1123(now),
        "statusCode": status,
        "eventRegion": instance.region,
        "eventDescription": [{"language": "en_US", "latestDescription": event.shown_description}],
        "affectedEntities": [
            {
                "entityValue": entity_value,
                "lastUpdatedTime": _rfc1123(now),
                "status": "RESOLVED" if status == "closed" else "PENDING",
                **({"tags": tags} if tags else {}),
            }
        ],
        "affectedAccount": instance.account_id,
        "page": "1",
        "totalPages": "1",
        "backupEvent": "false",
        "personas": ["OPERATIONS"],
        "actionability": "INFORMATIONAL" if status == "closed" else "ACTION_REQUIRED",
    }
    return {
        "version": "0",
        "id": derived_guid(seed, "health", event.event_id, what, now.isoformat()).lower(),
        "detail-type": "AWS Health Event",
        "source": "aws.health",
        "account": instance.account_id,
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": instance.region,
        "resources": [entity_value],
        "detail": detail,
    }


def health_outbox(settings: HealthSettings) -> Callable[[list[Change], Engine], list[Outgoing]]:
    """The outbox function for ``Maintenance.add_outbox``: one message per EC2 event change and target."""

    def derive(changes: list[Change], engine: Engine) -> list[Outgoing]:
        items: list[Outgoing] = []
        for change in changes:
            if not isinstance(change, Ec2EventChanged) or change.what not in STATUS_CODES:
                continue
            event = change.event
            instance = engine.component(Ec2Component).ec2_instances[event.instance_id]
            # registered tags only ("Customize scheduled event notifications")
            tags = engine.component(Ec2Component).notification_attributes.tags_of(instance)
            payload = json.dumps(
                health_event(event, instance, change.what, engine.now, engine.seed, settings.entity, tags)
            )
            items.extend(Outgoing(target, payload, engine.now + settings.retry_for) for target in settings.targets)
        return items

    return derive
