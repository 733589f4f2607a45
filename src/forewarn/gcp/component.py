"""The Compute Engine component: host maintenance (live migration or termination, announced ahead or not), the
``maintenance-event`` notice (60 seconds; an hour for instances with GPUs), ``performMaintenance``,
``simulateMaintenanceEvent``, ``setScheduling``, Spot and preemptible preemption, and host errors. It shares the
engine's clock, deadlines and numbering (``core/scheduler.py``) and its commit-per-command discipline."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol

from forewarn.core.bounds import (
    MAX_EVENT_LENGTH,
    MAX_NOTICE,
    check_duration,
    check_time,
    checked_not_before,
    iso_time,
    whole_second_ceiling,
)
from forewarn.core.changes import REPLICATED, Change, Rebuilt
from forewarn.core.component import Footing, OnFooting
from forewarn.core.errors import Conflict, Invalid, NotFound
from forewarn.core.ids import derived_guid
from forewarn.gcp.changes import GceEventChanged, GceStateChanged
from forewarn.gcp.fleet import gce_fleet
from forewarn.gcp.model import (
    NONE,
    EventState,
    GceInstance,
    GceMaintenance,
    GceRules,
    GceState,
    InstanceStatus,
    MaintenanceKind,
    MaintenanceType,
    OnHostMaintenance,
    TerminationAction,
    check_scheduling,
)


@dataclass(frozen=True)
class StoredGcp:
    """What the store keeps of the Compute Engine component."""

    events: Iterable[GceMaintenance] = ()
    states: Iterable[GceState] = ()


@dataclass(frozen=True)
class GcpRows:
    """Rows some commits touched, as they are now (None: the row is gone, or never was): what a replica applies to
    its engine (:meth:`GcpComponent.replicate`)."""

    events: Mapping[str, GceMaintenance | None] = field(default_factory=dict)
    states: Mapping[str, GceState | None] = field(default_factory=dict)


@dataclass(frozen=True)
class GceRequest:
    """Maintenance of some instances. ``kind`` None: what each instance's onHostMaintenance says. ``notice``: from
    now to the start (default: each instance's own notice, 60 seconds or an hour with GPUs, and nothing announced
    ahead); a start further ahead than an instance's notice is announced to it as upcoming maintenance. ``latest``:
    how much later than the start its user may reschedule it (latestWindowStartTime = start + latest; announced
    maintenance only)."""

    instances: tuple[str, ...]
    kind: MaintenanceKind | None = None
    notice: timedelta | None = None
    start: datetime | None = None
    window: timedelta | None = None
    can_reschedule: bool = True
    maintenance_type: MaintenanceType = MaintenanceType.SCHEDULED
    latest: timedelta | None = None
    reason: str = "host maintenance"


@dataclass(frozen=True)
class GcePlan:
    """A request checked at an instant (``now``): its instances in the order named, its window, and how much later
    than the start its latest start is (None: none asked) (``GcpComponent.plan_gce``)."""

    request: GceRequest
    names: tuple[str, ...]
    window: timedelta
    later: timedelta | None
    now: datetime


# ``listener(event)`` when a maintenance event is completed or canceled; the changes it makes join the command's.
EventEndedListener = Callable[[GceMaintenance], list[Change]]


def _notice_phrase(notice: timedelta) -> str:
    """A notice as Google's pages name it: ``60-second``, ``1-hour``."""
    seconds = int(notice.total_seconds())
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}-hour"
    if seconds > 60 and seconds % 60 == 0:
        return f"{seconds // 60}-minute"
    return f"{seconds}-second"


def numeric_id(seed: str, *parts: object) -> str:
    """A Compute Engine id: a decimal uint64 of 19 digits, derived from the seed."""
    return str(10**18 + int(derived_guid(seed, *parts).replace("-", ""), 16) % (9 * 10**18))


def _as_deployed(name: str, instance: GceInstance, created_at: datetime) -> GceState:
    """An instance's state before anything happened to it: running where the fleet put it, since its deployment."""
    return GceState(
        name,
        InstanceStatus.RUNNING,
        instance.host,
        instance.on_host_maintenance,
        instance.automatic_restart,
        created_at,
    )


class EventHistory(Protocol):
    """The maintenance events as the database holds them (``gcp/records.py``'s ``ended_gce_events``): where the
    component reads those it no longer keeps in memory."""

    def get(self, key: str) -> GceMaintenance | None: ...

    def of(self, owners: Sequence[str]) -> list[GceMaintenance]:
        """The ended events of these instances, in creation order."""
        ...

    def all(self) -> list[GceMaintenance]:
        """Every ended event, in creation order."""
        ...


