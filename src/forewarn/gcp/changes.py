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


@dataclass(frozen=True)
class GceStateChanged(Change):
    """``what``: watched, migrated, terminated, restarted, started, preempted, stopped, deleted, crashed,
    scheduling."""

    state: GceState
    what: str
    reason: str
