"""The records the engine works on: event types, states and the event itself."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from forewarn.core.frozen import evolve


class EventType(str, enum.Enum):
    FREEZE = "Freeze"
    REBOOT = "Reboot"
    REDEPLOY = "Redeploy"
    PREEMPT = "Preempt"
    TERMINATE = "Terminate"


class EventSource(str, enum.Enum):
    PLATFORM = "Platform"
    USER = "User"


class Impact(str, enum.Enum):
    """What an event does to its VMs when it starts. Usually follows from the type; a reimage announced as a
    Reboot (OS image notifications) is the exception."""

    FREEZE = "freeze"
    REBOOT = "reboot"
    REDEPLOY = "redeploy"
    REIMAGE = "reimage"
    DELETE = "delete"


class EventStatus(str, enum.Enum):
    SCHEDULED = "Scheduled"
    STARTED = "Started"
    COMPLETED = "Completed"
    CANCELED = "Canceled"

    @property
    def live(self) -> bool:
        """Live events are the ones IMDS shows; Completed and Canceled leave the document for history."""
        return self in LIVE_STATUSES


# A set, not a tuple of ``EventStatus.X``: reading an enum member off its class costs about 100 ns on Python 3.11,
# and ``live`` is asked of every event a command, a step or a refresh touches.
LIVE_STATUSES = frozenset({EventStatus.SCHEDULED, EventStatus.STARTED})


# The only moves an event may make. Nothing goes backwards and terminal states stay terminal.
ALLOWED_TRANSITIONS = {
    EventStatus.SCHEDULED: {EventStatus.STARTED, EventStatus.CANCELED},
    EventStatus.STARTED: {EventStatus.COMPLETED},
    EventStatus.COMPLETED: set(),
    EventStatus.CANCELED: set(),
}


@dataclass(frozen=True, slots=True)
class Event:
    """What one broadcast scope is told about one operation.

    ``resources`` are VM names in the order the platform lists them. ``approvals`` are who approved it (VM names, or
    ``control`` for the operator); approval is not visible in IMDS but decides when the operation starts.
    """

    event_id: str
    seq: int
    operation_id: str
    scope: str
    event_type: EventType
    source: EventSource
    resources: tuple[str, ...]
    description: str
    duration_seconds: int
    not_before: datetime
    impact_window: timedelta
    status: EventStatus
    created_at: datetime
    started_at: datetime | None = None
    ends_at: datetime | None = None
    ended_at: datetime | None = None
    approvals: tuple[str, ...] = field(default_factory=tuple)
    impact: Impact | None = None  # None: the impact of the event's type
    # "Scheduled Events for Azure Virtual Machines": "while Started, more short impacts than the event announced may occur". This many short freezes
    # happen at even intervals of the impact window; they never happen after Completed.
    extra_impacts: int = 0
    # Published to Event Grid and Resource Graph ("Scheduled Events in Event Grid"): its policy owner opted in when it
    # was created. Fixed for the event's life, so that a consumer sees every transition of an event or none.
    central: bool = False

    def extra_impact_times(self) -> list[datetime]:
        if not self.extra_impacts or self.started_at is None:
            return []
        step = self.impact_window / (self.extra_impacts + 1)
        return [self.started_at + step * (index + 1) for index in range(self.extra_impacts)]

    def moved_to(self, status: EventStatus, now: datetime) -> Event:
        if status not in ALLOWED_TRANSITIONS[self.status]:
            raise AssertionError(f"illegal transition {self.status.value} -> {status.value} for {self.event_id}")
        if status is EventStatus.STARTED:
            return evolve(self, status=status, started_at=now, ends_at=_end(now, self.impact_window))
        return evolve(self, status=status, ended_at=now)

    def approved_by(self, who: str) -> Event:
        if who in self.approvals:
            return self
        return evolve(self, approvals=self.approvals + (who,))


@functools.lru_cache(maxsize=256)
def _end(start: datetime, window: timedelta) -> datetime:
    """One object for the end of every event that started at the same moment with the same window (a wave starts
    thousands at once, and keeps them all)."""
    return start + window


@dataclass(frozen=True)
class ScheduleRequest:
    """Maintenance on VMs: named ones, those on named hosts, or those of one update or fault domain of a set."""

    event_type: EventType
    vms: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    group: str | None = None  # a scale set or availability set, with update_domain or fault_domain
    update_domain: int | None = None
    fault_domain: int | None = None
    source: EventSource = EventSource.PLATFORM
    notice: timedelta | None = None
    not_before: datetime | None = None
    duration_seconds: int | None = None
    description: str | None = None
    impact_window: timedelta | None = None
    impact: Impact | None = None  # what the event does to its VMs; by default the type's impact
    start_now: bool = False  # no Scheduled state: hardware failure, automatically approved user operations
    per_vm: bool = False  # one event per VM, all in one operation (a batch of deletes)
    # short freezes while Started, beyond the announced impact ("Scheduled Events for Azure Virtual Machines")
    extra_impacts: int = 0
    reason: str = ""
