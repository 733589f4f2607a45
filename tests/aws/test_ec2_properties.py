"""Properties of the EC2 half of the engine over random command sequences (hypothesis)."""

from datetime import timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from forewarn.aws.changes import Ec2EventChanged
from forewarn.aws.component import Ec2Component, Ec2Request, StoredEc2
from forewarn.aws.model import Ec2Code, Ec2EventState, InstanceState
from forewarn.aws.windows import TimeRange
from forewarn.azure.component import AzureComponent, StoredAzure
from forewarn.core.errors import CoreError
from forewarn.engine.engine import Engine
from forewarn.fleet.file import parse_fleet
from helpers import T0

IDS = ["i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2", "i-0ccccccccccccccc3", "i-0ddddddddddddddd4"]
FLEET = parse_fleet(f"""
hosts: [{{name: h1}}, {{name: h2}}]
ec2_instances:
  - {{id: {IDS[0]}, host: h1, tags: {{team: a}}}}
  - {{id: {IDS[1]}, host: h1, root_device: instance-store}}
  - {{id: {IDS[2]}, host: h2, auto_scaling_group: asg}}
  - {{id: {IDS[3]}, host: h2, spot: true}}
""")

commands = st.lists(
    st.one_of(
        st.tuples(
            st.just("schedule"),
            st.sampled_from(list(Ec2Code)),
            st.lists(st.sampled_from(IDS), min_size=1, max_size=2),
            st.integers(min_value=0, max_value=7200),
        ),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=20)),
        st.tuples(
            st.just("reschedule"), st.integers(min_value=0, max_value=20), st.integers(min_value=0, max_value=10**6)
        ),
        st.tuples(st.just("advance"), st.integers(min_value=0, max_value=20000)),
        st.tuples(st.just("start"), st.sampled_from(IDS)),
        st.tuples(st.just("spot"), st.sampled_from(["terminate", "stop", "hibernate"])),
        st.tuples(st.just("window"), st.sampled_from(IDS)),
    ),
    min_size=1,
    max_size=40,
)


def apply(engine: Engine, command, created: list[str]) -> None:
    kind = command[0]
    if kind == "schedule":
        changes = engine.component(Ec2Component).schedule_ec2(
            Ec2Request(command[1], tuple(command[2]), notice=timedelta(seconds=command[3]))
        )
        created.extend(c.event.event_id for c in changes if isinstance(c, Ec2EventChanged))
    elif kind == "cancel" and created:
        engine.component(Ec2Component).cancel_ec2(created[command[1] % len(created)])
    elif kind == "reschedule" and created:
        event = engine.component(Ec2Component).ec2_events[created[command[1] % len(created)]]
        engine.component(Ec2Component).reschedule_ec2(
            event.instance_id, event.event_id, engine.now + timedelta(seconds=command[2])
        )
    elif kind == "advance":
        engine.advance(engine.now + timedelta(seconds=command[1]))
    elif kind == "start":
        engine.component(Ec2Component).start_instance(command[1])
    elif kind == "spot":
        engine.component(Ec2Component).interrupt_spot([IDS[3]], command[1])
    elif kind == "window":
        if not engine.component(Ec2Component).ec2_windows:
            engine.component(Ec2Component).create_window("w", (TimeRange("tuesday", 1, "tuesday", 9),))
        engine.component(Ec2Component).associate_window(
            next(iter(engine.component(Ec2Component).ec2_windows)), instance_ids=(command[1],)
        )


def snapshot(engine: Engine) -> tuple:
    return (
        dict(engine.component(Ec2Component).ec2_events),
        dict(engine.component(Ec2Component).ec2_states),
        dict(engine.component(Ec2Component).ec2_instances),
        dict(engine.component(Ec2Component).ec2_windows),
        engine.next_seq,
        engine.next_deadline(),
    )


@settings(max_examples=200, deadline=None)
@given(commands)
def test_events_never_go_back_and_refusals_change_nothing(sequence):
    engine = Engine(FLEET, "prop", T0)
    created: list[str] = []
    seen: dict[str, Ec2EventState] = {}
    terminated: set[str] = set()
    for command in sequence:
        before = snapshot(engine)
        try:
            apply(engine, command, created)
        except CoreError:
            assert snapshot(engine) == before
        for event in engine.component(Ec2Component).ec2_events.values():
            previous = seen.get(event.event_id)
            if previous is not None and previous is not Ec2EventState.ACTIVE:
                assert event.state is previous  # completed and canceled are final
            if event.started_at is not None:
                assert event.started_at >= event.not_before
            seen[event.event_id] = event.state
        now_terminated = {
            iid for iid, s in engine.component(Ec2Component).ec2_states.items() if s.state is InstanceState.TERMINATED
        }
        assert terminated <= now_terminated
        terminated = now_terminated
        for state in engine.component(Ec2Component).ec2_states.values():
            if state.origin is not None:
                assert engine.component(Ec2Component).ec2_instances[state.instance_id].auto_scaling_group == "asg"


@settings(max_examples=100, deadline=None)
@given(commands, st.integers(min_value=0, max_value=40))
# A Spot instance stopped by its interruption and started again kept the action's time: a restored engine applied
# the stop a second time.
@example(
    [
        ("spot", "stop"),
        ("advance", 120),
        ("start", IDS[3]),
        ("schedule", Ec2Code.INSTANCE_REBOOT, [IDS[0]], 0),
        ("advance", 0),
    ],
    3,
)
def test_restore_continues_exactly(sequence, cut):
    first, second = Engine(FLEET, "prop", T0), Engine(FLEET, "prop", T0)
    created_first: list[str] = []
    created_second: list[str] = []
    for index, command in enumerate(sequence):
        if index == cut:
            second = Engine(
                FLEET,
                "prop",
                second.now,
                created_at=T0,
                stored={
                    "azure": StoredAzure(events=second.component(AzureComponent).events.values()),
                    "aws": StoredEc2(
                        second.component(Ec2Component).ec2_events.values(),
                        second.component(Ec2Component).ec2_states.values(),
                        second.component(Ec2Component).ec2_windows.values(),
                    ),
                },
                next_seq=second.next_seq,
            )
        for engine, created in ((first, created_first), (second, created_second)):
            try:
                apply(engine, command, created)
            except CoreError:
                pass
        assert (
            first.component(Ec2Component).ec2_events,
            first.component(Ec2Component).ec2_states,
            first.component(Ec2Component).ec2_windows,
        ) == (
            second.component(Ec2Component).ec2_events,
            second.component(Ec2Component).ec2_states,
            second.component(Ec2Component).ec2_windows,
        )
