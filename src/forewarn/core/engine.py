"""The maintenance engine: commands in, changes out.

The engine never does I/O and never reads the wall clock; every command carries the simulated time it happens at.
Each command returns the list of changes it caused, which the service commits to the store before anyone is told.

Grouping (seed 003): the VMs of one scope on one host share one event; an *operation* is the work on one host, and
yields one event per affected scope. An operation starts when every one of its Scheduled events is approved (shared
hardware waits for all tenants), or when its NotBefore passes.

DocumentIncarnation: every scope starts at 1 with an empty document. It increases by one for each step that changes
the scope's Events array (a command, or the deadlines due at one instant), and only then.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Union

from forewarn.core.errors import Conflict, Invalid, NotFound
from forewarn.core.fleet import VM, Fleet
from forewarn.core.ids import derived_guid
from forewarn.core.model import Event, EventSource, EventStatus, EventType
from forewarn.core.rules import Rules, whole_second_ceiling

INITIAL_INCARNATION = 1


@dataclass(frozen=True)
class EventChanged:
    """An event was created or changed; ``what`` is scheduled, approved, started, completed or canceled."""

    event: Event
    what: str
    reason: str


@dataclass(frozen=True)
class IncarnationChanged:
    scope: str
    incarnation: int


@dataclass(frozen=True)
class TimeMoved:
    now: datetime


Change = Union[EventChanged, IncarnationChanged, TimeMoved]


@dataclass(frozen=True)
class ScheduleRequest:
    event_type: EventType
    vms: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    source: EventSource = EventSource.PLATFORM
    notice: timedelta | None = None
    not_before: datetime | None = None
    duration_seconds: int | None = None
    description: str | None = None
    impact_window: timedelta | None = None


@dataclass(order=True, frozen=True)
class _Deadline:
    at: datetime
    order: int
    kind: str  # "start" (operation id) or "complete" (event id)
    target: str


class Engine:
    def __init__(
        self,
        fleet: Fleet,
        seed: str,
        now: datetime,
        rules: Rules | None = None,
        events: Iterable[Event] = (),
        incarnations: dict[str, int] | None = None,
    ):
        self.fleet = fleet
        self.seed = seed
        self.rules = rules or Rules()
        self.now = now
        self.events: dict[str, Event] = {}
        self.operations: dict[str, list[str]] = {}
        self.incarnations: dict[str, int] = dict(incarnations or {})
        self._live_by_scope: dict[str, dict[str, None]] = {}
        self._deadlines: list[_Deadline] = []
        self._deadline_order = 0
        self.next_seq = 1
        for event in sorted(events, key=lambda e: e.seq):
            self._index(event)
            self.next_seq = max(self.next_seq, event.seq + 1)
            if event.status is EventStatus.SCHEDULED:
                self._push(event.not_before, "start", event.operation_id)
            elif event.status is EventStatus.STARTED:
                self._push(event.ends_at, "complete", event.event_id)

    # ----------------------------------------------------------------------------------------------- queries
    def incarnation(self, scope: str) -> int:
        return self.incarnations.get(scope, INITIAL_INCARNATION)

    def live_events(self, scope: str) -> list[Event]:
        """The events a scope's IMDS document shows, in the order they were created."""
        return [self.events[event_id] for event_id in self._live_by_scope.get(scope, ())]

    def event(self, event_id: str) -> Event:
        found = self.events.get(event_id.upper())
        if found is None:
            raise NotFound(f"no event with EventId {event_id}")
        return found

    def next_deadline(self) -> datetime | None:
        while self._deadlines and self._is_stale(self._deadlines[0]):
            heapq.heappop(self._deadlines)
        return self._deadlines[0].at if self._deadlines else None

    def operation_events(self, operation_id: str) -> list[Event]:
        return [self.events[event_id] for event_id in self.operations[operation_id]]

    # ---------------------------------------------------------------------------------------------- commands
    def schedule(self, request: ScheduleRequest) -> list[Change]:
        """Create events for the VMs named and the VMs on the hosts named: one per (host, scope), grouped per host."""
        targets = self._targets(request)
        if request.not_before is not None and request.notice is not None:
            raise Invalid("give either a notice or a NotBefore time, not both")
        if request.not_before is not None:
            not_before = whole_second_ceiling(request.not_before)
            if not_before < self.now:
                raise Invalid(f"NotBefore {not_before.isoformat()} is in the past (now {self.now.isoformat()})")
        else:
            notice = self.rules.notice[request.event_type] if request.notice is None else request.notice
            if notice < timedelta(0):
                raise Invalid("notice cannot be negative")
            not_before = whole_second_ceiling(self.now + notice)
        impact_window = (
            self.rules.impact_window[request.event_type] if request.impact_window is None else request.impact_window
        )
        if impact_window < timedelta(0):
            raise Invalid("impact window cannot be negative")
        duration = (
            self.rules.duration_seconds[request.event_type]
            if request.duration_seconds is None
            else request.duration_seconds
        )
        if duration < -1:
            raise Invalid("DurationInSeconds must be -1 (unknown), 0 or positive")
        description = (
            self.rules.description(request.event_type, request.source)
            if request.description is None
            else request.description
        )

        changes: list[Change] = []
        touched: set[str] = set()
        by_host: dict[str, dict[str, list[VM]]] = {}
        for vm in targets:
            by_host.setdefault(vm.host, {}).setdefault(vm.scope, []).append(vm)
        for host, scopes in by_host.items():
            operation_id = derived_guid(self.seed, "operation", self.next_seq)
            for scope, vms in scopes.items():
                seq = self.next_seq
                self.next_seq += 1
                event = Event(
                    event_id=derived_guid(self.seed, "event", seq),
                    seq=seq,
                    operation_id=operation_id,
                    scope=scope,
                    event_type=request.event_type,
                    source=request.source,
                    resources=tuple(vm.name for vm in vms),
                    description=description,
                    duration_seconds=duration,
                    not_before=not_before,
                    impact_window=impact_window,
                    status=EventStatus.SCHEDULED,
                    created_at=self.now,
                )
                self._index(event)
                touched.add(scope)
                changes.append(EventChanged(event, "scheduled", f"on host {host}"))
            self._push(not_before, "start", operation_id)
        return changes + self._bump(touched)

    def approve(self, event_ids: Iterable[str], by: str) -> list[Change]:
        """Approve events. Approving a Started, Completed or Canceled event changes nothing (and is not an error)."""
        wanted = [self.event(event_id) for event_id in event_ids]  # every id is checked before anything changes
        changes: list[Change] = []
        touched: set[str] = set()
        ready: list[str] = []
        for event in wanted:
            event = self.events[event.event_id]
            if event.status is not EventStatus.SCHEDULED or by in event.approvals:
                continue
            event = event.approved_by(by)
            self.events[event.event_id] = event
            changes.append(EventChanged(event, "approved", f"by {by}"))
            if event.operation_id not in ready and self._all_approved(event.operation_id):
                ready.append(event.operation_id)
        for operation_id in ready:
            changes += self._start_operation(operation_id, "approved", touched)
        return changes + self._bump(touched)

    def cancel(self, event_id: str, reason: str = "canceled by the operator") -> list[Change]:
        """Scheduled → Canceled, with no impact. A Started event cannot be canceled (seed 000)."""
        event = self.event(event_id)
        if event.status is not EventStatus.SCHEDULED:
            raise Conflict(f"event {event.event_id} is {event.status.value}; only Scheduled events can be canceled")
        event = event.moved_to(EventStatus.CANCELED, self.now)
        self._index(event)
        changes: list[Change] = [EventChanged(event, "canceled", reason)]
        touched = {event.scope}
        # The rest of the operation no longer waits for this event's approval.
        if self._all_approved(event.operation_id) and self._scheduled_in(event.operation_id):
            changes += self._start_operation(event.operation_id, "approved", touched)
        return changes + self._bump(touched)

    def advance(self, to: datetime) -> list[Change]:
        """Move simulated time to ``to``, applying every deadline due on the way, in order, one step per instant."""
        if to < self.now:
            raise Conflict(f"time cannot go backwards: now is {self.now.isoformat()}, asked {to.isoformat()}")
        changes: list[Change] = []
        while (due := self.next_deadline()) is not None and due <= to:
            self.now = max(self.now, due)
            touched: set[str] = set()
            batch = []
            while self._deadlines and self._deadlines[0].at == due:
                batch.append(heapq.heappop(self._deadlines))
            for deadline in batch:
                if self._is_stale(deadline):
                    continue
                if deadline.kind == "start":
                    changes += self._start_operation(deadline.target, "NotBefore passed", touched)
                else:
                    changes += self._complete(deadline.target, touched)
            changes += self._bump(touched)
        self.now = to
        changes.append(TimeMoved(to))
        return changes

    # ------------------------------------------------------------------------------------------------ helpers
    def _targets(self, request: ScheduleRequest) -> list[VM]:
        if not request.vms and not request.hosts:
            raise Invalid("name at least one VM or host")
        seen: dict[str, VM] = {}
        for name in request.vms:
            vm = self.fleet.vm(name)
            seen.setdefault(vm.name, vm)
        for host in request.hosts:
            vms = self.fleet.host_vms(host)
            if not vms:
                raise Invalid(f"host {host!r} runs no VM")
            for vm in vms:
                seen.setdefault(vm.name, vm)
        return list(seen.values())

    def _index(self, event: Event) -> None:
        self.events[event.event_id] = event
        members = self.operations.setdefault(event.operation_id, [])
        if event.event_id not in members:
            members.append(event.event_id)
        live = self._live_by_scope.setdefault(event.scope, {})
        if event.status.live:
            live[event.event_id] = None
        else:
            live.pop(event.event_id, None)

    def _push(self, at: datetime, kind: str, target: str) -> None:
        self._deadline_order += 1
        heapq.heappush(self._deadlines, _Deadline(at, self._deadline_order, kind, target))

    def _is_stale(self, deadline: _Deadline) -> bool:
        if deadline.kind == "start":
            return not self._scheduled_in(deadline.target)
        return self.events[deadline.target].status is not EventStatus.STARTED

    def _scheduled_in(self, operation_id: str) -> list[Event]:
        return [e for e in self.operation_events(operation_id) if e.status is EventStatus.SCHEDULED]

    def _all_approved(self, operation_id: str) -> bool:
        return all(e.approvals for e in self._scheduled_in(operation_id))

    def _start_operation(self, operation_id: str, reason: str, touched: set[str]) -> list[Change]:
        changes: list[Change] = []
        for event in self._scheduled_in(operation_id):
            event = event.moved_to(EventStatus.STARTED, self.now)
            self._index(event)
            self._push(event.ends_at, "complete", event.event_id)
            touched.add(event.scope)
            changes.append(EventChanged(event, "started", reason))
        return changes

    def _complete(self, event_id: str, touched: set[str]) -> list[Change]:
        event = self.events[event_id].moved_to(EventStatus.COMPLETED, self.now)
        self._index(event)
        touched.add(event.scope)
        return [EventChanged(event, "completed", "impact window over")]

    def _bump(self, scopes: set[str]) -> list[Change]:
        changes: list[Change] = []
        for scope in sorted(scopes):
            self.incarnations[scope] = self.incarnation(scope) + 1
            changes.append(IncarnationChanged(scope, self.incarnations[scope]))
        return changes
