"""The engine and the clock under any duration, date or number (hypothesis): huge, negative, boundary, booleans.
They refuse with their own error (CoreError) and change nothing, or accept and stay inside the bounds; they never
raise OverflowError or ValueError from datetime arithmetic. An engine rebuilt from what they hold needs no repair,
and time can run to the end of the range with every deadline applied."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from forewarn.aws.component import Ec2Component, Ec2Request, StoredEc2
from forewarn.aws.model import Ec2Code
from forewarn.azure.changes import EventChanged
from forewarn.azure.component import AzureComponent, StoredAzure
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.core.bounds import (
    EARLIEST_TIME,
    LATEST_TIME,
    MAX_CLOCK_SPEED,
    MAX_CLOCK_STEP,
    MAX_DURATION_SECONDS,
    MAX_EC2_DEADLINE,
    MAX_EVENT_LENGTH,
    MAX_NOTICE,
    MIN_CLOCK_SPEED,
)
from forewarn.core.clock import Clock
from forewarn.core.errors import CoreError
from forewarn.engine.engine import Engine
from forewarn.fleet.file import parse_fleet
from forewarn.waves.component import StoredWaves, WaveOrder, WaveRunner, WaveSpec
from helpers import SMALL_FLEET, T0

EBS = "i-0aaaaaaaaaaaaaaa1"
FLEET = parse_fleet(SMALL_FLEET + f"ec2_instances:\n  - {{id: {EBS}, host: host-01}}\n", "bounds.yaml")
VM_NAMES = sorted(azure_fleet(FLEET).vms)
US = timedelta(microseconds=1)
FAR = timezone(timedelta(hours=14))  # the largest offset in use: its times near datetime.min have no UTC form

BOUNDARY_DURATIONS = [
    timedelta(0),
    -US,
    US,
    MAX_NOTICE,
    MAX_NOTICE + US,
    MAX_EVENT_LENGTH,
    MAX_EVENT_LENGTH + US,
    MAX_EC2_DEADLINE + US,
    MAX_CLOCK_STEP,
    MAX_CLOCK_STEP + US,
    timedelta.max,
    timedelta.min,
    timedelta(seconds=10**12 // 86400 * 86400),
]
realistic_durations = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3))
durations = st.one_of(
    st.sampled_from(BOUNDARY_DURATIONS),
    st.timedeltas(),
    realistic_durations,
    realistic_durations,
    st.timedeltas(min_value=-timedelta(days=2), max_value=timedelta(days=400)),
)
BOUNDARY_TIMES = [
    EARLIEST_TIME,
    EARLIEST_TIME - US,
    LATEST_TIME,
    LATEST_TIME + US,
    datetime.max.replace(tzinfo=UTC),
    datetime.min.replace(tzinfo=UTC),
    datetime.min.replace(tzinfo=FAR),
    datetime.max.replace(tzinfo=timezone(-timedelta(hours=14))),
    datetime(9999, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
    datetime(2026, 4, 20, 22, 30),
]
realistic_times = st.datetimes(min_value=datetime(2026, 4, 21), max_value=datetime(2026, 6, 1), timezones=st.just(UTC))
times = st.one_of(
    st.sampled_from(BOUNDARY_TIMES),
    st.datetimes(timezones=st.just(UTC)),
    realistic_times,
    realistic_times,
    st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2028, 1, 1), timezones=st.just(UTC)),
)
numbers = st.one_of(
    st.none(),
    st.integers(min_value=-1, max_value=MAX_DURATION_SECONDS),
    st.sampled_from([-2, -1, 0, 1, MAX_DURATION_SECONDS, MAX_DURATION_SECONDS + 1, 10**12, True, False, 5.0]),
    st.integers(),
)
maybe_durations = st.one_of(st.none(), durations)
# A notice or a NotBefore (both at once is refused before anything else is looked at).
starts = st.one_of(st.tuples(maybe_durations, st.none()), st.tuples(st.none(), times))

commands = st.lists(
    st.one_of(
        st.tuples(
            st.just("schedule"),
            st.sampled_from(list(EventType)),
            st.sampled_from(VM_NAMES),
            starts,
            maybe_durations,
            numbers,
            st.one_of(st.integers(min_value=0, max_value=3), numbers),
        ),
        st.tuples(st.just("advance_by"), durations),
        st.tuples(st.just("advance_to"), times),
        st.tuples(
            st.just("user"), st.sampled_from(["restart", "redeploy"]), st.sampled_from(VM_NAMES), maybe_durations
        ),
        st.tuples(st.just("predicted_failure"), st.sampled_from(sorted(FLEET.hosts)), maybe_durations),
        st.tuples(st.just("hardware_failure"), st.sampled_from(sorted(FLEET.hosts))),
        st.tuples(
            st.just("wave"),
            maybe_durations,
            numbers,
            maybe_durations,
            st.one_of(st.integers(min_value=1, max_value=3), numbers),
        ),
        st.tuples(
            st.just("ec2"),
            st.sampled_from([Ec2Code.SYSTEM_REBOOT, Ec2Code.INSTANCE_REBOOT]),
            starts,
            maybe_durations,
            maybe_durations,
        ),
        st.tuples(st.just("reschedule"), times),
    ),
    min_size=1,
    max_size=12,
)


def apply(engine: Engine, command: tuple) -> list:
    kind = command[0]
    if kind == "schedule":
        _, event_type, vm, (notice, not_before), window, seconds, extra = command
        return engine.component(AzureComponent).schedule(
            ScheduleRequest(
                event_type,
                vms=(vm,),
                notice=notice,
                not_before=not_before,
                impact_window=window,
                duration_seconds=seconds,
                extra_impacts=0 if extra is None else extra,
            )
        )
    if kind == "advance_by":
        try:
            to = engine.now + command[1]
        except OverflowError:  # the test's own sum, not the engine's
            return []
        return engine.advance(to)
    if kind == "advance_to":
        return engine.advance(command[1])
    if kind == "user":
        return getattr(engine.component(AzureComponent), command[1])([command[2]], command[3])
    if kind == "predicted_failure":
        return engine.component(AzureComponent).predicted_failure([command[1]], command[2])
    if kind == "hardware_failure":
        return engine.component(AzureComponent).hardware_failure([command[1]])
    if kind == "wave":
        _, notice, seconds, window, concurrency = command
        return engine.component(WaveRunner).start_wave(
            WaveSpec(
                EventType.FREEZE,
                WaveOrder.UPDATE_DOMAIN,
                1 if concurrency is None else concurrency,
                ("westno",),
                notice=notice,
                duration_seconds=seconds,
                impact_window=window,
            )
        )
    if kind == "ec2":
        _, code, (notice, not_before), window, deadline = command
        return engine.component(Ec2Component).schedule_ec2(
            Ec2Request(code, (EBS,), notice=notice, not_before=not_before, window=window, deadline=deadline)
        )
    events = [e for e in engine.component(Ec2Component).ec2_events.values() if e.not_before_deadline is not None]
    if not events:
        return []
    return engine.component(Ec2Component).reschedule_ec2(EBS, events[-1].event_id, command[1])


def state(engine: Engine) -> tuple:
    return (
        engine.now,
        dict(engine.component(AzureComponent).events),
        dict(engine.component(AzureComponent).vm_states),
        dict(engine.component(Ec2Component).ec2_events),
        dict(engine.component(Ec2Component).ec2_states),
        dict(engine.component(WaveRunner).waves),
        dict(engine.component(AzureComponent).incarnations),
        engine.next_seq,
    )


def rebuilt(engine: Engine) -> Engine:
    return Engine(
        FLEET,
        "bounds",
        engine.now,
        created_at=T0,
        stored={
            "azure": StoredAzure(
                engine.component(AzureComponent).events.values(),
                engine.component(AzureComponent).incarnations,
                engine.component(AzureComponent).vm_states.values(),
                engine.component(AzureComponent).policies.values(),
            ),
            "aws": StoredEc2(
                engine.component(Ec2Component).ec2_events.values(), engine.component(Ec2Component).ec2_states.values()
            ),
            "waves": StoredWaves(engine.component(WaveRunner).waves.values()),
        },
        next_seq=engine.next_seq,
    )


def assert_inside_bounds(engine: Engine) -> None:
    assert EARLIEST_TIME <= engine.now <= LATEST_TIME
    for event in engine.component(AzureComponent).events.values():
        assert EARLIEST_TIME <= event.not_before <= LATEST_TIME
        assert timedelta(0) <= event.impact_window <= MAX_EVENT_LENGTH
        assert -1 <= event.duration_seconds <= MAX_DURATION_SECONDS and not isinstance(event.duration_seconds, bool)
    for event in engine.component(Ec2Component).ec2_events.values():
        assert EARLIEST_TIME <= event.not_before <= LATEST_TIME


@settings(max_examples=300, deadline=None)
@given(commands)
def test_any_duration_or_date_is_refused_by_the_engine_or_kept_inside_the_bounds(sequence):
    engine = Engine(FLEET, "bounds", T0)
    for command in sequence:
        before = state(engine)
        try:
            changes = apply(engine, command)
        except CoreError:
            assert state(engine) == before, f"{command} was refused but changed the engine"
            continue
        assert all(
            change.event.duration_seconds <= MAX_DURATION_SECONDS
            for change in changes
            if isinstance(change, EventChanged)
        )
        assert_inside_bounds(engine)
    again = rebuilt(engine)
    assert again.repaired == [] and again.next_deadline() == engine.next_deadline()
    for built in (engine, again):  # every deadline up to the end of simulated time applies without overflow
        built.advance(LATEST_TIME)
        assert_inside_bounds(built)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["manual", "real"]),
    st.one_of(st.floats(), st.integers(), st.booleans(), st.sampled_from([MIN_CLOCK_SPEED, MAX_CLOCK_SPEED])),
    st.one_of(st.none(), times),
    st.lists(
        st.tuples(
            st.sampled_from(["advance", "set", "read", "speed"]),
            durations,
            times,
            st.floats(allow_nan=True, allow_infinity=True),
        ),
        max_size=8,
    ),
)
def test_the_clock_refuses_with_its_own_error_and_never_leaves_the_range(mode, speed, start, moves):
    wall = 1_700_000_000.0
    try:
        clock = Clock.start(mode, speed, wall, start)
    except CoreError:
        return
    for what, delta, moment, other in moves:
        try:
            if what == "advance":
                clock = clock.advanced_by(delta, wall)
            elif what == "set":
                clock = clock.moved_to(moment, wall)
            elif what == "speed":
                clock = clock.reconfigured("real", other, wall)
            else:
                assert EARLIEST_TIME <= clock.now(other if other == other else wall) <= LATEST_TIME
        except CoreError:
            pass
        assert EARLIEST_TIME <= clock.anchor_sim <= LATEST_TIME
        assert MIN_CLOCK_SPEED <= clock.speed <= MAX_CLOCK_SPEED


@settings(max_examples=200, deadline=None)
@given(numbers, durations, times, st.integers(min_value=-5, max_value=10**7), times)
def test_an_engine_loads_any_stored_event_and_runs_it_to_the_end(seconds, window, not_before, extra, now):
    """What an older forewarn may have written: each value is clamped into the bounds, and said so."""
    engine = Engine(FLEET, "bounds", T0)
    [event] = [
        c.event
        for c in engine.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, vms=("solo",)))
        if isinstance(c, EventChanged)
    ]
    try:
        stored = replace(
            event,
            duration_seconds=seconds,
            impact_window=window,
            not_before=not_before.astimezone(UTC),
            extra_impacts=extra,
        )
        stored_now = now.astimezone(UTC)
    except OverflowError:  # no UTC form: not a value a database holds
        return
    loaded = Engine(FLEET, "bounds", stored_now, created_at=T0, stored={"azure": StoredAzure(events=[stored])})
    assert (loaded.repaired == []) == (loaded.component(AzureComponent).events[event.event_id] == stored)
    assert_inside_bounds(loaded)
    loaded.advance(LATEST_TIME)
    assert_inside_bounds(loaded)
