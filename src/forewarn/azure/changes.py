"""The changes the Azure component makes: events, DocumentIncarnations, VM states, policies, enabled scopes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from forewarn.azure.model import Event
from forewarn.azure.vms import Policy, VmState
from forewarn.core.changes import Change


@dataclass(frozen=True)
class ScopeEnabled(Change):
    """A VM of the scope asked for its scheduled events: the service is on for the scope ("Azure Metadata Service:
    Scheduled Events for Windows VMs")."""

    scope: str
    at: datetime


@dataclass(frozen=True)
class PolicyChanged(Change):
    policy: Policy


@dataclass(frozen=True)
class VmChanged(Change):
    """A VM's running state changed; ``what`` is impacted, recovered or deleted."""

    state: VmState
    what: str
    reason: str

    def subject(self) -> str:
        return f"VM {self.state.name}"


@dataclass(frozen=True)
class IncarnationChanged(Change):
    scope: str
    incarnation: int


@dataclass(frozen=True)
class EventChanged(Change):
    """An event was created or changed; ``what`` is scheduled, approved, started, completed or canceled."""

    event: Event
    what: str
    reason: str

    def subject(self) -> str:
        return f"event {self.event.event_id}"

    def describe(self) -> str:
        event = self.event
        return (
            f"event {event.event_id} {event.event_type.value} {event.status.value} [{', '.join(event.resources)}] "
            f"in {event.scope}: {self.what} ({self.reason})"
        )
