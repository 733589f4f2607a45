"""The changes the Compute Engine component makes: maintenance events and instance states."""

from __future__ import annotations

from dataclasses import dataclass

from forewarn.core.changes import Change
from forewarn.gcp.model import GceMaintenance, GceState


@dataclass(frozen=True)
class GceEventChanged(Change):
    """``what``: scheduled, notified, started, completed, canceled, performed (started early by the user)."""

    event: GceMaintenance
    what: str
    reason: str

    def subject(self) -> str:
        return f"maintenance {self.event.event_id}"

    def describe(self) -> str:
        event = self.event
        return f"maintenance {event.event_id} {event.kind.value} of {event.instance}: {self.what} ({self.reason})"


@dataclass(frozen=True)
class GceStateChanged(Change):
    """``what``: watched, migrated, terminated, restarted, started, preempted, stopped, deleted, crashed,
    scheduling."""

    state: GceState
    what: str
    reason: str

    def subject(self) -> str:
        return f"instance {self.state.name}"

    def describe(self) -> str | None:
        if self.what == "watched":  # a client read maintenance-event: recorded, not worth a line
            return None
        return f"instance {self.state.name} {self.what}: {self.reason}"
