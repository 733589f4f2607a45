"""The Azure component: scheduled events, their operations and scopes, DocumentIncarnations, the VMs' states and
impacts, scheduledEventsPolicy and notification profiles, user operations, the platform's exceptional cases, and
enabling by first request.

Grouping ("Scheduled Events in Event Grid"): the VMs of one scope on one host share one event; an *operation* is the
work on one host, and yields one event per affected scope. An operation starts when every one of its Scheduled events
is approved (shared hardware waits for all tenants), or when its NotBefore passes.

DocumentIncarnation: every scope starts at 1 with an empty document. It increases by one for each step that changes
the scope's Events array (a command, or the deadlines due at one instant), and only then: a :class:`DocumentStep`
collects the scopes a step touched, and :meth:`AzureComponent.end_step` moves each of them by one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from forewarn.azure.changes import EventChanged, IncarnationChanged, PolicyChanged, ScopeEnabled, VmChanged
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import Event, EventSource, EventStatus, EventType, Impact, ScheduleRequest
from forewarn.azure.rules import AzureRules
from forewarn.azure.vms import (
    IMPACT_OF_TYPE,
    VM,
    NotificationProfile,
    Policies,
    Policy,
    Power,
    VmState,
    VmStates,
    check_os_image_profile,
    check_terminate_profile,
)
from forewarn.core.bounds import (
    MAX_DURATION_SECONDS,
    MAX_EVENT_LENGTH,
    MAX_NOTICE,
    check_duration,
    check_time,
    check_whole_number,
    checked_not_before,
    clamped_end,
    clamped_time,
    iso_time,
)
from forewarn.core.changes import REPLICATED, Change, Rebuilt
from forewarn.core.component import Footing, OnFooting
from forewarn.core.durations import format_duration
from forewarn.core.errors import Ambiguous, Conflict, Invalid, NotFound
from forewarn.core.ids import NumberedGuids, derived_guid
from forewarn.core.words import counted

INITIAL_INCARNATION = 1
MAX_EXTRA_IMPACTS = 100
# The shortest EventId prefix the control API resolves (git's shortest abbreviation too): shorter ones are ambiguous as
# soon as a few dozen events exist.
MIN_EVENT_ID_PREFIX = 4
EVENT_ID_LENGTH = 36  # C7061BAC-AFDC-4513-B24B-AA5F13A16123
SUGGESTED_EVENT_IDS = 1_000
_FAR_FUTURE = datetime.max.replace(tzinfo=UTC)


def event_numbering(seed: str) -> NumberedGuids:
    """EventIds as the seed makes them from the events' numbers, and back (the store finds an event by its number)."""
    return NumberedGuids(seed, "azure-event")


@dataclass(frozen=True)
class StoredAzure:
    """What the store keeps of the Azure component; the rest is derived from it and the fleet."""

    events: Iterable[Event] = ()
    incarnations: Mapping[str, int] = field(default_factory=dict)
    vm_states: Iterable[VmState] = ()
    policies: Iterable[Policy] = ()
    enabled: Mapping[str, datetime] = field(default_factory=dict)  # scope -> its VMs' latest request


@dataclass(frozen=True)
class AzureRows:
    """Rows some commits touched, as they are now (None: the row is gone, or never was): what a replica applies to
    its engine (:meth:`AzureComponent.replicate`)."""

    events: Mapping[int, Event | None] = field(default_factory=dict)  # by number (seq)
    incarnations: Mapping[str, int | None] = field(default_factory=dict)
    vm_states: Mapping[str, VmState | None] = field(default_factory=dict)
    policies: Mapping[str, Policy | None] = field(default_factory=dict)
    enabled: Mapping[str, datetime | None] = field(default_factory=dict)


class DocumentStep:
    """The scopes whose Events array one step changed (a command, or the deadlines due at one instant): each moves
    one DocumentIncarnation when the step ends (:meth:`AzureComponent.end_step`)."""

    def __init__(self) -> None:
        self.scopes: set[str] = set()

    def touch(self, scope: str) -> None:
        self.scopes.add(scope)


# Told when an event becomes Completed or Canceled, inside the step that ended it; its changes join that step's.
EventEndedListener = Callable[[Event, DocumentStep], list[Change]]


class EventHistory(Protocol):
    """The events as the database holds them (``azure/records.py``'s StoredEvents): where the component reads the
    events it no longer keeps in memory."""

    def get(self, event_id: str) -> Event | None: ...

    def by_seq(self, seq: int) -> Event | None: ...

    def ids_starting(self, prefix: str) -> list[str]:
        """Every EventId that starts with ``prefix``, in order: a read of every event, too long for the event loop."""
        ...

    def ended(self) -> list[Event]:
        """Every ended event, in creation order."""
        ...


