"""What DescribeInstanceStatus shows of an instance: its state, its three status checks and its scheduled events, in
EC2's XML shapes (the EC2 API Reference: InstanceStatus, InstanceStatusSummary, InstanceStatusEvent)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from forewarn.aws.ec2_api.protocol import text, timestamp
from forewarn.aws.model import Ec2Code, Ec2Event, Ec2Instance, Ec2State, InstanceState

REBOOTS = (Ec2Code.INSTANCE_REBOOT, Ec2Code.SYSTEM_REBOOT)


def event_xml(event: Ec2Event, tag: str) -> str:
    parts = [
        f"<{tag}><instanceEventId>{event.event_id}</instanceEventId><code>{event.code.value}</code>"
        f"<description>{text(event.shown_description)}</description>"
        f"<notBefore>{timestamp(event.not_before)}</notBefore>"
    ]
    if event.not_after is not None:
        parts.append(f"<notAfter>{timestamp(event.not_after)}</notAfter>")
    if event.not_before_deadline is not None:
        parts.append(f"<notBeforeDeadline>{timestamp(event.not_before_deadline)}</notBeforeDeadline>")
    parts.append(f"</{tag}>")
    return "".join(parts)


@dataclass(frozen=True)
class Summary:
    """An InstanceStatusSummary: ``status`` and its one detail, ``reachability`` (None: no details)."""

    status: str
    reachability: str | None = None
    impaired_since: datetime | None = None

    def xml(self, tag: str) -> str:
        if self.reachability is None:
            return f"<{tag}><status>{self.status}</status></{tag}>"
        since = (
            "" if self.impaired_since is None else f"<impairedSince>{timestamp(self.impaired_since)}</impairedSince>"
        )
        return (
            f"<{tag}><status>{self.status}</status><details><item><name>reachability</name>"
            f"<status>{self.reachability}</status>{since}</item></details></{tag}>"
        )


OK = Summary("ok", "passed")
NOT_APPLICABLE = Summary("not-applicable")


def summaries(instance: Ec2Instance, state: Ec2State, impacting: Ec2Event | None) -> tuple[Summary, Summary, Summary]:
    """(system, instance, attached EBS) status checks, given the event that impacts the instance now, if any.
    docs/aws-api.md, "Status checks"."""
    if state.state is not InstanceState.RUNNING:
        return NOT_APPLICABLE, NOT_APPLICABLE, NOT_APPLICABLE
    ebs = OK if instance.root_device == "ebs" else NOT_APPLICABLE
    if impacting is None:
        return OK, OK, ebs
    since = impacting.started_at
    system = Summary("impaired", "failed", since)
    if impacting.code in REBOOTS:
        return system, Summary("initializing", "initializing"), ebs
    return system, Summary("impaired", "failed", since), ebs


@dataclass
class InstanceView:
    """What DescribeInstanceStatus shows of one instance, computed once per request and instance."""

    instance: Ec2Instance
    state: Ec2State
    zone_id: str
    system: Summary
    status: Summary
    ebs: Summary
    events: list[Ec2Event]

    def xml(self) -> str:
        state = self.state.state
        events = ""
        if self.events:
            events = "<eventsSet>" + "".join(event_xml(event, "item") for event in self.events) + "</eventsSet>"
        return (
            f"<item><instanceId>{self.instance.instance_id}</instanceId>"
            f"<availabilityZone>{text(self.instance.availability_zone)}</availabilityZone>"
            f"<availabilityZoneId>{text(self.zone_id)}</availabilityZoneId>"
            f"<operator><managed>false</managed></operator>"
            f"<instanceState><code>{state.code}</code><name>{state.value}</name></instanceState>"
            f"{self.system.xml('systemStatus')}{self.status.xml('instanceStatus')}"
            f"{self.ebs.xml('attachedEbsStatus')}{events}</item>"
        )