class GcpComponent(OnFooting[GceRules]):
    """State: ``gce_states`` (per instance), ``gce_events`` and each instance's event order.

    With a ``history`` (the database the engine commits to), an event that ended leaves ``gce_events`` once its end
    is committed (:meth:`release`): nothing the metadata server or the API shows needs it, and a million of them
    would hold half a gigabyte. :meth:`gce_event`, :meth:`all_gce_events` and :meth:`maintained_by` read it from
    ``history`` then."""

    def __init__(self, footing: Footing, stored: StoredGcp, history: EventHistory | None = None) -> None:
        super().__init__(footing, footing.rules.of(GceRules))
        self._history = history
        self._ending: list[str] = []  # ended events still in memory: they leave it once their end is committed
        fleet, scheduler, sequence, created_at = footing.fleet, footing.scheduler, footing.sequence, footing.created_at
        self._notice = scheduler.kind("gce-notice", self._give_notice, self._notice_stale)
        self._start = scheduler.kind("gce-start", self._start_event, self._start_stale)
        self._end = scheduler.kind("gce-end", self._end_event, self._end_stale)
        self._preempt = scheduler.kind("gce-preempt", self._preempted, self._preempt_stale)
        self._restart = scheduler.kind("gce-restart", self._restarted, self._restart_stale)
        self._event_ended: list[EventEndedListener] = []
        self.repaired: list[Change] = []  # nothing of its stored state predates a bound (see AzureComponent.repaired)
        # Where each instance runs now (migrations and restarts move it): a wave's host units read it.
        self._on_host: dict[str, dict[str, None]] = {}
        self.gce_states: dict[str, GceState] = {
            name: _as_deployed(name, instance, created_at) for name, instance in gce_fleet(fleet).instances.items()
        }
        for state in self.gce_states.values():
            self._on_host.setdefault(state.host, {})[state.name] = None
        for state in stored.states:
            if state.name in self.gce_states:
                self._put(state)
                if state.preempt_at is not None:
                    scheduler.add(state.preempt_at, self._preempt, state.name)
                if state.restart_at is not None:
                    scheduler.add(state.restart_at, self._restart, state.name)
        self.gce_events: dict[str, GceMaintenance] = {}
        self._by_instance: dict[str, list[str]] = {}
        for event in sorted(stored.events, key=lambda e: e.seq):
            self._index(event)
            sequence.past(event.seq)
            self._stored_deadline(event)

    def on_event_ended(self, listener: EventEndedListener) -> None:
        """``listener(event)`` whenever a maintenance event becomes completed or canceled."""
        self._event_ended.append(listener)

    # ------------------------------------------------------------------------------------------------ queries
    def gce_instance(self, name: str) -> GceInstance:
        found = gce_fleet(self.fleet).instances.get(name)
        if found is None:
            raise NotFound(
                f"The resource 'instances/{name}' was not found",
                name=name,
                known=gce_fleet(self.fleet).instances.keys(),
            )
        return found

    def gce_events_of(self, name: str) -> list[GceMaintenance]:
        return [self.gce_events[event_id] for event_id in self._by_instance.get(name, ())]

    def gce_event(self, event_id: str) -> GceMaintenance:
        """The event, from memory or, once it ended and left, from the database."""
        found = self.gce_events.get(event_id)
        if found is None and self._history is not None:
            found = self._history.get(event_id)
        if found is None:
            raise NotFound(f"no GCE maintenance event {event_id!r}", name=event_id, known=self.gce_events.keys())
        return found

    def all_gce_events(self, held: Iterable[GceMaintenance] | None = None) -> list[GceMaintenance]:
        """Every event, ended ones included, in the order they were created. ``held``: the events memory held when
        the caller took them, for a caller that reads the database in another thread (None: memory's now)."""
        held = self.gce_events.values() if held is None else held
        found = {} if self._history is None else {event.event_id: event for event in self._history.all()}
        found.update((event.event_id, event) for event in held)  # what memory holds is at least as new
        return sorted(found.values(), key=lambda event: event.seq)

    def maintained_by(self, names: Sequence[str], reason_start: str) -> set[str]:
        """The instances among ``names`` that an event whose reason starts with ``reason_start`` maintained (ended,
        or under way): one read of the database for them all."""
        held = [event for name in names for event in self.gce_events_of(name)]
        ended = [] if self._history is None else self._history.of(names)
        return {event.instance for event in (*held, *ended) if event.reason.startswith(reason_start)}

    def is_live(self, event_id: str) -> bool:
        """Whether the event is pending or under way (every live event is in memory)."""
        found = self.gce_events.get(event_id)
        return found is not None and found.live

    def is_pending(self, event_id: str) -> bool:
        found = self.gce_events.get(event_id)
        return found is not None and found.state is EventState.PENDING

    def notice_of(self, name: str) -> timedelta:
        """How long before an instance's maintenance starts its ``maintenance-event`` changes: an hour for an
        instance with GPUs ("Handle GPU host maintenance events": "Compute Engine gives GPU VMs a 1-hour stopping
        notice, while normal VMs receive only a 60-second notice"), 60 seconds for the others ("Query metadata
        server for maintenance event notices"). Also the default notice of its maintenance, the start beyond which
        it is announced as upcoming maintenance, and the earliest start it can be rescheduled to."""
        return self.rules.gpu_notice if gce_fleet(self.fleet).instances[name].gpus > 0 else self.rules.notice

    def maintenance_event(self, name: str) -> str:
        """The ``maintenance-event`` value: the notice of an event from the time it was given to the event's end."""
        for event in self.gce_events_of(name):
            if event.state in (EventState.NOTIFIED, EventState.ONGOING) and event.notice_at is not None:
                return event.kind.value
        return NONE

    def upcoming(self, name: str) -> GceMaintenance | None:
        """The maintenance ``upcoming-maintenance`` and ``resourceStatus.upcomingMaintenance`` show: announced ahead,
        not ended."""
        for event in self.gce_events_of(name):
            if event.announced and event.live:
                return event
        return None

    def in_maintenance(self, name: str) -> bool:
        """Whether the instance has maintenance pending or under way (a new one is refused until it ends)."""
        return any(event.live for event in self.gce_events_of(name))

    def only_upcoming(self, name: str) -> bool:
        """Whether the instance's live maintenance is all announced ahead and not yet in its notice: nothing that
        ``maintenance-event`` shows, nothing under way."""
        return all(
            event.announced and event.state is EventState.PENDING for event in self.gce_events_of(name) if event.live
        )

    def names_on_host(self, host: str) -> list[str]:
        """The instances on ``host`` now (deleted ones too: their state says so), in the order they came."""
        return list(self._on_host.get(host, ()))

    def host_names(self) -> list[str]:
        """Every host an instance runs or ran on, in the order they were first used."""
        return list(self._on_host)

    def announced_at(self, start: datetime, notice: timedelta, now: datetime | None = None) -> bool:
        """Whether maintenance that starts at ``start`` is announced ahead (upcoming maintenance) rather than given
        the instance's ``notice`` alone. Starts are whole seconds, so the notice from a moment between two seconds
        ends at the next whole second: a start there is the notice itself, not an announcement a fraction of a
        second longer."""
        return start > whole_second_ceiling((self.now if now is None else now) + notice)

    def check_request(self, request: GceRequest) -> None:
        """Refuse ``request`` for what it asks, not for its instances' state: its times, and a latest start asked
        of an instance it would not announce maintenance to (before anything changes). Costs what the request
        asks of each instance: nothing without a latest start."""
        plan = self.plan_gce(request)
        self.check_gce_starts(plan, plan.names)

    def plan_gce(self, request: GceRequest) -> GcePlan:
        """What a request gives every instance it names, checked, at this instant; its instances are not checked
        (:meth:`check_gce_instances`, :meth:`check_gce_starts`)."""
        checked_not_before(request.start, request.notice, self.rules.notice, self.now)  # even with no instance named
        window = check_duration(
            self.rules.window if request.window is None else request.window,
            "the maintenance window",
            MAX_EVENT_LENGTH,
            timedelta(seconds=1),
        )
        later: timedelta | None = None
        if request.latest is not None:
            if not request.can_reschedule:
                raise Invalid("a latest start later than the start needs can-reschedule")
            later = check_duration(request.latest, "the latest start", MAX_NOTICE)
        return GcePlan(request, tuple(dict.fromkeys(request.instances)), window, later, self.now)

    def start_of(self, plan: GcePlan, name: str) -> tuple[datetime, datetime]:
        """Instance ``name``'s start and latest start in ``plan``; refused when a latest start is asked of
        maintenance not announced ahead."""
        notice = self.notice_of(name)
        start = checked_not_before(plan.request.start, plan.request.notice, notice, plan.now)
        if plan.later is None:
            return start, start
        if not self.announced_at(start, notice, plan.now):
            raise Invalid(
                f"a latest start needs maintenance announced ahead (a start further than the "
                f"{_notice_phrase(notice)} notice of {name})"
            )
        return start, whole_second_ceiling(start + plan.later)

    def check_gce_instances(self, request: GceRequest, names: Sequence[str], beside_upcoming: bool = False) -> None:
        """Refuse ``request`` for one of ``names`` (some or all of its instances) as :meth:`schedule_gce` would: not
        in the fleet, deleted, with maintenance pending or under way (unless ``beside_upcoming`` and what it has is
        only announced ahead), or asked to live-migrate when it cannot."""
        instances = [self.gce_instance(name) for name in names]  # every name known before any other refusal
        for name, instance in zip(names, instances):
            if self.gce_states[name].deleted:
                raise Conflict(f"instance {name} is deleted")
            if self.in_maintenance(name) and not (beside_upcoming and self.only_upcoming(name)):
                raise Conflict(f"instance {name} already has maintenance pending or under way")
            if request.kind is MaintenanceKind.MIGRATE and (instance.gpus or instance.interruptible):
                raise Invalid(f"instance {name} cannot live-migrate (GPUs, Spot or preemptible)")

    def check_gce_starts(self, plan: GcePlan, names: Sequence[str]) -> None:
        """Refuse ``plan`` for one of ``names`` whose start it cannot give (:meth:`start_of`)."""
        if plan.later is not None:
            for name in names:
                self.start_of(plan, name)

    # ----------------------------------------------------------------------------------------------- commands
    def schedule_gce(self, request: GceRequest, beside_upcoming: bool = False) -> list[Change]:
        """New maintenance for each named instance; refused for an instance that has maintenance pending or under
        way, unless ``beside_upcoming`` and what it has is only announced ahead (:meth:`simulate_gce`). The
        control API makes it in parts, from the same checks (``gcp/control/routes.py``)."""
        if not request.instances:
            raise Invalid("name at least one instance")
        self.check_gce_instances(request, tuple(dict.fromkeys(request.instances)), beside_upcoming)
        plan = self.plan_gce(request)
        self.check_gce_starts(plan, plan.names)
        return self.create_gce(plan, plan.names)

    def create_gce(self, plan: GcePlan, names: Sequence[str]) -> list[Change]:
        """The maintenance ``plan`` gives the instances ``names`` (some or all of the plan's), checked before."""
        request, window = plan.request, plan.window
        changes: list[Change] = []
        for name in names:
            state = self.gce_states[name]
            start, latest = self.start_of(plan, name)
            announced = self.announced_at(start, self.notice_of(name), plan.now)
            kind = request.kind or (
                MaintenanceKind.MIGRATE
                if state.on_host_maintenance is OnHostMaintenance.MIGRATE
                else MaintenanceKind.TERMINATE
            )
            seq = self.sequence.take()
            event = GceMaintenance(
                event_id=numeric_id(self.seed, "gce-maintenance", seq),
                seq=seq,
                instance=name,
                kind=kind,
                maintenance_type=request.maintenance_type,
                window_start=start,
                window_end=start + window,
                latest_window_start=latest,
                can_reschedule=request.can_reschedule and announced,
                announced=announced,
                state=EventState.PENDING,
                created_at=self.now,
                reason=request.reason,
            )
            self._index(event)
            # The request's reason: a wave's events say which wave and unit scheduled them.
            changes.append(GceEventChanged(event, "scheduled", request.reason))
            changes += self._set_deadline(event)
        return changes

    def simulate_gce(self, name: str) -> list[Change]:
        """simulateMaintenanceEvent: the instance's own maintenance behaviour, after its usual notice (an hour for an
        instance with GPUs). "Simulate a host maintenance event": the simulated event "includes the different
        maintenance activities that occur in a regular maintenance event", to test the automation built on them;
        for a GPU instance that is the hour between TERMINATE_ON_HOST_MAINTENANCE and the stop.

        The page's limitations (sole-tenant node groups, a per-region rate) say nothing of maintenance already
        announced: the simulated event goes ahead beside it, and the announced one stays as it was. Refused
        (``resourceNotReady``) only while a maintenance is in its notice or under way, which one instance cannot
        undergo twice at once."""
        self.gce_instance(name)
        if self.gce_states[name].status is not InstanceStatus.RUNNING or not self.only_upcoming(name):
            raise Conflict(f"The resource 'instances/{name}' is not ready")
        return self.schedule_gce(GceRequest((name,), reason="simulated maintenance event"), beside_upcoming=True)

    def perform_maintenance(self, name: str) -> list[Change]:
        """performMaintenance: the announced maintenance starts now ("Monitor and plan for a host maintenance
        event"): ``maintenance-event`` changes at once and the maintenance starts 60 seconds later, for every
        instance. An instance with GPUs does not wait its hour: "Manually start a host maintenance event" says the
        maintenance "starts immediately"; the hour is the warning of maintenance Compute Engine starts."""
        event = self._movable_maintenance(name, "perform", "cannot be started by the user")
        start = whole_second_ceiling(self.now + self.rules.notice)  # the 60 seconds, GPUs or not
        event = replace(event, window_start=start, window_end=start + (event.window_end - event.window_start))
        self._index(event)
        return [GceEventChanged(event, "performed", "started by performMaintenance"), *self._set_deadline(event)]

    def _movable_maintenance(self, name: str, action: str, refusal: str) -> GceMaintenance:
        """The instance's announced maintenance, pending and can-reschedule, that its user may start or move; or
        Conflict, saying what stands in the way of ``action``."""
        self.gce_instance(name)
        event = self.upcoming(name)
        if event is None or event.state is not EventState.PENDING:
            raise Conflict(f"instance {name} has no pending maintenance to {action}")
        if not event.can_reschedule:
            raise Conflict(f"the maintenance of instance {name} {refusal}")
        return event

    def reschedule_gce(self, name: str, start: datetime | None = None, notice: timedelta | None = None) -> list[Change]:
        """Announced maintenance moved to another start by its user: no earlier than the instance's notice from now,
        no later than its latestWindowStartTime, and only while it is pending and can-reschedule (docs/gcp.md,
        "Rescheduling": Compute Engine's "UpcomingMaintenance" shows a current window start that may move and the
        latest time it may start). The window keeps its length; the notice follows the new start."""
        event = self._movable_maintenance(name, "reschedule", "cannot be rescheduled (can-reschedule is false)")
        if start is not None and notice is None:
            moved = whole_second_ceiling(check_time(start, "the new start"))
        elif notice is not None and start is None:
            moved = whole_second_ceiling(self.now + check_duration(notice, "notice", MAX_NOTICE))
        else:
            raise Invalid("give the new start, or the notice from now to it, not both")
        own_notice = self.notice_of(name)
        earliest = whole_second_ceiling(self.now + own_notice)
        if moved < earliest:
            raise Invalid(
                f"the new start {iso_time(moved)} leaves less than the {_notice_phrase(own_notice)} notice of "
                f"{name}; the earliest is {iso_time(earliest)}"
            )
        if moved > event.latest_window_start:
            raise Invalid(
                f"the new start {iso_time(moved)} is after the latest window start "
                f"{iso_time(event.latest_window_start)}"
            )
        if moved == event.window_start:
            return []
        was = event.window_start
        event = replace(event, window_start=moved, window_end=moved + (event.window_end - event.window_start))
        self._index(event)
        reason = f"by the user, from {iso_time(was)} to {iso_time(moved)}"
        return [GceEventChanged(event, "rescheduled", reason), *self._set_deadline(event)]

    def cancel_gce(self, event_id: str, reason: str = "canceled by the operator") -> list[Change]:
        event = self.gce_event(event_id)
        if event.state is not EventState.PENDING:
            raise Conflict(f"maintenance {event_id} is {event.state.value}; only pending maintenance can be canceled")
        event = replace(event, state=EventState.CANCELED, ended_at=self.now)
        self._index(event)
        return [GceEventChanged(event, "canceled", reason), *self._ended(event)]

    def watch(self, name: str) -> list[Change]:
        """The instance asked for maintenance-event: its next maintenance gets the notice (:meth:`notice_of`)."""
        state = self.gce_states.get(name)
        if state is None or state.watched:
            return []
        state = replace(state, watched=True)
        self._put(state)
        return [GceStateChanged(state, "watched", "asked for maintenance-event")]

    def set_scheduling(
        self, name: str, on_host_maintenance: OnHostMaintenance | None, automatic_restart: bool | None
    ) -> list[Change]:
        instance = self.gce_instance(name)
        state = self.gce_states[name]
        updated = replace(
            state,
            on_host_maintenance=on_host_maintenance or state.on_host_maintenance,
            automatic_restart=state.automatic_restart if automatic_restart is None else automatic_restart,
        )
        check_scheduling(
            updated.on_host_maintenance, updated.automatic_restart, instance.interruptible, instance.gpus, name
        )
        self._put(updated)
        return [
            GceStateChanged(
                updated,
                "scheduling",
                f"onHostMaintenance {updated.on_host_maintenance.value}, automaticRestart "
                f"{str(updated.automatic_restart).lower()}",
            )
        ]

    def preempt(self, names: Iterable[str]) -> list[Change]:
        """Spot or preemptible preemption: ``preempted`` is TRUE at once, the instance stops (or is deleted, per its
        termination action) after the 30-second notice ("Spot VMs", "Preemptible VM instances")."""
        instances = [self.gce_instance(name) for name in dict.fromkeys(names)]
        if not instances:
            raise Invalid("name at least one instance")
        for instance in instances:
            if not instance.interruptible:
                raise Invalid(f"{instance.name} is not a Spot or preemptible instance")
            state = self.gce_states[instance.name]
            if state.status is not InstanceStatus.RUNNING or state.preempted:
                raise Conflict(f"{instance.name} is not running, or is being preempted already")
        at = whole_second_ceiling(self.now + self.rules.preemption_notice)
        changes: list[Change] = []
        for instance in instances:
            state = replace(
                self.gce_states[instance.name], preempted=True, preempt_at=at, status=InstanceStatus.STOPPING
            )
            self._put(state)
            self.scheduler.add(at, self._preempt, instance.name)
            changes.append(GceStateChanged(state, "preempted", f"preemption notice; stops at {at.isoformat()}"))
        return changes

    def host_error(self, names: Iterable[str]) -> list[Change]:
        """The host failed: its instances crash without notice, and come back on another host after a while if
        automaticRestart is set ("Host maintenance overview", host errors)."""
        instances = [self.gce_instance(name) for name in dict.fromkeys(names)]
        if not instances:
            raise Invalid("name at least one instance")
        changes: list[Change] = []
        for instance in instances:
            state = self.gce_states[instance.name]
            if state.status is not InstanceStatus.RUNNING:
                raise Conflict(f"{instance.name} is not running")
        for instance in instances:
            state = self.gce_states[instance.name]
            restart_at = self.now + self.rules.host_error_restart if state.automatic_restart else None
            state = replace(state, status=InstanceStatus.TERMINATED, stopped_at=self.now, restart_at=restart_at)
            self._put(state)
            if restart_at is not None:
                self.scheduler.add(restart_at, self._restart, instance.name)
            changes.append(GceStateChanged(state, "crashed", f"host error on {state.host}"))
        return changes

    def start_gce(self, name: str) -> list[Change]:
        self.gce_instance(name)
        state = self.gce_states[name]
        if state.deleted or state.status is not InstanceStatus.TERMINATED:
            raise Conflict(f"instance {name} is {'deleted' if state.deleted else state.status.value}")
        state = replace(
            state, status=InstanceStatus.RUNNING, started_at=self.now, preempted=False, preempt_at=None, restart_at=None
        )
        self._put(state)
        return [GceStateChanged(state, "started", "started by the user")]

    # ---------------------------------------------------------------------------------------------- deadlines
    def _set_deadline(self, event: GceMaintenance) -> list[Change]:
        """The event's next deadline; a notice already due is given at once (the changes it makes)."""
        if event.state is EventState.PENDING:
            at = self._notice_time(event)
            if at <= self.now:
                return self._give_notice(event.event_id)
            self.scheduler.add(at, self._notice, event.event_id)
        elif event.state is EventState.NOTIFIED:
            self.scheduler.add(event.window_start, self._start, event.event_id)
        elif event.state is EventState.ONGOING and event.ends_at is not None:
            self.scheduler.add(event.ends_at, self._end, event.event_id)
        return []

    def _notice_time(self, event: GceMaintenance) -> datetime:
        return event.window_start - self.notice_of(event.instance)

    def _notice_stale(self, event_id: str, at: datetime) -> bool:
        # performMaintenance and rescheduling move the start, and the notice with it. An event no longer in memory
        # ended.
        event = self.gce_events.get(event_id)
        return event is None or event.state is not EventState.PENDING or at != self._notice_time(event)

    def _start_stale(self, event_id: str, at: datetime) -> bool:
        event = self.gce_events.get(event_id)
        return event is None or event.state is not EventState.NOTIFIED or event.window_start != at

    def _end_stale(self, event_id: str, at: datetime) -> bool:
        event = self.gce_events.get(event_id)
        return event is None or event.state is not EventState.ONGOING or event.ends_at != at

    def _preempt_stale(self, name: str, at: datetime) -> bool:
        return self.gce_states[name].preempt_at != at

    def _restart_stale(self, name: str, at: datetime) -> bool:
        return self.gce_states[name].restart_at != at

    def _give_notice(self, event_id: str) -> list[Change]:
        """The instance's notice before the start (:meth:`notice_of`). The key is populated only for instances that
        migrate or carry GPUs, and the notice is given only to an instance that asked for the key since its last
        maintenance; one that never asked is maintained at once ("Query metadata server for maintenance event
        notices"): a GPU instance an hour before the start."""
        event = self.gce_events[event_id]
        instance = gce_fleet(self.fleet).instances[event.instance]
        state = self.gce_states[event.instance]
        if state.deleted:
            event = replace(event, state=EventState.CANCELED, ended_at=self.now)
            self._index(event)
            return [GceEventChanged(event, "canceled", "the instance is deleted"), *self._ended(event)]
        populated = state.on_host_maintenance is OnHostMaintenance.MIGRATE or instance.gpus > 0
        if populated and state.watched:
            event = replace(event, state=EventState.NOTIFIED, notice_at=self.now)
            self._index(event)
            self._set_deadline(event)
            return [GceEventChanged(event, "notified", f"maintenance-event is {event.kind.value}")]
        if populated:  # never asked: no warning, the maintenance starts now
            event = replace(event, state=EventState.NOTIFIED, window_start=self.now)
            return self._start_event_now(event, "no notice: maintenance-event was not queried since the last event")
        event = replace(event, state=EventState.NOTIFIED)
        self._index(event)
        self._set_deadline(event)
        return []

    def _start_event(self, event_id: str) -> list[Change]:
        return self._start_event_now(self.gce_events[event_id], "the window started")

    def _start_event_now(self, event: GceMaintenance, reason: str) -> list[Change]:
        state = self.gce_states[event.instance]
        length = self.rules.migration if event.kind is MaintenanceKind.MIGRATE else self.rules.termination
        event = replace(event, state=EventState.ONGOING, started_at=self.now, ends_at=self.now + length)
        self._index(event)
        self._set_deadline(event)
        changes: list[Change] = [GceEventChanged(event, "started", reason)]
        state = replace(state, watched=False)
        if state.status is not InstanceStatus.RUNNING:
            self._put(state)
            return changes
        if event.kind is MaintenanceKind.MIGRATE:
            state = replace(state, host=self.fleet.next_host(state.host))
            self._put(state)
            return changes + [GceStateChanged(state, "migrated", f"live-migrated to {state.host}")]
        state = replace(state, status=InstanceStatus.TERMINATED, stopped_at=self.now)
        self._put(state)
        return changes + [GceStateChanged(state, "terminated", f"terminated for maintenance {event.event_id}")]

    def _end_event(self, event_id: str) -> list[Change]:
        event = replace(self.gce_events[event_id], state=EventState.COMPLETED, ended_at=self.now)
        self._index(event)
        changes: list[Change] = [GceEventChanged(event, "completed", "maintenance done")]
        state = self.gce_states[event.instance]
        if event.kind is MaintenanceKind.TERMINATE and state.status is InstanceStatus.TERMINATED:
            if state.automatic_restart and not state.deleted:
                state = replace(
                    state,
                    status=InstanceStatus.RUNNING,
                    host=self.fleet.next_host(state.host),
                    started_at=self.now,
                )
                self._put(state)
                changes.append(GceStateChanged(state, "restarted", f"automatic restart on {state.host}"))
        return changes + self._ended(event)

    def _preempted(self, name: str) -> list[Change]:
        instance = gce_fleet(self.fleet).instances[name]
        delete = instance.termination_action is TerminationAction.DELETE
        state = replace(
            self.gce_states[name],
            status=InstanceStatus.TERMINATED,
            preempt_at=None,
            stopped_at=self.now,
            deleted=delete,
        )
        self._put(state)
        return [GceStateChanged(state, "deleted" if delete else "stopped", "preempted")]

    def _restarted(self, name: str) -> list[Change]:
        state = self.gce_states[name]
        if state.status is not InstanceStatus.TERMINATED or state.deleted:
            return []
        state = replace(
            state,
            status=InstanceStatus.RUNNING,
            host=self.fleet.next_host(state.host),
            started_at=self.now,
            restart_at=None,
        )
        self._put(state)
        return [GceStateChanged(state, "restarted", f"automatic restart on {state.host}")]

    def _ended(self, event: GceMaintenance) -> list[Change]:
        changes: list[Change] = []
        for listener in self._event_ended:
            changes += listener(event)
        return changes

    def _put(self, state: GceState) -> None:
        old = self.gce_states.get(state.name)
        if old is not None and old.host != state.host:
            del self._on_host[old.host][state.name]
        self._on_host.setdefault(state.host, {})[state.name] = None
        self.gce_states[state.name] = state

    def _index(self, event: GceMaintenance) -> None:
        self.gce_events[event.event_id] = event
        order = self._by_instance.setdefault(event.instance, [])
        if event.event_id not in order:
            order.append(event.event_id)
        if not event.live and self._history is not None:
            self._ending.append(event.event_id)

    def _forget(self, event_id: str) -> None:
        """An ended event leaves memory (its end is committed)."""
        event = self.gce_events.pop(event_id)
        order = self._by_instance[event.instance]
        order.remove(event_id)
        if not order:
            del self._by_instance[event.instance]

    # -------------------------------------------------------------------------------------------- replication
    def replicate(self, rows: GcpRows, created_at: datetime) -> list[Change]:
        """A replica takes rows the leader committed: as AzureComponent.replicate."""
        changes: list[Change] = []
        removed = False
        for name, state in rows.states.items():
            instance = gce_fleet(self.fleet).instances.get(name)
            if instance is None:  # loading ignores them too
                continue
            old = self.gce_states.get(name)
            if state is None:
                state = _as_deployed(name, instance, created_at)
            self.gce_states[name] = state
            if state.preempt_at is not None and (old is None or old.preempt_at != state.preempt_at):
                self.scheduler.add(state.preempt_at, self._preempt, name)
            if state.restart_at is not None and (old is None or old.restart_at != state.restart_at):
                self.scheduler.add(state.restart_at, self._restart, name)
            changes.append(GceStateChanged(state, REPLICATED, "committed by the leader"))
        instances: set[str] = set()
        for event_id, gone in rows.events.items():
            if gone is None and event_id in self.gce_events:
                dropped = self.gce_events.pop(event_id)
                self._by_instance.get(dropped.instance, []).remove(event_id)
                removed = True
        for event in sorted((e for e in rows.events.values() if e is not None), key=lambda e: e.seq):
            old_event = self.gce_events.get(event.event_id)
            self._index(event)
            instances.add(event.instance)
            if old_event != event:
                self._stored_deadline(event)
            changes.append(GceEventChanged(event, REPLICATED, "committed by the leader"))
        for name in instances:
            self._by_instance[name].sort(key=lambda event_id: self.gce_events[event_id].seq)
        # A replica never commits, so it is never told to release: what the leader's rows ended leaves now, and the
        # ids of those its own projection ended are kept only while those events are still held.
        for event_id, committed in rows.events.items():
            if (
                committed is not None
                and not committed.live
                and self._history is not None
                and event_id in self.gce_events
            ):
                self._forget(event_id)
        self._ending = [event_id for event_id in self._ending if event_id in self.gce_events]
        if removed:
            changes.append(Rebuilt("maintenance events a replica projected were not committed"))
        return changes

    def _stored_deadline(self, event: GceMaintenance) -> None:
        """The deadline a stored event sets, as loading it sets it: a notice already due fires at the catch-up."""
        if event.state is EventState.PENDING:
            self.scheduler.add(self._notice_time(event), self._notice, event.event_id)
        else:
            self._set_deadline(event)

    def release(self) -> None:
        """Every change so far is committed: the events that ended since the last release leave memory (with a
        history to read them from; without one they stay)."""
        ending, self._ending = self._ending, []
        for event_id in ending:
            event = self.gce_events.get(event_id)
            if event is not None and not event.live:
                self._forget(event_id)

    def reschedule(self) -> None:
        """Set every deadline the state implies again, as loading it sets them (the caller emptied the scheduler)."""
        for state in self.gce_states.values():
            if state.preempt_at is not None:
                self.scheduler.add(state.preempt_at, self._preempt, state.name)
            if state.restart_at is not None:
                self.scheduler.add(state.restart_at, self._restart, state.name)
        for event in sorted(self.gce_events.values(), key=lambda e: e.seq):
            self._stored_deadline(event)