class AzureComponent(OnFooting[AzureRules]):
    """State: ``events`` (by EventId) and their ``operations``, each scope's ``incarnations``, ``vm_states``,
    ``policies`` and ``last_seen`` (enabling); in memory only, which VMs each host runs and the live events of each
    scope.

    With a ``history`` (the database the engine commits to), an event that ended leaves ``events`` once its end is
    committed (:meth:`release`): no document shows it again, and a million ended events would hold a gigabyte.
    :meth:`find`, :meth:`event`, :meth:`resolve_event_id` and :meth:`all_events` read it from ``history`` then.
    Without one (an engine committed nowhere), every event stays."""

    def __init__(self, footing: Footing, stored: StoredAzure, history: EventHistory | None = None) -> None:
        super().__init__(footing, footing.rules.of(AzureRules))
        self._history = history
        self.event_ids = event_numbering(self.seed)
        # Events that ended since the last release: they leave memory at the next (once their end is durable).
        self._ending: list[str] = []
        fleet, scheduler, sequence, created_at = footing.fleet, footing.scheduler, footing.sequence, footing.created_at
        self._event_ended: list[EventEndedListener] = []
        self._start_deadline = scheduler.kind("azure-start", self._start_due, self._start_stale)
        self._complete_deadline = scheduler.kind("azure-complete", self._complete_due, self._not_started)
        self._extra_deadline = scheduler.kind("azure-extra-impact", self._extra_impact, self._not_started)
        self._recover_deadline = scheduler.kind("azure-recover", self._recover, self._recovery_stale)
        # The deadlines of one instant are one step (their scheduler's step hook ends it).
        self._deadline_step = DocumentStep()
        scheduler.on_step_end(self._end_deadline_step)
        # What was brought inside the bounds (bounds.py) on loading a database written before them: the service
        # logs these changes and writes them back before it serves.
        self.repaired: list[Change] = []
        self.last_seen: dict[str, datetime] = dict(stored.enabled)
        self.policies = Policies(
            azure_fleet(fleet).vms_by_owner, [*azure_fleet(fleet).policies.values(), *stored.policies]
        )
        # A VM nothing happened to is in the state it was deployed in, on its owner's deployed model: only the others
        # are held (and stored).
        self.vm_states = VmStates(azure_fleet(fleet).vms, created_at, azure_fleet(fleet).policies)
        for state in stored.vm_states:
            if state.name in self.vm_states:
                self.vm_states[state.name] = state
        # host -> the VMs running on it now, for the hosts where that differs from the fleet (redeploys move VMs,
        # deletes remove them); read in fleet order, so that an engine rebuilt from stored state groups them
        # exactly as the one that never stopped
        self._host_members: dict[str, dict[str, None]] = {}
        for state in list(self.vm_states.changed()):
            deployed_on = azure_fleet(fleet).vms[state.name].host
            if state.deleted or state.host != deployed_on:
                self._members(deployed_on).pop(state.name, None)
                if not state.deleted:
                    self._members(state.host)[state.name] = None
            if state.impact_until is not None and clamped_end(state.impact_until) != state.impact_until:
                state = replace(state, impact_until=clamped_end(state.impact_until))
                self.vm_states[state.name] = state
                self.repaired.append(VmChanged(state, "repaired", "impact end brought inside the simulated range"))
        self.events: dict[str, Event] = {}
        self.operations: dict[str, list[str]] = {}
        self.incarnations: dict[str, int] = dict(stored.incarnations)
        self._live_by_scope: dict[str, dict[str, None]] = {}
        for event in sorted(map(self._within_bounds, stored.events), key=lambda e: e.seq):
            self._index(event)
            sequence.past(event.seq)
            if event.status is EventStatus.SCHEDULED:
                scheduler.add(event.not_before, self._start_deadline, event.operation_id)
            elif event.status is EventStatus.STARTED:
                scheduler.add(_impact_end(event), self._complete_deadline, event.event_id)
                self._set_extra_impacts(event)
        for state in self.vm_states.changed():
            if state.impact_until is not None:
                scheduler.add(state.impact_until, self._recover_deadline, state.name)

    def on_event_ended(self, listener: EventEndedListener) -> None:
        """``listener(event, step)`` whenever an event becomes Completed or Canceled."""
        self._event_ended.append(listener)

    # ----------------------------------------------------------------------------------------------- queries
    def incarnation(self, scope: str) -> int:
        return self.incarnations.get(scope, INITIAL_INCARNATION)

    def live_events(self, scope: str) -> list[Event]:
        """The events a scope's IMDS document shows, in the order they were created."""
        return [self.events[event_id] for event_id in self._live_by_scope.get(scope, ())]

    def find(self, event_id: str) -> Event | None:
        """The event with this EventId (upper case), from memory or, once it ended and left, from the database."""
        found = self.events.get(event_id)
        if found is None and self._history is not None:
            found = self._history.get(event_id)
        return found

    def event(self, event_id: str) -> Event:
        found = self.find(event_id.upper())
        if found is None:
            raise NotFound(f"no event with EventId {event_id}", name=event_id.upper(), known=self._suggested_ids())
        return found

    def all_events(self, held: Iterable[Event] | None = None) -> list[Event]:
        """Every event, ended ones included, in the order they were created. ``held``: the events memory held when
        the caller took them, for a caller that reads the database in another thread (None: memory's now)."""
        held = self.events.values() if held is None else held
        found = {} if self._history is None else {event.event_id: event for event in self._history.ended()}
        found.update((event.event_id, event) for event in held)  # what memory holds is at least as new
        return sorted(found.values(), key=lambda e: e.seq)

    def resolve_event_id(self, text: str, starting: list[str] | None = None) -> str:
        """The EventId that ``text`` names: the whole id (any case), or an unambiguous prefix of at least
        ``MIN_EVENT_ID_PREFIX`` characters, as short git and docker ids are. ``starting``: the EventIds the database
        holds that start with :meth:`prefix_to_search`'s prefix, read by a caller that keeps the event loop free
        meanwhile (None: read here)."""
        wanted = text.strip().upper()
        if len(wanted) == EVENT_ID_LENGTH and self.find(wanted) is not None:
            return wanted
        if len(wanted) < MIN_EVENT_ID_PREFIX:
            raise Invalid(
                f"{text!r} is too short for an EventId prefix; give at least {MIN_EVENT_ID_PREFIX} characters"
            )
        found: list[str] = []
        if len(wanted) >= EVENT_ID_LENGTH:  # a whole EventId that is not there starts no other
            pass
        elif self._history is not None:
            # The database holds every event committed, live ones too. An event not committed yet has been shown to
            # no client.
            found = self._history.ids_starting(wanted) if starting is None else starting
        else:
            found = sorted(event_id for event_id in self.events if event_id.startswith(wanted))
        if len(found) == 1:
            return found[0]
        if not found:
            raise NotFound(f"no event whose EventId is or starts with {text}", name=wanted, known=self._suggested_ids())
        shown = [f"{event_id} ({self._status_of(event_id)})" for event_id in found[:10]]
        more = f" and {len(found) - 10} more" if len(found) > 10 else ""
        raise Ambiguous(f"{text} is the start of {len(found)} EventIds: {', '.join(shown)}{more}; give more characters")

    def prefix_to_search(self, text: str) -> str | None:
        """The prefix :meth:`resolve_event_id` would look for in the database (None: it would not), upper case."""
        wanted = text.strip().upper()
        if self._history is None or not MIN_EVENT_ID_PREFIX <= len(wanted) < EVENT_ID_LENGTH:
            return None
        return wanted

    def ids_starting(self, prefix: str) -> list[str]:
        """The EventIds the database holds that start with ``prefix``: a read of every event (EventHistory)."""
        return [] if self._history is None else self._history.ids_starting(prefix)

    def _suggested_ids(self) -> Iterable[str]:
        """The EventIds a mistyped one is compared with for a "did you mean": memory's, while they are few. Beyond,
        the comparison takes a sample (core/errors.py's pool), which says nothing of the random id meant."""
        return self.events.keys() if len(self.events) <= SUGGESTED_EVENT_IDS else ()

    def _status_of(self, event_id: str) -> str:
        event = self.find(event_id)
        return "gone" if event is None else event.status.value

    def event_by_seq(self, seq: int) -> Event | None:
        """The event created as number ``seq`` (events are numbered in creation order). Its EventId is made from the
        number, so memory keeps no index of numbers (a million events would make it a hundred megabytes); the
        database is keyed by them."""
        event = self.events.get(self.event_ids.guid(seq))
        if event is None and self._history is not None:
            event = self._history.by_seq(seq)
            if event is not None:  # one written before EventIds were made from numbers may still be live in memory
                event = self.events.get(event.event_id, event)
        return event if event is not None and event.seq == seq else None

    def operation_events(self, operation_id: str) -> list[Event]:
        """The events of an operation that memory holds: every live one (those that ended may have left)."""
        return [self.events[event_id] for event_id in self.operations.get(operation_id, ())]

    def vms_on_host(self, host: str) -> list[VM]:
        """The VMs running on a host now (redeployed VMs have moved; deleted ones are gone)."""
        if host not in self.fleet.hosts:
            raise NotFound(f"no host named {host!r} in the fleet", name=host, known=self.fleet.hosts.keys())
        return [azure_fleet(self.fleet).vms[name] for name in self.names_on_host(host)]

    def names_on_host(self, host: str) -> list[str]:
        members = self._host_members.get(host)
        if members is None:
            return [vm.name for vm in azure_fleet(self.fleet).vms_by_host.get(host, ())]
        return sorted(members, key=azure_fleet(self.fleet).position)

    def count_on_host(self, host: str) -> int:
        """How many VMs run on a host now: ``names_on_host`` counted, not listed (a schedule over thousands of hosts
        counts each host's machines on the event loop)."""
        members = self._host_members.get(host)
        return len(azure_fleet(self.fleet).vms_by_host.get(host, ())) if members is None else len(members)

    def host_names(self) -> list[str]:
        """Every host that runs or ran a VM: the fleet's, in fleet order, then the spare hosts redeploys made."""
        return [*self.fleet.hosts, *(host for host in self._host_members if host not in self.fleet.hosts)]

    def _members(self, host: str) -> dict[str, None]:
        """The VMs on ``host``, to change: from now on held for that host, no longer read from the fleet."""
        members = self._host_members.get(host)
        if members is None:
            members = self._host_members[host] = {
                vm.name: None for vm in azure_fleet(self.fleet).vms_by_host.get(host, ())
            }
        return members

    def impact_of(self, event: Event) -> Impact:
        return event.impact or IMPACT_OF_TYPE[event.event_type]

    # ---------------------------------------------------------------------------------------------- commands
    def schedule(self, request: ScheduleRequest) -> list[Change]:
        """Create events for the VMs named and the VMs on the hosts named: one per (host, scope), grouped per host."""
        step = DocumentStep()
        changes = self.create_events(request, step)
        return changes + self.end_step(step)

    def create_events(self, request: ScheduleRequest, step: DocumentStep) -> list[Change]:
        """The events of one request, within ``step``: a command that creates several batches (a restart of VMs with
        different policies, deletes with different timeouts, a wave's units) is still one step."""
        targets = self._targets(request)
        not_before, impact_window, duration, description = self.check_request(request)  # before anything changes
        if self.rules.enabling_required and not request.start_now:
            unwarned = [vm.name for vm in targets if not self.is_enabled(vm.scope)]
            if unwarned:
                warned = [vm.name for vm in targets if vm.name not in unwarned]
                changes = self.create_events(
                    replace(
                        request,
                        vms=tuple(unwarned),
                        hosts=(),
                        group=None,
                        start_now=True,
                        not_before=None,
                        notice=None,
                        reason=_joined(request.reason, "no notice: Scheduled Events not enabled for the VM"),
                    ),
                    step,
                )
                if warned:
                    changes += self.create_events(replace(request, vms=tuple(warned), hosts=(), group=None), step)
                return changes
        changes = []
        # The VMs of one scope on one host share an event; each host is one operation. A batch of per-VM events
        # (deletes) is one operation, so that its events start together ("Terminate notification for Azure Virtual
        # Machine Scale Set instances").
        operations: dict[str, dict[str, list[VM]]] = {}
        for vm in targets:
            host = "batch" if request.per_vm else self.vm_states.host(vm.name)
            group = vm.name if request.per_vm else vm.scope
            operations.setdefault(host, {}).setdefault(group, []).append(vm)
        for host, groups in operations.items():
            operation_id = derived_guid(self.seed, "operation", self.sequence.next_number)
            for vms in groups.values():
                scope = vms[0].scope
                seq = self.sequence.take()
                event = Event(
                    event_id=self.event_ids.guid(seq),
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
                    impact=request.impact,
                    extra_impacts=request.extra_impacts,
                    central=self.policies.publishes_central(vms[0].policy_owner),
                )
                self._index(event)
                step.touch(scope)
                if not request.start_now:
                    where = "in one batch" if request.per_vm else f"on host {host}"
                    changes.append(EventChanged(event, "scheduled", _joined(request.reason, where)))
            if request.start_now:
                changes += self._start_operation(operation_id, request.reason or "started at once", step)
            else:
                self.scheduler.add(not_before, self._start_deadline, operation_id)
        return changes

    def check_request(self, request: ScheduleRequest) -> tuple[datetime, timedelta, int, str]:
        """NotBefore, impact window, DurationInSeconds and Description of a request, or the reason it is refused."""
        if request.start_now and request.not_before is None:
            not_before = check_time(self.now, "NotBefore")
        else:
            default = self.rules.notice[request.event_type]
            not_before = checked_not_before(request.not_before, request.notice, default, self.now)
        impact_window = (
            self.rules.impact_window[request.event_type] if request.impact_window is None else request.impact_window
        )
        check_duration(impact_window, "impact window", MAX_EVENT_LENGTH)
        duration = (
            self.rules.duration_seconds[request.event_type]
            if request.duration_seconds is None
            else request.duration_seconds
        )
        check_whole_number(duration, "DurationInSeconds (-1: unknown)", -1, MAX_DURATION_SECONDS)
        check_whole_number(request.extra_impacts, "extra impacts", 0, MAX_EXTRA_IMPACTS)
        description = (
            self.rules.description(request.event_type, request.source)
            if request.description is None
            else request.description
        )
        return not_before, impact_window, duration, description

    def check_schedule(self, request: ScheduleRequest) -> None:
        """Refuse ``request`` as :meth:`schedule` would, changing nothing. A request naming hosts only is checked
        host by host, without listing their VMs (5,000 hosts of a million-VM fleet are 45,000 VMs)."""
        if request.vms or request.group is not None or not request.hosts:
            self._targets(request)
        else:
            for host in request.hosts:
                if host not in self.fleet.hosts:
                    raise NotFound(f"no host named {host!r} in the fleet", name=host, known=self.fleet.hosts.keys())
                if not self.count_on_host(host):
                    raise Invalid(f"host {host!r} runs no VM")
        self.check_request(request)

    def check_approve(self, event_ids: Iterable[str]) -> None:
        """Refuse an approval as :meth:`approve` would (an id that names no event), changing nothing."""
        for event_id in event_ids:
            self.event(event_id)

    def check_cancel(self, event_id: str) -> None:
        """Refuse a cancel as :meth:`cancel` would, changing nothing."""
        event = self.event(event_id)
        if event.status is not EventStatus.SCHEDULED:
            raise Conflict(f"event {event.event_id} is {event.status.value}; only Scheduled events can be canceled")

    def in_scope(self, scope: str, event_ids: Iterable[str]) -> tuple[list[str], list[str]]:
        """``event_ids`` split into those of events a VM of ``scope`` sees, and the others (no such event, or
        another scope's)."""
        seen: list[str] = []
        unseen: list[str] = []
        for event_id in event_ids:
            event = self.find(event_id)
            (seen if event is not None and event.scope == scope else unseen).append(event_id)
        return seen, unseen

    def check_approve_from(self, scope: str, event_ids: Iterable[str], reject_unseen: bool) -> None:
        """Refuse a VM's approval as :meth:`approve_from` would, changing nothing."""
        _, unseen = self.in_scope(scope, event_ids)
        if reject_unseen and unseen:
            raise NotFound(f"EventId {unseen[0]} is not a scheduled event of this VM")

    def approve_from(self, scope: str, event_ids: Iterable[str], by: str, reject_unseen: bool) -> list[Change]:
        """A VM's approval (the IMDS POST's StartRequests): the events of its ``scope`` among ``event_ids``. An
        EventId the VM cannot see is refused (``reject_unseen``, NotFound, nothing approved) or passed over."""
        ids = list(event_ids)
        self.check_approve_from(scope, ids, reject_unseen)
        seen, _ = self.in_scope(scope, ids)
        return self.approve(seen, by)

    def approve(self, event_ids: Iterable[str], by: str) -> list[Change]:
        """Approve events. Approving a Started, Completed or Canceled event changes nothing (and is not an error)."""
        wanted = [self.event(event_id) for event_id in event_ids]  # every id is checked before anything changes
        changes: list[Change] = []
        step = DocumentStep()
        ready: list[str] = []
        for event in wanted:
            event = self.events.get(event.event_id, event)  # as an earlier id of the list left it
            if event.status is not EventStatus.SCHEDULED or by in event.approvals:
                continue
            event = event.approved_by(by)
            self.events[event.event_id] = event
            changes.append(EventChanged(event, "approved", f"by {by}"))
            if event.operation_id not in ready and self._all_approved(event.operation_id):
                ready.append(event.operation_id)
        for operation_id in ready:
            changes += self._start_operation(operation_id, "approved", step)
        return changes + self.end_step(step)

    def cancel(self, event_id: str, reason: str = "canceled by the operator") -> list[Change]:
        """Scheduled → Canceled, with no impact. A Started event cannot be canceled ("Scheduled Events for
        Azure Virtual Machines")."""
        self.check_cancel(event_id)
        event = self.event(event_id)
        step = DocumentStep()
        changes = self.cancel_scheduled(event, reason, step)
        return changes + self.end_step(step)

    def cancel_scheduled(self, event: Event, reason: str, step: DocumentStep) -> list[Change]:
        """A Scheduled event → Canceled, within ``step``."""
        event = event.moved_to(EventStatus.CANCELED, self.now)
        self._index(event)
        changes: list[Change] = [EventChanged(event, "canceled", reason)]
        step.touch(event.scope)
        # The rest of the operation no longer waits for this event's approval.
        if self._all_approved(event.operation_id) and self._scheduled_in(event.operation_id):
            changes += self._start_operation(event.operation_id, "approved", step)
        return changes + self._ended(event, step)

    def end_step(self, step: DocumentStep) -> list[Change]:
        """One DocumentIncarnation more for every scope the step touched."""
        changes: list[Change] = []
        for scope in sorted(step.scopes):
            self.incarnations[scope] = self.incarnation(scope) + 1
            changes.append(IncarnationChanged(scope, self.incarnations[scope]))
        return changes

    # -------------------------------------------------------------------------- enabling (the IMDS pages)
    def is_enabled(self, scope: str) -> bool:
        seen = self.last_seen.get(scope)
        return seen is not None and self.now - seen <= self.rules.disable_after

    def request_seen(self, scope: str) -> list[Change]:
        """A VM of the scope asked for its events. Enabling (first request, or the first after 24 idle hours) is a
        change to commit; a request on an enabled scope only moves the idle timer, in memory."""
        enabled = self.is_enabled(scope)
        self.last_seen[scope] = self.now
        return [] if enabled else [ScopeEnabled(scope, self.now)]

    # ------------------------------------------------------------------------------- user-initiated operations
    def restart(self, vms: Iterable[str], notice: timedelta | None = None) -> list[Change]:
        """A user restarts VMs: a User Reboot, started at once where the owner's policy approves it automatically."""
        return self._user_maintenance(EventType.REBOOT, vms, notice, "auto_approve_reboot", "restart requested")

    def redeploy(self, vms: Iterable[str], notice: timedelta | None = None) -> list[Change]:
        return self._user_maintenance(EventType.REDEPLOY, vms, notice, "auto_approve_redeploy", "redeploy requested")

    def _user_maintenance(
        self, event_type: EventType, vms: Iterable[str], notice: timedelta | None, policy_field: str, reason: str
    ) -> list[Change]:
        if notice is not None:  # checked before the automatically approved part starts anything
            check_duration(notice, "notice", MAX_NOTICE)
        names = list(vms)
        targets = self._targets(ScheduleRequest(event_type, vms=tuple(names)))
        approved = [vm.name for vm in targets if getattr(self.policies[vm.policy_owner], policy_field)]
        waiting = [vm.name for vm in targets if vm.name not in approved]
        changes: list[Change] = []
        step = DocumentStep()
        if approved:  # "Scheduled Events for Azure Virtual Machines": auto-approved events skip Scheduled
            changes += self.create_events(
                ScheduleRequest(
                    event_type,
                    vms=tuple(approved),
                    source=EventSource.USER,
                    start_now=True,
                    reason=f"{reason}; automatically approved by scheduledEventsPolicy",
                ),
                step,
            )
        if waiting:
            changes += self.create_events(
                ScheduleRequest(
                    event_type,
                    vms=tuple(waiting),
                    source=EventSource.USER,
                    notice=notice,
                    reason=reason,
                ),
                step,
            )
        return changes + self.end_step(step)

    def reimage(self, vms: Iterable[str]) -> list[Change]:
        """Scale-set instances whose model enables OS image notifications get a Reboot event announcing the reimage
        (notice: the profile's notBeforeTimeout); other VMs are reimaged at once, unannounced."""
        targets = self._targets(ScheduleRequest(EventType.REBOOT, vms=tuple(vms)))
        announced = [vm.name for vm in targets if self.vm_states[vm.name].os_image.enable]
        changes: list[Change] = []
        step = DocumentStep()
        for name in announced:
            changes += self.create_events(
                ScheduleRequest(
                    EventType.REBOOT,
                    vms=(name,),
                    source=EventSource.USER,
                    impact=Impact.REIMAGE,
                    notice=self.vm_states[name].os_image.not_before_timeout,
                    reason="reimage requested",
                ),
                step,
            )
        for vm in targets:
            if vm.name not in announced:
                changes += self._impact(vm.name, Impact.REIMAGE, "reimage (not announced)", -1, _FAR_FUTURE)
        return changes + self.end_step(step)

    def delete(
        self, vms: Iterable[str], source: EventSource = EventSource.USER, reason: str = "delete requested"
    ) -> list[Change]:
        """Deleting VMs. Instances whose model enables terminate notifications get one Terminate event each, all in
        one batch that starts when every event is approved or the timeout passes ("Terminate notification for
        Azure Virtual Machine Scale Set instances"); the rest go at once."""
        targets = self._targets(ScheduleRequest(EventType.TERMINATE, vms=tuple(vms)))
        for vm in targets:
            if self._being_deleted(vm.name):
                raise Conflict(f"{vm.name} is already being deleted (its Terminate event is live)")
        announced = [vm for vm in targets if self.vm_states[vm.name].terminate.enable and not vm.spot]
        announced_names = {vm.name for vm in announced}
        changes: list[Change] = []
        by_timeout: dict[timedelta, list[str]] = {}
        for vm in announced:
            by_timeout.setdefault(self.vm_states[vm.name].terminate.not_before_timeout, []).append(vm.name)
        step = DocumentStep()
        for timeout, names in by_timeout.items():
            changes += self.create_events(
                ScheduleRequest(
                    EventType.TERMINATE,
                    vms=tuple(names),
                    source=source,
                    notice=timeout,
                    per_vm=True,
                    reason=reason,
                ),
                step,
            )
        for vm in targets:
            if vm.name not in announced_names:
                changes += self._impact(vm.name, Impact.DELETE, f"{reason} (not announced)", -1, self.now)
        return changes + self.end_step(step)

    def scale_in(self, scale_set: str, count: int) -> list[Change]:
        """Remove ``count`` instances, highest instance ids first (the "Default" scale-in policy's last step)."""
        owner = azure_fleet(self.fleet).owner(scale_set)
        if not owner.startswith("vmss:"):
            raise Invalid(f"{scale_set} is not a scale set")
        running = [
            vm
            for vm in azure_fleet(self.fleet).vms_by_owner[owner]
            if not self.vm_states[vm.name].deleted and not self._being_deleted(vm.name)
        ]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1 or count > len(running):
            raise Invalid(f"{scale_set} has {counted(len(running), 'instance')} to scale in; asked to remove {count}")
        victims = sorted(running, key=lambda vm: int(vm.instance_id or 0))[-count:]
        return self.delete([vm.name for vm in victims], EventSource.PLATFORM, "scale-in")

    def _being_deleted(self, name: str) -> bool:
        return any(
            e.event_type is EventType.TERMINATE and e.status.live and name in e.resources for e in self.events.values()
        )

    # ------------------------------------------------------------------------------------ policies and models
    def policy(self, owner_name: str) -> Policy:
        return self.policies[azure_fleet(self.fleet).owner(owner_name)]

    def update_policy(
        self,
        owner_name: str,
        auto_approve_reboot: bool | None = None,
        auto_approve_redeploy: bool | None = None,
        terminate: NotificationProfile | None = None,
        os_image: NotificationProfile | None = None,
        publish_central: bool | None = None,
    ) -> list[Change]:
        """Change a scheduledEventsPolicy or a scale set's notification profiles. Profile changes make a new model
        version; instances follow it only when updated to the latest model (``update_instances``). Central
        publishing (Event Grid and Resource Graph) applies to the events created from then on."""
        owner = azure_fleet(self.fleet).owner(owner_name)
        policy = self.policies[owner]
        members = azure_fleet(self.fleet).vms_by_owner[owner]
        if (terminate is not None or os_image is not None) and not owner.startswith("vmss:"):
            raise Invalid("terminate and OS image notification profiles belong to scale sets")
        if terminate is not None:
            check_terminate_profile(terminate, spot=any(vm.spot for vm in members))
        if os_image is not None:
            check_os_image_profile(os_image, members[0].size)
        new_model = (terminate is not None and terminate != policy.terminate) or (
            os_image is not None and os_image != policy.os_image
        )
        updated = Policy(
            owner,
            policy.auto_approve_reboot if auto_approve_reboot is None else auto_approve_reboot,
            policy.auto_approve_redeploy if auto_approve_redeploy is None else auto_approve_redeploy,
            policy.terminate if terminate is None else terminate,
            policy.os_image if os_image is None else os_image,
            policy.model_version + 1 if new_model else policy.model_version,
            policy.publish_central if publish_central is None else publish_central,
        )
        if updated == policy:
            return []
        self.policies[owner] = updated
        return [PolicyChanged(updated)]

    def update_instances(self, scale_set: str, vms: Iterable[str] = ()) -> list[Change]:
        """Bring instances (all when none are named) to the scale set's latest model, with its profiles."""
        owner = azure_fleet(self.fleet).owner(scale_set)
        if not owner.startswith("vmss:"):
            raise Invalid(f"{scale_set} is not a scale set")
        policy = self.policies[owner]
        members = {vm.name: vm for vm in azure_fleet(self.fleet).vms_by_owner[owner]}
        names = list(vms) or list(members)
        for name in names:
            if name not in members:
                raise NotFound(f"{name} is not an instance of {scale_set}", name=name, known=members.keys())
        changes: list[Change] = []
        for name in names:
            state = self.vm_states[name]
            if state.deleted or state.model_version == policy.model_version:
                continue
            state = replace(
                state, terminate=policy.terminate, os_image=policy.os_image, model_version=policy.model_version
            )
            self.vm_states[name] = state
            changes.append(VmChanged(state, "updated", f"to model version {policy.model_version}"))
        return changes

    # ------------------------------------------------------------------------------- platform's exceptional cases
    def hardware_failure(self, hosts: Iterable[str], event_type: EventType | None = None) -> list[Change]:
        """The host failed: no notice, the events appear as Started ("Scheduled Events for Azure Virtual Machines")."""
        return self.schedule(
            ScheduleRequest(
                event_type or self.rules.hardware_failure_type,
                hosts=tuple(hosts),
                start_now=True,
                description="Host server is undergoing an emergency repair.",
                reason="hardware failure",
            )
        )

    def predicted_failure(self, hosts: Iterable[str], notice: timedelta | None = None) -> list[Change]:
        """Degraded hardware: a Redeploy with NotBefore days ahead; approving it brings the move forward."""
        return self.schedule(
            ScheduleRequest(
                EventType.REDEPLOY,
                hosts=tuple(hosts),
                notice=notice or self.rules.predicted_failure_notice,
                reason="predicted hardware failure",
            )
        )

    def evict(self, vms: Iterable[str]) -> list[Change]:
        """Spot eviction: Preempt with 30 s notice (best effort), then the VM is deleted."""
        names = list(vms)
        for name in names:
            if not azure_fleet(self.fleet).vm(name).spot:
                raise Invalid(f"{name} is not a Spot VM; only Spot VMs are evicted")
        return self.schedule(ScheduleRequest(EventType.PREEMPT, vms=tuple(names), reason="Spot eviction"))

    # ------------------------------------------------------------------------------------------------ helpers
    def _within_bounds(self, event: Event) -> Event:
        """A stored event, with what lies beyond the bounds clamped to them (a database written before they were
        enforced: a DurationInSeconds of 10**12 used to overflow when the event started). Clamping keeps the event
        and its lifecycle; only the out-of-range value changes, and the change is recorded in ``repaired``."""
        fixed = event
        duration = event.duration_seconds
        if isinstance(duration, bool) or not isinstance(duration, int):
            fixed = replace(fixed, duration_seconds=-1)  # not a number of seconds: unknown
        elif not -1 <= duration <= MAX_DURATION_SECONDS:
            fixed = replace(fixed, duration_seconds=min(max(duration, -1), MAX_DURATION_SECONDS))
        window = min(max(event.impact_window, timedelta(0)), MAX_EVENT_LENGTH)
        if window != event.impact_window:
            fixed = replace(fixed, impact_window=window)
        if not 0 <= event.extra_impacts <= MAX_EXTRA_IMPACTS:
            fixed = replace(fixed, extra_impacts=min(max(event.extra_impacts, 0), MAX_EXTRA_IMPACTS))
        fixed = replace(
            fixed,
            not_before=clamped_time(event.not_before),
            created_at=clamped_time(event.created_at),
            started_at=_clamped(event.started_at),
            ended_at=_clamped(event.ended_at),
        )
        if fixed.started_at is not None and fixed.ends_at is not None:
            fixed = replace(fixed, ends_at=min(clamped_end(fixed.ends_at), fixed.started_at + fixed.impact_window))
        if fixed == event:
            return event
        what = ", ".join(
            f"{name} {_shown(getattr(event, name))} → {_shown(getattr(fixed, name))}"
            for name in (
                "duration_seconds",
                "impact_window",
                "extra_impacts",
                "not_before",
                "created_at",
                "started_at",
                "ends_at",
                "ended_at",
            )
            if getattr(event, name) != getattr(fixed, name)
        )
        self.repaired.append(EventChanged(fixed, "repaired", f"outside forewarn's bounds: {what}"))
        return fixed

    def _targets(self, request: ScheduleRequest) -> list[VM]:
        if not request.vms and not request.hosts and request.group is None:
            raise Invalid("name at least one VM, host, or a scale set or availability set with a domain")
        seen: dict[str, VM] = {}
        for name in request.vms:
            vm = azure_fleet(self.fleet).vm(name)
            if self.vm_states.power(vm.name) is Power.DELETED:
                raise Conflict(f"VM {vm.name} is deleted")
            seen.setdefault(vm.name, vm)
        for host in request.hosts:
            vms = self.vms_on_host(host)
            if not vms:
                raise Invalid(f"host {host!r} runs no VM")
            for vm in vms:
                seen.setdefault(vm.name, vm)
        if request.group is not None:
            for vm in self._domain(request.group, request.update_domain, request.fault_domain):
                seen.setdefault(vm.name, vm)
        return list(seen.values())

    def _domain(self, group: str, update_domain: int | None, fault_domain: int | None) -> list[VM]:
        owner = azure_fleet(self.fleet).owner(group)
        if owner.startswith("vm:"):
            raise Invalid(f"{group} is a VM; update and fault domains belong to scale sets and availability sets")
        if (update_domain is None) == (fault_domain is None):
            raise Invalid("give either an update domain or a fault domain of the set")
        vms = [
            vm
            for vm in azure_fleet(self.fleet).vms_by_owner[owner]
            if self.vm_states.power(vm.name) is not Power.DELETED
            and (vm.update_domain == update_domain if update_domain is not None else vm.fault_domain == fault_domain)
        ]
        if not vms:
            which = f"update domain {update_domain}" if update_domain is not None else f"fault domain {fault_domain}"
            raise Invalid(f"{which} of {group} has no running VM")
        return vms

    def _index(self, event: Event) -> None:
        self.events[event.event_id] = event
        members = self.operations.setdefault(event.operation_id, [])
        if event.event_id not in members:
            members.append(event.event_id)
        if event.status.live:
            self._live_by_scope.setdefault(event.scope, {})[event.event_id] = None
            return
        if self._history is not None:
            self._ending.append(event.event_id)
        live = self._live_by_scope.get(event.scope)
        if live is not None:
            live.pop(event.event_id, None)
            if not live:  # a scope with nothing live holds nothing (most of a large fleet, most of the time)
                del self._live_by_scope[event.scope]

    def _scheduled_in(self, operation_id: str) -> list[Event]:
        return [e for e in self.operation_events(operation_id) if e.status is EventStatus.SCHEDULED]

    def _all_approved(self, operation_id: str) -> bool:
        return all(e.approvals for e in self._scheduled_in(operation_id))

    def _start_operation(self, operation_id: str, reason: str, step: DocumentStep) -> list[Change]:
        changes: list[Change] = []
        for event in self._scheduled_in(operation_id):
            event = event.moved_to(EventStatus.STARTED, self.now)
            self._index(event)
            ends_at = _impact_end(event)
            self.scheduler.add(ends_at, self._complete_deadline, event.event_id)
            step.touch(event.scope)
            changes.append(EventChanged(event, "started", reason))
            impact = self.impact_of(event)
            for name in event.resources:
                changes += self._impact(name, impact, event.event_id, event.duration_seconds, ends_at)
            self._set_extra_impacts(event)
        return changes

    def _set_extra_impacts(self, event: Event) -> None:
        for at in event.extra_impact_times():
            if at > self.now or (at == self.now and event.started_at == self.now):
                self.scheduler.add(at, self._extra_deadline, event.event_id)

    def _impact(self, name: str, impact: Impact, cause: str, duration_seconds: int, latest: datetime) -> list[Change]:
        """An impact begins on one VM; it recovers after the event's DurationInSeconds (or the rule's default for
        the impact), and at the latest when the event completes."""
        state = self.vm_states[name]
        if state.deleted:
            return []
        length = timedelta(seconds=duration_seconds) if duration_seconds > 0 else self.rules.impact_duration[impact]
        until = min(self.now + length, latest)
        new_host = self.fleet.next_host(state.host) if impact is Impact.REDEPLOY else None
        old_host = state.host
        state = state.impacted(impact, cause, self.now, until, new_host)
        self.vm_states[name] = state
        if state.deleted or state.host != old_host:
            self._members(old_host).pop(name, None)
            if not state.deleted:
                self._members(state.host)[name] = None
        if impact is Impact.DELETE:
            return [VmChanged(state, "deleted", f"{impact.value} by {cause}")]
        self.scheduler.add(until, self._recover_deadline, name)
        detail = f" to host {new_host}" if new_host else ""
        return [VmChanged(state, "impacted", f"{impact.value}{detail} by {cause}")]

    def _ended(self, event: Event, step: DocumentStep) -> list[Change]:
        changes: list[Change] = []
        for listener in self._event_ended:
            changes += listener(event, step)
        return changes

    # ---------------------------------------------------------------------------------------------- deadlines
    def _start_stale(self, operation_id: str, at: datetime) -> bool:
        return not self._scheduled_in(operation_id)

    def _not_started(self, event_id: str, at: datetime) -> bool:
        event = self.events.get(event_id)  # one that ended may have left memory
        return event is None or event.status is not EventStatus.STARTED

    def _recovery_stale(self, name: str, at: datetime) -> bool:
        return self.vm_states[name].impact_until != at

    def _start_due(self, operation_id: str) -> list[Change]:
        return self._start_operation(operation_id, "NotBefore passed", self._deadline_step)

    def _complete_due(self, event_id: str) -> list[Change]:
        event = self.events[event_id].moved_to(EventStatus.COMPLETED, self.now)
        self._index(event)
        self._deadline_step.touch(event.scope)
        changes: list[Change] = [EventChanged(event, "completed", "impact window over")]
        for name in event.resources:  # after completion the VM runs again
            if self.vm_states[name].impacted_by == event.event_id:
                changes += self._recover(name)
        return changes + self._ended(event, self._deadline_step)

    def _extra_impact(self, event_id: str) -> list[Change]:
        """A short freeze while the event is Started, for VMs that are running at that moment."""
        event = self.events[event_id]
        changes: list[Change] = []
        for name in event.resources:
            if self.vm_states[name].power is Power.RUNNING:
                changes += self._impact(name, Impact.FREEZE, f"{event.event_id} (extra impact)", -1, _impact_end(event))
        return changes

    def _recover(self, name: str) -> list[Change]:
        state = self.vm_states[name]
        if state.deleted or state.impact_until is None:
            return []
        cause = state.impacted_by
        state = state.recovered(self.now)
        self.vm_states[name] = state
        return [VmChanged(state, "recovered", f"running again after {cause}")]

    def _end_deadline_step(self) -> list[Change]:
        step, self._deadline_step = self._deadline_step, DocumentStep()
        return self.end_step(step)

    # -------------------------------------------------------------------------------------------- replication
    def replicate(self, rows: AzureRows, created_at: datetime) -> list[Change]:
        """A replica takes rows the leader committed (replication/): the state, its indexes, and the deadlines the
        rows set, as loading them would (``created_at``: the fleet's deployment, for rows that are gone). The
        changes returned tell the read models what moved; a Rebuilt among them: something was removed (a replica's
        own uncommitted projection), and what was derived is to be dropped."""
        changes: list[Change] = []
        for owner, policy in rows.policies.items():
            policy = policy or azure_fleet(self.fleet).policies.get(owner) or Policy(owner)
            self.policies[owner] = policy
            changes.append(PolicyChanged(policy))
        for name, state in rows.vm_states.items():
            if state is None:
                if name not in azure_fleet(self.fleet).vms:
                    continue
                state = self.vm_states.deployed(azure_fleet(self.fleet).vms[name])
            old = self.vm_states.get(name)
            self.vm_states[name] = state
            old_host = None if old is None or old.deleted else old.host
            new_host = None if state.deleted else state.host
            if old_host != new_host:  # held per host only where it differs from the fleet (_members)
                if old_host is not None:
                    self._members(old_host).pop(name, None)
                if new_host is not None:
                    self._members(new_host)[name] = None
            if state.impact_until is not None and (old is None or old.impact_until != state.impact_until):
                self.scheduler.add(state.impact_until, self._recover_deadline, name)
            changes.append(VmChanged(state, REPLICATED, "committed by the leader"))
        scopes: set[str] = set()
        removed = False
        for seq, gone in rows.events.items():
            if gone is not None:
                continue
            event_id = self.event_ids.guid(seq)  # one of this replica's own projections, EventIds made from numbers
            if event_id in self.events:
                dropped = self.events.pop(event_id)
                self._unindex(dropped)
                scopes.add(dropped.scope)
                removed = True
        for event in sorted((e for e in rows.events.values() if e is not None), key=lambda e: e.seq):
            old_event = self.events.get(event.event_id)
            self._index(event)
            scopes.add(event.scope)
            if old_event is None or (old_event.status, old_event.not_before, old_event.ends_at) != (
                event.status,
                event.not_before,
                event.ends_at,
            ):
                if event.status is EventStatus.SCHEDULED:
                    self.scheduler.add(event.not_before, self._start_deadline, event.operation_id)
                elif event.status is EventStatus.STARTED:
                    self.scheduler.add(_impact_end(event), self._complete_deadline, event.event_id)
                    self._set_extra_impacts(event)
            changes.append(EventChanged(event, REPLICATED, "committed by the leader"))
            if not event.status.live and self._history is not None:  # committed: it need not stay
                del self.events[event.event_id]
                self._unindex(event)
        for scope, incarnation in rows.incarnations.items():
            if incarnation is None:
                self.incarnations.pop(scope, None)
            else:
                self.incarnations[scope] = incarnation
            scopes.add(scope)
        for scope, at in rows.enabled.items():
            if at is None:
                self.last_seen.pop(scope, None)
            else:
                self.last_seen[scope] = at
                changes.append(ScopeEnabled(scope, at))
        for scope in sorted(scopes):
            live = self._live_by_scope.get(scope)
            if live:  # in creation order, as the document lists them (an event taken back by a refresh went last)
                self._live_by_scope[scope] = dict.fromkeys(sorted(live, key=lambda event_id: self.events[event_id].seq))
            changes.append(IncarnationChanged(scope, self.incarnation(scope)))
        if removed:
            changes.append(Rebuilt("events a replica projected were not committed"))
        # A replica never commits, so it is never told to release: what the leader's rows ended left above, and
        # the ids of those its own projection ended are kept only while those events are still held.
        self._ending = [event_id for event_id in self._ending if event_id in self.events]
        return changes

    def release(self) -> None:
        """Every change so far is committed: the events that ended since the last release leave memory (with a
        history to read them from; without one they stay)."""
        ending, self._ending = self._ending, []
        for event_id in ending:
            event = self.events.get(event_id)
            if event is not None and not event.status.live:
                del self.events[event_id]
                self._unindex(event)

    def _unindex(self, event: Event) -> None:
        members = self.operations.get(event.operation_id)
        if members is not None and event.event_id in members:
            members.remove(event.event_id)
            if not members:
                del self.operations[event.operation_id]
        self._live_by_scope.get(event.scope, {}).pop(event.event_id, None)

    def reschedule(self) -> None:
        """Set every deadline the state implies again, as loading it sets them (the caller emptied the scheduler)."""
        for event in sorted(self.events.values(), key=lambda e: e.seq):
            if event.status is EventStatus.SCHEDULED:
                self.scheduler.add(event.not_before, self._start_deadline, event.operation_id)
            elif event.status is EventStatus.STARTED:
                self.scheduler.add(_impact_end(event), self._complete_deadline, event.event_id)
                self._set_extra_impacts(event)
        for state in self.vm_states.values():
            if state.impact_until is not None:
                self.scheduler.add(state.impact_until, self._recover_deadline, state.name)


def _impact_end(event: Event) -> datetime:
    """When a Started event completes (set when it started)."""
    if event.ends_at is None:
        raise ValueError(f"event {event.event_id} is {event.status.value} and has no end")
    return event.ends_at


def _clamped(moment: datetime | None) -> datetime | None:
    return None if moment is None else clamped_time(moment)


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def _shown(value: object) -> str:
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, datetime):
        return iso_time(value)
    return str(value)
