"""The EC2 component: scheduling, rescheduling, cancelling and applying EC2 instance events, Spot interruptions and
rebalance recommendations, Auto Scaling replacement, event windows and notification attributes. It shares the
engine's clock, deadlines and numbering (``core/scheduler.py``) and its commit-per-command discipline."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from forewarn.aws.changes import (
    Ec2EventChanged,
    Ec2NotificationAttributesChanged,
    Ec2StateChanged,
    Ec2WindowChanged,
)
from forewarn.aws.eventbus import EventBus, Rule
from forewarn.aws.fleet import ec2_fleet
from forewarn.aws.fleet_queues import merged
from forewarn.aws.lifecycle import (
    LAUNCHING,
    TERMINATING,
    LifecycleAction,
    LifecycleHook,
    LifecycleHooks,
    LifecycleRefused,
)
from forewarn.aws.model import (
    DESCRIPTIONS,
    EVENT_HISTORY,
    INSTANCE_ID,
    Ec2Code,
    Ec2Event,
    Ec2EventState,
    Ec2Instance,
    Ec2Rules,
    Ec2State,
    InstanceState,
    NotificationAttributes,
    check_code_applies,
)
from forewarn.aws.queues import Message, MessageChanged, Queue, Queues
from forewarn.aws.windows import (
    MAX_WINDOWS,
    PLACED_CODES,
    TARGET_LIMITS,
    EventWindow,
    TimeRange,
    check_time_ranges,
    cron_intervals,
)
from forewarn.core.bounds import (
    MAX_EC2_DEADLINE,
    MAX_EVENT_LENGTH,
    check_duration,
    check_time,
    checked_not_before,
    clamped_end,
    clamped_time,
    iso_time,
    whole_second_ceiling,
)
from forewarn.core.changes import REPLICATED, Change, Rebuilt
from forewarn.core.component import Footing, OnFooting
from forewarn.core.errors import Ambiguous, Conflict, Invalid, NotFound
from forewarn.core.ids import derived_guid


@dataclass(frozen=True)
class Ec2Request:
    code: Ec2Code
    instances: tuple[str, ...]
    notice: timedelta | None = None
    not_before: datetime | None = None
    window: timedelta | None = None  # NotAfter - NotBefore; None: the code's default
    no_not_after: bool = False
    deadline: timedelta | None = None  # NotBeforeDeadline - NotBefore; None: the code's default
    no_deadline: bool = False
    description: str | None = None


@dataclass(frozen=True)
class Ec2Plan:
    """A request checked, and what its events get: the instances (by id, in the order named), NotBefore (before an
    event window places it), the window and the deadline (``Ec2Component.plan_ec2``)."""

    request: Ec2Request
    instances: tuple[str, ...]
    not_before: datetime
    window: timedelta | None
    deadline: timedelta | None


def hex17(seed: str, *parts: object) -> str:
    return derived_guid(seed, *parts).replace("-", "").lower()[:17]


@dataclass(frozen=True)
class StoredEc2:
    """What the store keeps of the EC2 component."""

    events: Iterable[Ec2Event] = ()
    states: Iterable[Ec2State] = ()
    windows: Iterable[EventWindow] = ()
    notification_attributes: NotificationAttributes | None = None
    queues: Iterable[Queue] = ()
    messages: Iterable[Message] = ()
    rules: Iterable[Rule] = ()
    hooks: Iterable[LifecycleHook] = ()
    actions: Iterable[LifecycleAction] = ()


@dataclass(frozen=True)
class Ec2Rows:
    """Rows some commits touched, as they are now (None: the row is gone, or never was; attributes None: not
    touched): what a replica applies to its engine (:meth:`Ec2Component.replicate`)."""

    events: Mapping[str, Ec2Event | None] = field(default_factory=dict)
    states: Mapping[str, Ec2State | None] = field(default_factory=dict)
    windows: Mapping[str, EventWindow | None] = field(default_factory=dict)
    notification_attributes: NotificationAttributes | None = None
    queues: Mapping[str, Queue | None] = field(default_factory=dict)
    messages: Mapping[str, Message | None] = field(default_factory=dict)  # by ``queue/message ID``
    rules: Mapping[str, Rule | None] = field(default_factory=dict)
    hooks: Mapping[str, LifecycleHook | None] = field(default_factory=dict)
    actions: Mapping[str, LifecycleAction | None] = field(default_factory=dict)


class EventHistory(Protocol):
    """The events as the database holds them (``aws/records.py``'s EndedEc2Events): where the component reads those
    it no longer keeps in memory."""

    def get(self, key: str) -> Ec2Event | None: ...

    def of(self, owners: Sequence[str]) -> list[Ec2Event]:
        """The ended events of these instances, in creation order."""
        ...

    def all(self) -> list[Ec2Event]:
        """Every ended event, in creation order."""
        ...

    def ended_since(self, moment: datetime) -> list[Ec2Event]: ...


class Ec2Component(OnFooting[Ec2Rules]):
    """State: ``ec2_instances`` (deployed and launched), ``ec2_states``, ``ec2_events`` and the per-instance event
    order, ``ec2_windows`` and ``notification_attributes``; ``queues``, the SQS queues and their messages; ``bus``, the EventBridge rules;
    ``lifecycle``, the Auto Scaling lifecycle hooks and the actions instances wait on.

    With a ``history`` (the database the engine commits to), an event that ended leaves ``ec2_events`` once its end
    is committed and ``EVENT_HISTORY`` (a week) has passed since: until then DescribeInstanceStatus shows it with
    the active ones. :meth:`ec2_event`, :meth:`ended_ec2_events_of` (the metadata's history) and
    :meth:`all_ec2_events` read it from ``history`` then."""

    def __init__(self, footing: Footing, stored: StoredEc2, history: EventHistory | None = None) -> None:
        super().__init__(footing, footing.rules.of(Ec2Rules))
        self._history = history
        # The ended events memory holds, in the order they ended: each leaves it once committed and a week old.
        self._ending: collections.deque[str] = collections.deque()
        fleet, scheduler, sequence, created_at = footing.fleet, footing.scheduler, footing.sequence, footing.created_at
        self._start_deadline = scheduler.kind("ec2-start", self._start_ec2, self._start_stale)
        self._end_deadline = scheduler.kind("ec2-end", self._end_ec2, self._end_stale)
        self._spot_deadline = scheduler.kind("spot", self._spot_action, self._spot_stale)
        self.repaired: list[Change] = []  # see AzureComponent.repaired
        self.ec2_windows: dict[str, EventWindow] = {w.window_id: w for w in stored.windows if w.state != "deleted"}
        self.notification_attributes = stored.notification_attributes or NotificationAttributes()
        self.ec2_instances: dict[str, Ec2Instance] = dict(ec2_fleet(fleet).instances)
        # the fleet file's queue path is the start state; what was stored since goes over it
        declared = ec2_fleet(fleet).queue_path
        queues = merged(declared.start_queues(created_at), stored.queues, "name")
        self.queues = Queues(self.seed, lambda: scheduler.now, sequence, queues, stored.messages)
        self.bus = EventBus(merged(declared.start_rules(created_at), stored.rules, "name"))
        self._hook_deadline = scheduler.kind("asg-hook", self._hook_timeout, self._hook_stale)
        self.lifecycle = LifecycleHooks(merged(declared.hooks, stored.hooks, "key"), stored.actions)
        for action in self.lifecycle.actions.values():
            scheduler.add(action.timeout_at, self._hook_deadline, action.token)
        self.ec2_states: dict[str, Ec2State] = {
            iid: Ec2State(iid, InstanceState.RUNNING, instance.host, created_at, created_at)
            for iid, instance in ec2_fleet(fleet).instances.items()
        }
        for state in stored.states:
            state = self._ec2_state_within_bounds(state)
            self.ec2_states[state.instance_id] = state
            if state.origin is not None and state.instance_id not in self.ec2_instances:
                self.ec2_instances[state.instance_id] = self._replacement_record(
                    state.origin, state.instance_id, state.host
                )
        self.ec2_events: dict[str, Ec2Event] = {}
        self._ec2_by_instance: dict[str, list[str]] = {}
        recent = [] if history is None else history.ended_since(scheduler.now - EVENT_HISTORY)
        for event in sorted(map(self._ec2_event_within_bounds, [*stored.events, *recent]), key=lambda e: e.seq):
            self._index_ec2(event)
            sequence.past(event.seq)
            if event.state is Ec2EventState.ACTIVE:
                if event.started_at is None:
                    scheduler.add(event.not_before, self._start_deadline, event.event_id)
                elif event.ends_at is not None:
                    scheduler.add(event.ends_at, self._end_deadline, event.event_id)
        for state in self.ec2_states.values():
            if (at := _pending_spot_action(state)) is not None:
                scheduler.add(at, self._spot_deadline, state.instance_id)
        ended_at = {event_id: self.ec2_events[event_id].ended_at or scheduler.now for event_id in self._ending}
        self._ending = collections.deque(sorted(ended_at, key=ended_at.__getitem__))  # in the order they ended

    # ------------------------------------------------------------------------------------------------ queries
    def ec2_instance(self, instance_id: str) -> Ec2Instance:
        if not INSTANCE_ID.match(instance_id or ""):
            raise Invalid(f'Invalid id: "{instance_id}"')
        found = self.ec2_instances.get(instance_id)
        if found is None:
            raise NotFound(
                f"The instance ID '{instance_id}' does not exist", name=instance_id, known=self.ec2_instances.keys()
            )
        return found

    def ec2_named(self, reference: str) -> Ec2Instance:
        """The instance an operator names (forewarn's own commands, not the EC2 API): by its id or by its Name tag,
        as the sandbox and the banner show instances. An unknown one is NotFound with the ids and Name tags to
        suggest; a Name tag that several instances carry is Ambiguous."""
        found = self.ec2_instances.get(reference)
        if found is not None:
            return found
        tagged = [instance for instance in self.ec2_instances.values() if instance.tags.get("Name") == reference]
        if len(tagged) == 1:
            return tagged[0]
        if tagged:
            ids = ", ".join(instance.instance_id for instance in tagged)
            raise Ambiguous(f"the Name tag {reference!r} names several EC2 instances ({ids}); give an instance id")
        names = [instance.tags["Name"] for instance in self.ec2_instances.values() if "Name" in instance.tags]
        message = (
            f"The instance ID '{reference}' does not exist"
            if INSTANCE_ID.match(reference)
            else f"no EC2 instance {reference!r} (an instance id or Name tag)"
        )
        raise NotFound(message, name=reference, known=[*self.ec2_instances, *names])

    def ec2_events_of(self, instance_id: str) -> list[Ec2Event]:
        """The instance's events that memory holds: the active ones, and those that ended within the last week (all
        that ended, without a history), in creation order."""
        return [self.ec2_events[event_id] for event_id in self._ec2_by_instance.get(instance_id, ())]

    def ended_ec2_events_of(self, instance_id: str) -> list[Ec2Event]:
        """Every event of the instance that ended, in creation order: from memory and the database."""
        found = {} if self._history is None else {e.event_id: e for e in self._history.of([instance_id])}
        found.update((e.event_id, e) for e in self.ec2_events_of(instance_id))  # memory is at least as new
        return sorted((e for e in found.values() if e.state is not Ec2EventState.ACTIVE), key=lambda e: e.seq)

    def find_ec2_event(self, event_id: str) -> Ec2Event | None:
        """The event, from memory or, once it ended and left, from the database."""
        found = self.ec2_events.get(event_id)
        if found is None and self._history is not None:
            found = self._history.get(event_id)
        return found

    def ec2_event(self, event_id: str) -> Ec2Event:
        found = self.find_ec2_event(event_id)
        if found is None:
            raise NotFound(f"The event ID '{event_id}' does not exist", name=event_id, known=self.ec2_events.keys())
        return found

    def all_ec2_events(self, held: Iterable[Ec2Event] | None = None) -> list[Ec2Event]:
        """Every event, ended ones included, in the order they were created. ``held``: the events memory held when
        the caller took them, for a caller that reads the database in another thread (None: memory's now)."""
        held = self.ec2_events.values() if held is None else held
        found = {} if self._history is None else {event.event_id: event for event in self._history.all()}
        found.update((event.event_id, event) for event in held)  # what memory holds is at least as new
        return sorted(found.values(), key=lambda event: event.seq)

    # ----------------------------------------------------------------------------------------------- commands
    def schedule_ec2(self, request: Ec2Request) -> list[Change]:
        """One event per instance. NotBefore is now + notice (default two weeks) unless given. The control API makes
        it in parts, from the same checks (``aws/control/routes.py``)."""
        if not request.instances:
            raise Invalid("name at least one instance")
        self.check_ec2_instances(request, request.instances)
        planned = self.plan_ec2(request)
        return self.create_ec2(planned, planned.instances)

    def check_ec2_instances(self, request: Ec2Request, references: Sequence[str]) -> None:
        """Refuse ``request`` for one of ``references`` (some or all of the instances it names) as
        :meth:`schedule_ec2` would: not in the fleet, terminated, or of a kind its code does not apply to."""
        instances = [self.ec2_named(reference) for reference in references]  # every one known before other refusals
        for instance in instances:
            check_code_applies(request.code, instance)
            if self.ec2_states[instance.instance_id].gone:
                raise Conflict(f"instance {instance.instance_id} is terminated")

    def plan_ec2(self, request: Ec2Request) -> Ec2Plan:
        """The times ``request``'s events get, checked, at this instant, and its instances by id; the instances are
        not checked (:meth:`check_ec2_instances`). :meth:`create_ec2` makes the events, for all the instances at
        once or a part of them at a time."""
        rules = self.rules
        instances = tuple({self.ec2_named(reference).instance_id: None for reference in request.instances})
        not_before = checked_not_before(request.not_before, request.notice, rules.notice, self.now)
        window = None if request.no_not_after else (request.window or rules.window[request.code])
        deadline = None if request.no_deadline else (request.deadline or rules.deadline[request.code])
        for value, what, longest in ((window, "window", MAX_EVENT_LENGTH), (deadline, "deadline", MAX_EC2_DEADLINE)):
            if value is not None and value <= timedelta(0):
                raise Invalid(f"the {what} must be positive")
            if value is not None:
                check_duration(value, f"the {what}", longest)
        return Ec2Plan(request, instances, not_before, window, deadline)

    def create_ec2(self, plan: Ec2Plan, instance_ids: Sequence[str]) -> list[Change]:
        """The events ``plan`` gives the instances ``instance_ids`` (some or all of the plan's)."""
        request, not_before, window, deadline = plan.request, plan.not_before, plan.window, plan.deadline
        changes: list[Change] = []
        for instance_id in instance_ids:
            start, end = not_before, None if window is None else not_before + window
            event_window = self._event_window_of(self.ec2_instances[instance_id])
            if event_window is not None and request.code in PLACED_CODES and request.not_before is None:
                start, end = event_window.place(not_before, window)  # the platform picks a time in the window
                end = None if window is None else end
            seq = self.sequence.take()
            event = Ec2Event(
                event_id=f"instance-event-{hex17(self.seed, 'ec2-event', seq)}",
                seq=seq,
                instance_id=instance_id,
                code=request.code,
                description=request.description if request.description is not None else DESCRIPTIONS[request.code],
                not_before=start,
                not_after=end,
                not_before_deadline=None if deadline is None else start + deadline,
                state=Ec2EventState.ACTIVE,
                created_at=self.now,
            )
            self._index_ec2(event)
            self.scheduler.add(start, self._start_deadline, event.event_id)
            placed = f" in event window {event_window.window_id}" if event_window and start != not_before else ""
            changes.append(Ec2EventChanged(event, "scheduled", f"for {instance_id}{placed}"))
        return changes

    def cancel_ec2(self, event_id: str, reason: str = "canceled by the operator") -> list[Change]:
        event = self.ec2_event(event_id)
        if event.state is not Ec2EventState.ACTIVE or event.started_at is not None:
            state = "in progress" if event.state is Ec2EventState.ACTIVE else event.state.value
            raise Conflict(f"event {event_id} is {state}; only events that have not started can be canceled")
        event = replace(event, state=Ec2EventState.CANCELED, ended_at=self.now)
        self._index_ec2(event)
        return [Ec2EventChanged(event, "canceled", reason)]

    def reschedule_ec2(self, instance_id: str, event_id: str, not_before: datetime) -> list[Change]:
        """ModifyInstanceEventStartTime (its API reference): only events with a NotBeforeDeadline, not started and not
        due within 5 minutes; the new start at least 60 minutes from now and not after the deadline. NotAfter moves
        with NotBefore (the window keeps its length; undocumented, our choice)."""
        self.ec2_instance(instance_id)
        event = self.find_ec2_event(event_id)
        if event is None or event.instance_id != instance_id:
            raise NotFound(f"The event ID '{event_id}' does not exist for instance '{instance_id}'")
        rules = self.rules
        not_before = whole_second_ceiling(check_time(not_before, "the new start"))
        problems = []
        if event.state is not Ec2EventState.ACTIVE or event.started_at is not None:
            problems.append("the event has already started or ended")
        elif event.not_before_deadline is None:
            problems.append("the event has no deadline, so it cannot be rescheduled")
        elif self.now >= event.not_before - rules.reschedule_freeze:
            problems.append("the event starts within 5 minutes")
        elif not_before < self.now + rules.reschedule_min_lead:
            problems.append("the new start must be at least 60 minutes from now")
        elif not_before > event.not_before_deadline:
            problems.append("the new start is after the event's deadline")
        if problems:
            raise RescheduleRefused(problems[0])
        shift = not_before - event.not_before
        event = replace(
            event, not_before=not_before, not_after=None if event.not_after is None else event.not_after + shift
        )
        self._index_ec2(event)
        self.scheduler.add(not_before, self._start_deadline, event.event_id)
        return [Ec2EventChanged(event, "rescheduled", f"to {not_before.isoformat()}")]

    def start_instance(self, instance_id: str) -> list[Change]:
        """Start a stopped instance; after an instance-stop event it comes up on a new host (the AWS page
        "Scheduled events for your instances")."""
        instance = self.ec2_instance(instance_id)
        state = self.ec2_states[instance_id]
        if state.state is not InstanceState.STOPPED:
            raise Conflict(f"instance {instance_id} is {state.state.value}; only stopped instances can be started")
        host = self.fleet.next_host(state.host) if state.move_on_start else state.host
        where = f" on a new host, {host}" if host != state.host else ""
        # A Spot interruption that stopped it is over: spot/instance-action shows nothing until the next one.
        state = replace(
            state,
            state=InstanceState.RUNNING,
            host=host,
            booted_at=self.now,
            move_on_start=False,
            spot_action=None,
            spot_action_time=None,
        )
        self.ec2_states[instance.instance_id] = state
        return [Ec2StateChanged(state, "started", f"started{where}")]

    def interrupt_spot(self, instance_ids: Iterable[str], action: str) -> list[Change]:
        """A Spot interruption: spot/instance-action shows the action two minutes ahead, then it happens."""
        if action not in ("terminate", "stop", "hibernate"):
            raise Invalid(f"a Spot interruption is terminate, stop or hibernate, not {action!r}")
        instances = [self.ec2_named(reference) for reference in instance_ids]
        for instance in instances:
            if not instance.spot:
                raise Invalid(f"{instance.instance_id} is not a Spot instance")
            if self.ec2_states[instance.instance_id].state is not InstanceState.RUNNING:
                raise Conflict(f"{instance.instance_id} is not running")
        at = whole_second_ceiling(self.now + self.rules.spot_notice)
        changes: list[Change] = []
        for instance in instances:
            state = replace(self.ec2_states[instance.instance_id], spot_action=action, spot_action_time=at)
            self.ec2_states[instance.instance_id] = state
            self.scheduler.add(at, self._spot_deadline, instance.instance_id)
            changes.append(Ec2StateChanged(state, "interrupted", f"Spot interruption: {action} at {at.isoformat()}"))
        return changes

    def recommend_rebalance(self, instance_ids: Iterable[str]) -> list[Change]:
        instances = [self.ec2_named(reference) for reference in instance_ids]
        for instance in instances:
            if not instance.spot:
                raise Invalid(f"{instance.instance_id} is not a Spot instance")
        changes: list[Change] = []
        for instance in instances:
            state = replace(self.ec2_states[instance.instance_id], rebalance_at=self.now)
            self.ec2_states[instance.instance_id] = state
            changes.append(Ec2StateChanged(state, "rebalance", "rebalance recommendation"))
        return changes

    # ------------------------------------------------------------------------------------------ event windows
    def _event_window_of(self, instance: Ec2Instance) -> EventWindow | None:
        """The window that applies: one naming the instance, else one naming its Dedicated Host, else one
        matching its tags (the order DescribeInstanceEventWindows' instance-id filter follows)."""
        windows = self.ec2_windows.values()
        matchers: tuple[Callable[[EventWindow], bool], ...] = (
            lambda w: instance.instance_id in w.instance_ids,
            lambda w: instance.dedicated_host is not None and instance.dedicated_host in w.dedicated_host_ids,
            lambda w: any(instance.tags.get(key) == value for key, value in w.instance_tags),
        )
        for matches in matchers:
            for window in windows:
                if matches(window):
                    return window
        return None

    def ec2_window(self, window_id: str) -> EventWindow:
        found = self.ec2_windows.get(window_id)
        if found is None:
            raise WindowNotFound(f"The event window ID '{window_id}' does not exist")
        return found

    @staticmethod
    def _check_schedule(time_ranges: tuple[TimeRange, ...] | None, cron: str | None) -> None:
        if time_ranges and cron is not None:
            raise WindowCombination("an event window has time ranges or a cron expression, not both")
        if time_ranges:
            check_time_ranges(time_ranges)
        elif cron is not None:
            cron_intervals(cron)

    def create_window(
        self,
        name: str,
        time_ranges: tuple[TimeRange, ...] = (),
        cron: str | None = None,
        tags: tuple[tuple[str, str], ...] = (),
    ) -> list[Change]:
        if not time_ranges and cron is None:
            raise Invalid("an event window needs time ranges or a cron expression")
        self._check_schedule(time_ranges, cron)
        if len(self.ec2_windows) >= MAX_WINDOWS:
            raise Invalid(f"at most {MAX_WINDOWS} event windows per Region")
        window = EventWindow(
            f"iew-{hex17(self.seed, 'window', self.sequence.take())}", name, tuple(time_ranges), cron, tags=tuple(tags)
        )
        self.ec2_windows[window.window_id] = window
        return [Ec2WindowChanged(window, "created")]

    def modify_window(
        self,
        window_id: str,
        name: str | None = None,
        time_ranges: tuple[TimeRange, ...] | None = None,
        cron: str | None = None,
    ) -> list[Change]:
        """A new schedule replaces the old one; events already scheduled do not move ("Define event windows
        for scheduled events")."""
        window = self.ec2_window(window_id)
        self._check_schedule(time_ranges, cron)
        if time_ranges:
            window = replace(window, time_ranges=tuple(time_ranges), cron=None)
        elif cron is not None:
            window = replace(window, time_ranges=(), cron=cron)
        if name is not None:
            window = replace(window, name=name)
        self.ec2_windows[window_id] = window
        return [Ec2WindowChanged(window, "modified")]

    def delete_window(self, window_id: str, force: bool = False) -> list[Change]:
        window = self.ec2_window(window_id)
        if window.target_kind is not None and not force:
            raise Invalid(f"event window {window_id} has associated targets; delete it with ForceDelete")
        del self.ec2_windows[window_id]
        return [Ec2WindowChanged(replace(window, state="deleted"), "deleted")]

    def associate_window(
        self,
        window_id: str,
        instance_ids: tuple[str, ...] = (),
        instance_tags: tuple[tuple[str, str], ...] = (),
        dedicated_host_ids: tuple[str, ...] = (),
    ) -> list[Change]:
        window = self.ec2_window(window_id)
        given: dict[str, tuple[Any, ...]] = {
            kind: values
            for kind, values in (
                ("instance_ids", tuple(instance_ids)),
                ("instance_tags", tuple(instance_tags)),
                ("dedicated_host_ids", tuple(dedicated_host_ids)),
            )
            if values
        }
        if len(given) != 1:
            raise WindowCombination(
                "associate exactly one kind of target: instance ids, instance tags or Dedicated Host ids"
            )
        [(kind, values)] = given.items()
        if window.target_kind not in (None, kind):
            raise WindowCombination(
                f"event window {window_id} already has targets of another kind; a window has one kind of target"
            )
        if kind == "instance_ids":
            for instance_id in values:
                if self.ec2_instance(instance_id).dedicated_host is not None:
                    raise Invalid(f"instance {instance_id} is on a Dedicated Host; associate the host instead")
        if kind == "dedicated_host_ids":
            hosts = {i.dedicated_host for i in self.ec2_instances.values()}
            for host in values:
                if host not in hosts:
                    raise NotFound(f"The host ID '{host}' does not exist")
        for other in self.ec2_windows.values():
            taken = set(getattr(other, kind)) & set(values)
            if other.window_id != window_id and taken:
                raise Invalid(
                    f"{sorted(taken)[0]} is already associated with event window {other.window_id}; a "
                    "target belongs to one window only"
                )
        merged = tuple(dict.fromkeys(getattr(window, kind) + values))
        if len(merged) > TARGET_LIMITS[kind]:
            raise Invalid(f"an event window has at most {TARGET_LIMITS[kind]} {kind.replace('_', ' ')}")
        associated: dict[str, Any] = {kind: merged}
        window = replace(window, **associated)
        self.ec2_windows[window_id] = window
        return [Ec2WindowChanged(window, "associated")]

    def disassociate_window(
        self,
        window_id: str,
        instance_ids: tuple[str, ...] = (),
        instance_tags: tuple[tuple[str, str], ...] = (),
        dedicated_host_ids: tuple[str, ...] = (),
    ) -> list[Change]:
        window = self.ec2_window(window_id)
        window = replace(
            window,
            instance_ids=tuple(i for i in window.instance_ids if i not in instance_ids),
            instance_tags=tuple(t for t in window.instance_tags if t not in tuple(instance_tags)),
            dedicated_host_ids=tuple(h for h in window.dedicated_host_ids if h not in dedicated_host_ids),
        )
        self.ec2_windows[window_id] = window
        return [Ec2WindowChanged(window, "disassociated")]

    # ------------------------------------------------------------------------------ notification attributes
    def register_notification_attributes(self, include_all: bool = False, keys: Iterable[str] = ()) -> list[Change]:
        keys = tuple(keys)
        if include_all and keys:
            raise Invalid("give IncludeAllTagsOfInstance or tag keys, not both")
        if not include_all and not keys:
            raise Invalid("give IncludeAllTagsOfInstance=true or at least one tag key")
        current = self.notification_attributes
        updated = (
            NotificationAttributes(True, ())
            if include_all
            else NotificationAttributes(current.include_all, tuple(dict.fromkeys(current.keys + keys)))
        )
        self.notification_attributes = updated
        return [Ec2NotificationAttributesChanged(updated)]

    def deregister_notification_attributes(self, include_all: bool = False, keys: Iterable[str] = ()) -> list[Change]:
        """``include_all=False`` with no keys deregisters everything (the API reference)."""
        keys = tuple(keys)
        if include_all and keys:
            raise Invalid("give IncludeAllTagsOfInstance or tag keys, not both")
        current = self.notification_attributes
        if include_all:
            updated = NotificationAttributes(False, current.keys)
        elif not keys:
            updated = NotificationAttributes()
        else:
            updated = NotificationAttributes(current.include_all, tuple(k for k in current.keys if k not in keys))
        self.notification_attributes = updated
        return [Ec2NotificationAttributesChanged(updated)]

    # ---------------------------------------------------------------------------------------------- deadlines
    # An event no longer in memory ended.
    def _start_stale(self, event_id: str, at: datetime) -> bool:
        event = self.ec2_events.get(event_id)
        return (
            event is None
            or event.state is not Ec2EventState.ACTIVE
            or event.started_at is not None
            or event.not_before != at
        )

    def _end_stale(self, event_id: str, at: datetime) -> bool:
        event = self.ec2_events.get(event_id)
        return event is None or event.state is not Ec2EventState.ACTIVE or event.ends_at != at

    def _spot_stale(self, instance_id: str, at: datetime) -> bool:
        state = self.ec2_states[instance_id]
        return state.spot_action_time != at or state.state is not InstanceState.RUNNING

    def _start_ec2(self, event_id: str) -> list[Change]:
        event = self.ec2_events[event_id]
        state = self.ec2_states[event.instance_id]
        if state.gone:
            event = replace(event, state=Ec2EventState.CANCELED, ended_at=self.now)
            self._index_ec2(event)
            return [Ec2EventChanged(event, "canceled", "the instance is terminated")]
        ends_at = self.now + self.rules.impact[event.code]
        event = replace(event, started_at=self.now, ends_at=ends_at)
        self._index_ec2(event)
        self.scheduler.add(ends_at, self._end_deadline, event.event_id)
        changes: list[Change] = [Ec2EventChanged(event, "started", "NotBefore passed")]
        return changes + self._ec2_impact(event, state)

    def _ec2_impact(self, event: Ec2Event, state: Ec2State) -> list[Change]:
        instance = self.ec2_instances[event.instance_id]
        code = event.code
        if state.state is not InstanceState.RUNNING:
            return []  # a stopped instance has nothing to reboot; the event completes at its end
        if code in (Ec2Code.INSTANCE_RETIREMENT, Ec2Code.INSTANCE_STOP):
            terminate = code is Ec2Code.INSTANCE_RETIREMENT and instance.root_device != "ebs"
            return self._ec2_down(
                state,
                InstanceState.TERMINATED if terminate else InstanceState.STOPPED,
                event.event_id,
                move_on_start=code is Ec2Code.INSTANCE_STOP,
            )
        host = self.fleet.next_host(state.host) if code is Ec2Code.SYSTEM_REBOOT else state.host
        state = replace(state, host=host, impacted_by=event.event_id, impact_until=event.ends_at)
        self.ec2_states[state.instance_id] = state
        detail = {
            Ec2Code.INSTANCE_REBOOT: "in-place reboot",
            Ec2Code.SYSTEM_REBOOT: f"reboot migration to {host}",
            Ec2Code.SYSTEM_MAINTENANCE: "network or power maintenance",
        }[code]
        return [Ec2StateChanged(state, "impacted", f"{detail} by {event.event_id}")]

    def _ec2_down(self, state: Ec2State, to: InstanceState, cause: str, move_on_start: bool = False) -> list[Change]:
        """The instance stops or terminates. In an Auto Scaling group it is replaced (the AWS page "Scheduled
        events for your instances", its note on Auto Scaling); when the group has terminating lifecycle hooks, its
        termination goes through them first ("Amazon EC2 Auto Scaling lifecycle hooks": they apply to every
        termination), and the replacement is launched once they are done."""
        instance = self.ec2_instances[state.instance_id]
        if instance.auto_scaling_group is not None:
            hooks = self.lifecycle.of_group(instance.auto_scaling_group, TERMINATING)
            held = bool(hooks) and state.lifecycle_state == "InService"
            state = self._terminated(state)
            if held:
                down = Ec2StateChanged(state, "terminated", f"by {cause}; Terminating:Wait on its lifecycle hooks")
                return [down] + self._hold_for_hooks(state.instance_id, hooks, decrement=False)
            return [
                Ec2StateChanged(state, "terminated", f"by {cause}; replaced by its Auto Scaling group")
            ] + self._launch_replacement(instance, cause)
        state = replace(
            state,
            state=to,
            impacted_by=None,
            impact_until=None,
            move_on_start=move_on_start,
            terminated_at=self.now if to is InstanceState.TERMINATED else None,
        )
        self.ec2_states[state.instance_id] = state
        return [Ec2StateChanged(state, to.value, f"by {cause}")]

    def _launch_replacement(self, instance: Ec2Instance, cause: str) -> list[Change]:
        new_id = f"i-{hex17(self.seed, 'replacement', instance.instance_id, self.sequence.take())}"
        host = self.fleet.next_host(self.ec2_states[instance.instance_id].host)
        origin = self.ec2_states[instance.instance_id].origin or instance.instance_id
        self.ec2_instances[new_id] = self._replacement_record(origin, new_id, host)
        state = Ec2State(new_id, InstanceState.RUNNING, host, self.now, self.now, origin=origin)
        self.ec2_states[new_id] = state
        launched: list[Change] = [Ec2StateChanged(state, "launched", f"replaces {instance.instance_id} ({cause})")]
        group = instance.auto_scaling_group
        hooks = [] if group is None else self.lifecycle.of_group(group, LAUNCHING)
        return launched + (self._hold_for_hooks(new_id, hooks, False, LAUNCHING) if hooks else [])

    def _replacement_record(self, origin: str, new_id: str, host: str) -> Ec2Instance:
        # A replacement has its group's launch configuration, not the old instance's metadata endpoint.
        return replace(
            ec2_fleet(self.fleet).instances[origin], instance_id=new_id, host=host, imds_address=None, imds_port=None
        )

    def _end_ec2(self, event_id: str) -> list[Change]:
        event = replace(self.ec2_events[event_id], state=Ec2EventState.COMPLETED, ended_at=self.now)
        self._index_ec2(event)
        changes: list[Change] = [Ec2EventChanged(event, "completed", "maintenance done")]
        state = self.ec2_states[event.instance_id]
        if state.impacted_by == event_id:
            rebooted = event.code is not Ec2Code.SYSTEM_MAINTENANCE
            state = replace(
                state, impacted_by=None, impact_until=None, booted_at=self.now if rebooted else state.booted_at
            )
            self.ec2_states[state.instance_id] = state
            changes.append(Ec2StateChanged(state, "recovered", f"running again after {event_id}"))
        return changes

    def _spot_action(self, instance_id: str) -> list[Change]:
        state = self.ec2_states[instance_id]
        if state.spot_action is None:  # nothing was announced
            return []
        to = {"terminate": InstanceState.TERMINATED, "stop": InstanceState.STOPPED, "hibernate": InstanceState.STOPPED}[
            state.spot_action
        ]
        return self._ec2_down(state, to, f"Spot interruption ({state.spot_action})")

    def _ec2_event_within_bounds(self, event: Ec2Event) -> Ec2Event:
        """A stored EC2 event with its times inside the simulated range (see ``AzureComponent.repaired``)."""
        names = ("not_before", "not_after", "not_before_deadline", "created_at", "started_at", "ends_at", "ended_at")
        ends = ("not_after", "not_before_deadline", "ends_at")  # may pass the range's end: see bounds.clamped_end
        clamped: dict[str, Any] = {
            name: (clamped_end if name in ends else clamped_time)(getattr(event, name))
            for name in names
            if getattr(event, name) is not None
        }
        fixed = replace(event, **clamped)
        if fixed == event:
            return event
        what = ", ".join(
            f"{name} {iso_time(getattr(event, name))} → {iso_time(getattr(fixed, name))}"
            for name in names
            if getattr(event, name) != getattr(fixed, name)
        )
        self.repaired.append(Ec2EventChanged(fixed, "repaired", f"outside forewarn's bounds: {what}"))
        return fixed

    def _ec2_state_within_bounds(self, state: Ec2State) -> Ec2State:
        names = ("launched_at", "booted_at", "impact_until", "spot_action_time", "rebalance_at", "terminated_at")
        ends = ("impact_until", "spot_action_time")  # may pass the range's end: see bounds.clamped_end
        clamped: dict[str, Any] = {
            name: (clamped_end if name in ends else clamped_time)(getattr(state, name))
            for name in names
            if getattr(state, name) is not None
        }
        fixed = replace(state, **clamped)
        if fixed != state:
            self.repaired.append(Ec2StateChanged(fixed, "repaired", "times brought inside the simulated range"))
        return fixed

    def _index_ec2(self, event: Ec2Event) -> None:
        self.ec2_events[event.event_id] = event
        order = self._ec2_by_instance.setdefault(event.instance_id, [])
        if event.event_id not in order:
            order.append(event.event_id)
        if event.state is not Ec2EventState.ACTIVE and self._history is not None:
            self._ending.append(event.event_id)

    def _forget_ended(self, now: datetime) -> None:
        """The ended events of ``_ending`` that ended more than a week before ``now`` leave memory. The caller knows
        their ends are committed."""
        ending = self._ending
        while ending:
            event = self.ec2_events.get(ending[0])
            if event is not None and event.state is Ec2EventState.ACTIVE:  # not ended after all (a replica's rows)
                ending.popleft()
                continue
            if event is not None and event.ended_at is not None and now - event.ended_at <= EVENT_HISTORY:
                return  # and those after it ended later
            ending.popleft()
            if event is not None:
                del self.ec2_events[event.event_id]
                order = self._ec2_by_instance[event.instance_id]
                order.remove(event.event_id)
                if not order:
                    del self._ec2_by_instance[event.instance_id]

    # -------------------------------------------------------------------------------------------- replication
    def replicate(self, rows: Ec2Rows, created_at: datetime) -> list[Change]:
        """A replica takes rows the leader committed: as AzureComponent.replicate."""
        changes: list[Change] = []
        removed = False
        self.queues.replicate(rows.queues, rows.messages)
        self.bus.replicate(rows.rules)
        self.lifecycle.replicate(rows.hooks, rows.actions)
        for action in rows.actions.values():
            if action is not None and action.result is None:
                self.scheduler.add(action.timeout_at, self._hook_deadline, action.token)
        changes += [MessageChanged(message, REPLICATED) for message in rows.messages.values() if message is not None]
        if rows.notification_attributes is not None:
            self.notification_attributes = rows.notification_attributes
            changes.append(Ec2NotificationAttributesChanged(rows.notification_attributes))
        for window_id, window in rows.windows.items():
            if window is None or window.state == "deleted":
                self.ec2_windows.pop(window_id, None)
            else:
                self.ec2_windows[window_id] = window
                changes.append(Ec2WindowChanged(window, REPLICATED))
        for instance_id, state in rows.states.items():
            old = self.ec2_states.get(instance_id)
            if state is None:
                deployed = ec2_fleet(self.fleet).instances.get(instance_id)
                if deployed is None:  # a replacement the replica launched in a projection
                    removed |= self.ec2_states.pop(instance_id, None) is not None
                    self.ec2_instances.pop(instance_id, None)
                    continue
                state = Ec2State(instance_id, InstanceState.RUNNING, deployed.host, created_at, created_at)
            self.ec2_states[instance_id] = state
            if state.origin is not None and instance_id not in self.ec2_instances:
                self.ec2_instances[instance_id] = self._replacement_record(state.origin, instance_id, state.host)
            at = _pending_spot_action(state)
            if at is not None and (old is None or (old.spot_action_time, old.state) != (at, state.state)):
                self.scheduler.add(at, self._spot_deadline, instance_id)
            changes.append(Ec2StateChanged(state, REPLICATED, "committed by the leader"))
        instances: set[str] = set()
        for event_id, gone in rows.events.items():
            if gone is None and event_id in self.ec2_events:
                dropped = self.ec2_events.pop(event_id)
                self._ec2_by_instance.get(dropped.instance_id, []).remove(event_id)
                removed = True
        for event in sorted((e for e in rows.events.values() if e is not None), key=lambda e: e.seq):
            old_event = self.ec2_events.get(event.event_id)
            self._index_ec2(event)
            instances.add(event.instance_id)
            if event.state is Ec2EventState.ACTIVE and old_event != event:  # stale ones are told by their times
                if event.started_at is None:
                    self.scheduler.add(event.not_before, self._start_deadline, event.event_id)
                elif event.ends_at is not None:
                    self.scheduler.add(event.ends_at, self._end_deadline, event.event_id)
            changes.append(Ec2EventChanged(event, REPLICATED, "committed by the leader"))
        for instance_id in instances:
            self._ec2_by_instance[instance_id].sort(key=lambda event_id: self.ec2_events[event_id].seq)
        # A replica never commits, so it is never told to release: what the leader committed is forgotten here.
        self._forget_ended(self.now)
        if removed:
            changes.append(Rebuilt("EC2 events or instances a replica projected were not committed"))
        return changes

    def release(self) -> None:
        """Every change so far is committed: the events that ended more than a week ago leave memory (with a history
        to read them from; without one they stay)."""
        self._forget_ended(self.now)

    def reschedule(self) -> None:
        """Set every deadline the state implies again, as loading it sets them (the caller emptied the scheduler)."""
        for event in sorted(self.ec2_events.values(), key=lambda e: e.seq):
            if event.state is Ec2EventState.ACTIVE:
                if event.started_at is None:
                    self.scheduler.add(event.not_before, self._start_deadline, event.event_id)
                elif event.ends_at is not None:
                    self.scheduler.add(event.ends_at, self._end_deadline, event.event_id)
        for state in self.ec2_states.values():
            if (at := _pending_spot_action(state)) is not None:
                self.scheduler.add(at, self._spot_deadline, state.instance_id)
        for action in self.lifecycle.actions.values():
            self.scheduler.add(action.timeout_at, self._hook_deadline, action.token)

    # ----------------------------------------------------------------------------------- Auto Scaling hooks
    def put_lifecycle_hook(self, hook: LifecycleHook) -> list[Change]:
        self._group(hook.group)
        return self.lifecycle.put(hook)

    def delete_lifecycle_hook(self, group: str, name: str) -> list[Change]:
        self._group(group)
        return self.lifecycle.delete(group, name)

    def _group(self, group: str) -> list[Ec2Instance]:
        members = [i for i in self.ec2_instances.values() if i.auto_scaling_group == group]
        if not members:
            raise LifecycleRefused(f"AutoScalingGroup name not found - AutoScalingGroup {group} not found")
        return members

    def terminate_in_group(self, instance_id: str, decrement: bool) -> list[Change]:
        """TerminateInstanceInAutoScalingGroup: with terminating hooks the instance waits in Terminating:Wait
        (target-lifecycle-state Terminated), one action per hook; without, it is terminated at once. Replaced
        unless the group's desired capacity goes down."""
        instance = self.ec2_instances.get(instance_id)
        state = self.ec2_states.get(instance_id)
        if instance is None or state is None or instance.auto_scaling_group is None or state.gone:
            raise LifecycleRefused(f"Instance Id not found - No managed instance found for instance ID: {instance_id}")
        if self.lifecycle.waiting(instance_id) or state.lifecycle_state != "InService":
            raise LifecycleRefused(f"The instance {instance_id} is not in InService.")
        hooks = self.lifecycle.of_group(instance.auto_scaling_group, TERMINATING)
        if not hooks:
            return self._group_terminates(state, decrement)
        state = replace(state, lifecycle_state="Terminated")
        self.ec2_states[instance_id] = state
        changes: list[Change] = [Ec2StateChanged(state, "terminating", "Terminating:Wait on its lifecycle hooks")]
        return changes + self._hold_for_hooks(instance_id, hooks, decrement)

    def _hold_for_hooks(
        self, instance_id: str, hooks: list[LifecycleHook], decrement: bool, transition: str = TERMINATING
    ) -> list[Change]:
        """One lifecycle action per hook of the transition: the instance waits (Terminating:Wait, or Pending:Wait
        for a launch) until each is done."""
        changes: list[Change] = []
        for hook in hooks:
            action = LifecycleAction(
                token=derived_guid(self.seed, "lifecycle", instance_id, hook.name, self.sequence.take()).lower(),
                group=hook.group,
                hook=hook.name,
                instance_id=instance_id,
                transition=transition,
                started_at=self.now,
                timeout_at=self.now + timedelta(seconds=hook.heartbeat_timeout),
                global_at=self.now + timedelta(seconds=hook.global_timeout),
                decrement=decrement,
            )
            self.scheduler.add(action.timeout_at, self._hook_deadline, action.token)
            changes += self.lifecycle.start(action)
        return changes

    def complete_lifecycle_action(
        self, group: str, hook: str, token: str | None, instance_id: str | None, result: str
    ) -> list[Change]:
        action = self.lifecycle.find(group, hook, token, instance_id)
        return self.lifecycle.finish(action, result, "completed") + self._after_action(action, result)

    def record_lifecycle_heartbeat(
        self, group: str, hook: str, token: str | None, instance_id: str | None
    ) -> list[Change]:
        found = self.lifecycle.find(group, hook, token, instance_id)
        changes = self.lifecycle.heartbeat(found, self.now)
        moved = self.lifecycle.actions[found.token]
        self.scheduler.add(moved.timeout_at, self._hook_deadline, moved.token)
        return changes

    def _hook_stale(self, token: str, at: datetime) -> bool:
        action = self.lifecycle.actions.get(token)
        return action is None or action.timeout_at != at

    def _hook_timeout(self, token: str) -> list[Change]:
        action = self.lifecycle.actions[token]
        hook = self.lifecycle.hooks.get(f"{action.group}/{action.hook}")
        result = hook.default_result if hook is not None else "ABANDON"
        return self.lifecycle.finish(action, result, "timed-out") + self._after_action(action, result)

    def _after_action(self, action: LifecycleAction, result: str) -> list[Change]:
        """Once no hook holds the instance any more, a termination goes on (CONTINUE and ABANDON alike); a launch
        puts the instance in service, or with ABANDON the group terminates it and launches another ("Complete a
        lifecycle action")."""
        if action.transition == LAUNCHING:
            if result == "CONTINUE":
                return []
            state = replace(self.ec2_states[action.instance_id], lifecycle_state="Terminated")
            self.ec2_states[state.instance_id] = state
            return self._ec2_down(state, InstanceState.TERMINATED, "its Auto Scaling group (launch abandoned)")
        if self.lifecycle.waiting(action.instance_id):
            return []
        return self._group_terminates(self.ec2_states[action.instance_id], action.decrement)

    def _group_terminates(self, state: Ec2State, decrement: bool) -> list[Change]:
        if state.state is InstanceState.TERMINATED:  # EC2 ended it (a retirement, a Spot interruption) before its hooks
            return self._launch_replacement(self.ec2_instances[state.instance_id], "its Auto Scaling group")
        cause = "its Auto Scaling group (scale-in)"
        if not decrement:
            return self._ec2_down(state, InstanceState.TERMINATED, cause)
        state = self._terminated(state)
        return [Ec2StateChanged(state, "terminated", f"by {cause}; not replaced (desired capacity decremented)")]

    def _terminated(self, state: Ec2State) -> Ec2State:
        """The instance terminated now by its Auto Scaling group, kept as such."""
        state = replace(
            state,
            state=InstanceState.TERMINATED,
            impacted_by=None,
            impact_until=None,
            lifecycle_state="Terminated",
            terminated_at=self.now,
        )
        self.ec2_states[state.instance_id] = state
        return state


class RescheduleRefused(Invalid):
    """ModifyInstanceEventStartTime's own refusal (InvalidInstanceEventStartTime on the wire)."""


class WindowNotFound(NotFound):
    """InvalidInstanceEventWindowId.NotFound on the wire."""


class WindowCombination(Invalid):
    """InvalidParameterCombination on the wire."""


def _pending_spot_action(state: Ec2State) -> datetime | None:
    """When an announced Spot interruption is still to happen (None: none is). A state stored before starting an
    instance cleared its action may still carry the one that stopped it: an action no later than its boot happened."""
    at = state.spot_action_time
    if at is None or state.gone or state.state is not InstanceState.RUNNING:
        return None
    return at if state.booted_at is None or at > state.booted_at else None
