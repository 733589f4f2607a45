"""The changes the EC2 component makes: events, instance states, event windows, notification attributes."""

from __future__ import annotations

from dataclasses import dataclass

from forewarn.aws.model import Ec2Event, Ec2State, NotificationAttributes
from forewarn.aws.windows import EventWindow
from forewarn.core.changes import Change


@dataclass(frozen=True)
class Ec2NotificationAttributesChanged(Change):
    attributes: NotificationAttributes


@dataclass(frozen=True)
class Ec2WindowChanged(Change):
    """``what``: created, modified, associated, disassociated, deleted (then ``window.state`` is deleted)."""

    window: EventWindow
    what: str


@dataclass(frozen=True)
class Ec2StateChanged(Change):
    """``what``: impacted, recovered, stopped, started, terminated, launched, interrupted, rebalance."""

    state: Ec2State
    what: str
    reason: str

    def subject(self) -> str:
        return f"instance {self.state.instance_id}"

    def describe(self) -> str:
        return f"instance {self.state.instance_id} {self.what}: {self.reason}"


@dataclass(frozen=True)
class Ec2EventChanged(Change):
    """``what``: scheduled, rescheduled, started, completed or canceled."""

    event: Ec2Event
    what: str
    reason: str

    def subject(self) -> str:
        return f"EC2 event {self.event.event_id}"

    def describe(self) -> str:
        event = self.event
        return f"event {event.event_id} {event.code.value} of {event.instance_id}: {self.what} ({self.reason})"
