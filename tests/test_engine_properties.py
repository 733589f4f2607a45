"""Properties of the engine over random command sequences (hypothesis)."""

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from forewarn.core.engine import Engine, EventChanged, ScheduleRequest
from forewarn.core.errors import CoreError
from forewarn.core.model import ALLOWED_TRANSITIONS, EventSource, EventStatus, EventType
from helpers import T0, small_fleet

FLEET = small_fleet()
VM_NAMES = sorted(FLEET.vms)
HOSTS = sorted(FLEET.hosts)

schedule = st.tuples(
    st.just("schedule"),
    st.sampled_from(list(EventType)),
    st.lists(st.sampled_from(VM_NAMES), min_size=0, max_size=4),
    st.lists(st.sampled_from(HOSTS), min_size=0, max_size=1),
    st.integers(min_value=0, max_value=1200),
    st.sampled_from(list(EventSource)),
    st.integers(min_value=0, max_value=900),
)
approve = st.tuples(st.just("approve"), st.integers(min_value=0, max_value=30), st.sampled_from(VM_NAMES + ["control"]))
cancel = st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=30))
advance = st.tuples(st.just("advance"), st.integers(min_value=0, max_value=1500))
commands = st.lists(st.one_of(schedule, approve, cancel, advance), min_size=1, max_size=40)


def snapshot(engine: Engine) -> dict:
    """What every scope's IMDS document says: incarnation and live events."""
    return {
        scope: (
            engine.incarnation(scope),
            tuple((e.event_id, e.status, e.event_type, e.resources, e.not_before) for e in engine.live_events(scope)),
        )
        for scope in FLEET.scopes
    }


def apply(engine: Engine, command: tuple, created: list[str]) -> None:
    kind = command[0]
    try:
        if kind == "schedule":
            _, event_type, vms, hosts, notice, source, window = command
            changes = engine.schedule(ScheduleRequest(
                event_type, vms=tuple(vms), hosts=tuple(hosts), notice=timedelta(seconds=notice), source=source,
                impact_window=timedelta(seconds=window),
            ))
            created.extend(c.event.event_id for c in changes if isinstance(c, EventChanged))
        elif kind == "approve" and created:
            engine.approve([created[command[1] % len(created)]], by=command[2])
        elif kind == "cancel" and created:
            engine.cancel(created[command[1] % len(created)])
        elif kind == "advance":
            engine.advance(engine.now + timedelta(seconds=command[1]))
    except CoreError:
        pass


@settings(max_examples=200, deadline=None)
@given(commands)
def test_incarnation_moves_exactly_when_the_document_changes(sequence):
    engine = Engine(FLEET, "prop", T0)
    created: list[str] = []
    before = snapshot(engine)
    for command in sequence:
        apply(engine, command, created)
        after = snapshot(engine)
        for scope in FLEET.scopes:
            (inc_before, events_before), (inc_after, events_after) = before[scope], after[scope]
            assert inc_after >= inc_before
            assert (inc_after > inc_before) == (events_after != events_before)
            if command[0] != "advance":  # a command is one step; an advance is one step per instant
                assert inc_after - inc_before in (0, 1)
        before = after


@settings(max_examples=200, deadline=None)
@given(commands)
def test_no_backward_transition_and_ids_stable(sequence):
    engine = Engine(FLEET, "prop", T0)
    created: list[str] = []
    seen: dict[str, tuple] = {}
    for command in sequence:
        apply(engine, command, created)
        for event in engine.events.values():
            if event.event_id in seen:
                old_status, old_type, old_resources = seen[event.event_id]
                assert event.status is old_status or event.status in ALLOWED_TRANSITIONS[old_status] or (
                    old_status is EventStatus.SCHEDULED and event.status is EventStatus.COMPLETED  # within one advance
                )
                assert (event.event_type, event.resources) == (old_type, old_resources)
            seen[event.event_id] = (event.status, event.event_type, event.resources)
            if event.status is EventStatus.STARTED:
                assert event.started_at >= event.created_at


@settings(max_examples=200, deadline=None)
@given(commands)
def test_nothing_starts_before_not_before_unless_its_operation_was_approved(sequence):
    engine = Engine(FLEET, "prop", T0)
    created: list[str] = []
    for command in sequence:
        apply(engine, command, created)
    for event in engine.events.values():
        if event.started_at is not None and event.started_at < event.not_before:
            siblings = [engine.events[i] for i in engine.operations[event.operation_id]]
            assert all(s.approvals for s in siblings if s.status is not EventStatus.CANCELED)


@settings(max_examples=100, deadline=None)
@given(commands, st.sampled_from(VM_NAMES))
def test_approval_starts_the_event_for_all_its_resources(sequence, approver):
    engine = Engine(FLEET, "prop", T0)
    created: list[str] = []
    for command in sequence:
        apply(engine, command, created)
    for event in list(engine.live_events(FLEET.vm(approver).scope)):
        if event.status is EventStatus.SCHEDULED and len(engine.operations[event.operation_id]) == 1:
            engine.approve([event.event_id], by=approver)
            for name in event.resources:
                visible = {e.event_id: e.status for e in engine.live_events(FLEET.vm(name).scope)}
                assert visible[event.event_id] is EventStatus.STARTED


@settings(max_examples=100, deadline=None)
@given(commands, st.integers(min_value=0, max_value=40))
def test_replay_and_restore_give_the_same_documents(sequence, cut):
    """Same fleet, seed and commands: same documents; and an engine rebuilt from its stored state mid-way continues
    exactly like the one that never stopped (what a restart does)."""
    first, second = Engine(FLEET, "prop", T0), Engine(FLEET, "prop", T0)
    created_first: list[str] = []
    created_second: list[str] = []
    for index, command in enumerate(sequence):
        if index == cut:
            second = Engine(FLEET, "prop", second.now, events=second.events.values(), incarnations=second.incarnations)
        apply(first, command, created_first)
        apply(second, command, created_second)
        assert snapshot(first) == snapshot(second)
    assert created_first == created_second
