"""EC2 scheduled events in the engine (the AWS page "Scheduled events for your instances"): codes and their impacts,
lifecycle, rescheduling rules, Auto
Scaling replacement, Spot interruptions; and their storage."""

from datetime import timedelta

import pytest

from forewarn.app.runtime import Maintenance
from forewarn.aws.changes import Ec2EventChanged
from forewarn.aws.component import Ec2Component, Ec2Request, RescheduleRefused
from forewarn.aws.model import Ec2Code, Ec2EventState, InstanceState
from forewarn.core.errors import Conflict, Invalid, NotFound
from forewarn.engine.engine import Engine
from forewarn.fleet.file import parse_fleet
from helpers import T0, open_store

EBS = "i-0aaaaaaaaaaaaaaa1"
STORE = "i-0bbbbbbbbbbbbbbb2"
ASG = "i-0ccccccccccccccc3"
SPOT = "i-0ddddddddddddddd4"
FLEET = f"""
hosts: [{{name: h1}}, {{name: h2}}, {{name: h3}}]
ec2_instances:
  - {{id: {EBS}, host: h1, name: db}}
  - {{id: {STORE}, host: h1, root_device: instance-store}}
  - {{id: {ASG}, host: h2, auto_scaling_group: web-asg}}
  - {{id: {SPOT}, host: h3, spot: true}}
"""


def engine() -> Engine:
    return Engine(parse_fleet(FLEET), seed="test", now=T0)


def schedule(e, code, *instances, **fields):
    changes = e.component(Ec2Component).schedule_ec2(Ec2Request(Ec2Code(code), tuple(instances), **fields))
    return [c.event for c in changes if isinstance(c, Ec2EventChanged)]


def test_event_shape_and_defaults():
    e = engine()
    [event] = schedule(e, "system-reboot", EBS)
    assert event.event_id.startswith("instance-event-") and len(event.event_id) == len("instance-event-") + 17
    assert event.not_before == T0 + timedelta(days=14)
    assert event.not_after == event.not_before + timedelta(hours=2)
    assert event.not_before_deadline == event.not_before + timedelta(days=21)
    assert event.description == "The instance is scheduled for a reboot" and event.state is Ec2EventState.ACTIVE
    [stop] = schedule(e, "instance-stop", EBS, notice=timedelta(hours=1))
    assert stop.not_after is None and stop.not_before_deadline is None
    with pytest.raises(Invalid, match="EBS root"):
        schedule(e, "instance-stop", STORE)
    with pytest.raises(NotFound, match="The instance ID 'i-0eeeeeeeeeeeeeee5' does not exist"):
        schedule(e, "system-reboot", "i-0eeeeeeeeeeeeeee5")
    with pytest.raises(NotFound, match="no EC2 instance 'i-bad' \\(an instance id or Name tag\\)"):
        schedule(e, "system-reboot", "i-bad")


def test_system_reboot_migrates_and_completes_with_the_prefix():
    e = engine()
    [event] = schedule(e, "system-reboot", EBS, notice=timedelta(minutes=10))
    e.advance(T0 + timedelta(minutes=10))
    state = e.component(Ec2Component).ec2_states[EBS]
    assert state.host == "h2" and state.impacted_by == event.event_id and state.state is InstanceState.RUNNING
    assert (
        e.component(Ec2Component).ec2_events[event.event_id].state is Ec2EventState.ACTIVE
    )  # active while in progress
    e.advance(T0 + timedelta(minutes=15))
    done = e.component(Ec2Component).ec2_events[event.event_id]
    assert done.state is Ec2EventState.COMPLETED and done.shown_description.startswith("[Completed] ")
    assert e.component(Ec2Component).ec2_states[EBS].booted_at == T0 + timedelta(minutes=15)


def test_instance_reboot_stays_on_its_host_and_maintenance_does_not_reboot():
    e = engine()
    schedule(e, "instance-reboot", EBS, notice=timedelta(0))
    schedule(e, "system-maintenance", STORE, notice=timedelta(0))
    e.advance(T0 + timedelta(minutes=5))
    assert e.component(Ec2Component).ec2_states[EBS].host == "h1" and e.component(Ec2Component).ec2_states[
        EBS
    ].booted_at == T0 + timedelta(seconds=30)
    assert e.component(Ec2Component).ec2_states[STORE].booted_at == T0  # network or power maintenance: no reboot


def test_retirement_stops_ebs_and_terminates_instance_store():
    e = engine()
    schedule(e, "instance-retirement", EBS, STORE, notice=timedelta(0))
    e.advance(T0)
    assert e.component(Ec2Component).ec2_states[EBS].state is InstanceState.STOPPED
    assert e.component(Ec2Component).ec2_states[STORE].state is InstanceState.TERMINATED
    with pytest.raises(Conflict, match="terminated"):
        schedule(e, "system-reboot", STORE)


def test_stop_moves_to_a_new_host_when_started_again():
    e = engine()
    schedule(e, "instance-stop", EBS, notice=timedelta(0))
    e.advance(T0 + timedelta(minutes=1))
    assert (
        e.component(Ec2Component).ec2_states[EBS].state is InstanceState.STOPPED
        and e.component(Ec2Component).ec2_states[EBS].host == "h1"
    )
    e.component(Ec2Component).start_instance(EBS)
    assert (
        e.component(Ec2Component).ec2_states[EBS].state is InstanceState.RUNNING
        and e.component(Ec2Component).ec2_states[EBS].host == "h2"
    )
    with pytest.raises(Conflict):
        e.component(Ec2Component).start_instance(EBS)


def test_auto_scaling_group_replaces_an_impacted_instance():
    e = engine()
    schedule(e, "instance-retirement", ASG, notice=timedelta(0))
    e.advance(T0)
    assert e.component(Ec2Component).ec2_states[ASG].state is InstanceState.TERMINATED
    assert e.component(Ec2Component).ec2_states[ASG].lifecycle_state == "Terminated"
    [replacement] = [s for s in e.component(Ec2Component).ec2_states.values() if s.origin == ASG]
    assert replacement.state is InstanceState.RUNNING
    assert e.component(Ec2Component).ec2_instances[replacement.instance_id].auto_scaling_group == "web-asg"


def test_cancel_only_before_it_starts():
    e = engine()
    [event] = schedule(e, "system-reboot", EBS, notice=timedelta(hours=1))
    e.component(Ec2Component).cancel_ec2(event.event_id)
    assert e.component(Ec2Component).ec2_events[event.event_id].shown_description.startswith("[Canceled] ")
    e.advance(T0 + timedelta(hours=2))
    assert e.component(Ec2Component).ec2_states[EBS].impacted_by is None
    [started] = schedule(e, "instance-reboot", EBS, notice=timedelta(0))
    e.advance(e.now)
    with pytest.raises(Conflict):
        e.component(Ec2Component).cancel_ec2(started.event_id)


def test_reschedule_rules():
    e = engine()
    [event] = schedule(e, "system-reboot", EBS, notice=timedelta(days=1))
    changes = e.component(Ec2Component).reschedule_ec2(EBS, event.event_id, T0 + timedelta(days=3))
    moved = changes[0].event
    assert moved.not_before == T0 + timedelta(days=3) and moved.not_after == moved.not_before + timedelta(hours=2)
    e.advance(T0 + timedelta(days=1, minutes=1))
    assert e.component(Ec2Component).ec2_states[EBS].impacted_by is None  # the old start passed: nothing happened
    for when, message in (
        (T0 + timedelta(minutes=30), "at least 60 minutes"),
        (moved.not_before_deadline + timedelta(seconds=1), "after the event's deadline"),
    ):
        with pytest.raises(RescheduleRefused, match=message):
            e.component(Ec2Component).reschedule_ec2(EBS, event.event_id, when)
    [stop] = schedule(e, "instance-stop", EBS, notice=timedelta(days=2))
    with pytest.raises(RescheduleRefused, match="no deadline"):
        e.component(Ec2Component).reschedule_ec2(EBS, stop.event_id, e.now + timedelta(days=1))
    [soon] = schedule(e, "instance-reboot", STORE, notice=timedelta(minutes=4))
    with pytest.raises(RescheduleRefused, match="within 5 minutes"):
        e.component(Ec2Component).reschedule_ec2(STORE, soon.event_id, e.now + timedelta(hours=2))
    with pytest.raises(NotFound):
        e.component(Ec2Component).reschedule_ec2(
            STORE, event.event_id, e.now + timedelta(hours=2)
        )  # another instance's event


def test_spot_interruption_two_minutes_ahead():
    e = engine()
    e.component(Ec2Component).interrupt_spot([SPOT], "stop")
    state = e.component(Ec2Component).ec2_states[SPOT]
    assert (state.spot_action, state.spot_action_time) == ("stop", T0 + timedelta(minutes=2))
    e.advance(T0 + timedelta(minutes=2))
    assert e.component(Ec2Component).ec2_states[SPOT].state is InstanceState.STOPPED
    with pytest.raises(Invalid, match="not a Spot instance"):
        e.component(Ec2Component).interrupt_spot([EBS], "terminate")
    e.component(Ec2Component).recommend_rebalance([SPOT])
    assert e.component(Ec2Component).ec2_states[SPOT].rebalance_at == e.now


@pytest.mark.parametrize("url_kind", ["sqlite", "postgresql"])
def test_ec2_state_survives_a_restart(tmp_path, url_kind, request):
    url = str(tmp_path / "s.db") if url_kind == "sqlite" else request.getfixturevalue("postgres_url")
    service = Maintenance.open(open_store(url), parse_fleet(FLEET), "manual", 1.0, T0, "seed")
    service.perform(
        lambda engine: engine.component(Ec2Component).schedule_ec2(
            Ec2Request(Ec2Code.INSTANCE_RETIREMENT, (ASG,), notice=timedelta(minutes=1))
        )
    )
    [event] = service.perform(
        lambda engine: engine.component(Ec2Component).schedule_ec2(
            Ec2Request(Ec2Code.SYSTEM_REBOOT, (EBS,), notice=timedelta(hours=1))
        )
    )
    service.advance_clock(timedelta(minutes=2))
    service.store.close()
    again = Maintenance.open(open_store(url), None, "manual", 1.0, None, None)
    assert again.settled_engine().component(Ec2Component).ec2_states[ASG].state is InstanceState.TERMINATED
    [replacement] = [s for s in again.settled_engine().component(Ec2Component).ec2_states.values() if s.origin == ASG]
    assert replacement.instance_id in again.settled_engine().component(Ec2Component).ec2_instances
    again.advance_clock(timedelta(hours=1))
    assert again.settled_engine().component(Ec2Component).ec2_states[EBS].impacted_by == event.event.event_id
    again.store.close()


# ------------------------------------------------------------------------------------------------- event windows
from forewarn.aws.windows import TimeRange  # noqa: E402


def window_of(changes):
    return changes[0].window


def test_window_validation():
    e = engine()
    with pytest.raises(Invalid, match="at least 2 hours"):
        e.component(Ec2Component).create_window(
            "w", (TimeRange("monday", 2, "monday", 3), TimeRange("tuesday", 2, "tuesday", 8))
        )
    with pytest.raises(Invalid, match="at least 4 hours"):
        e.component(Ec2Component).create_window("w", (TimeRange("monday", 2, "monday", 5),))
    with pytest.raises(Invalid, match="only the hour and the day"):
        e.component(Ec2Component).create_window("w", cron="0 1-5 * * 1")
    with pytest.raises(Invalid, match="not both"):
        e.component(Ec2Component).create_window("w", (TimeRange("monday", 2, "monday", 8),), cron="* 0-4 * * 1")
    with pytest.raises(Invalid, match="needs time ranges or a cron"):
        e.component(Ec2Component).create_window("w")
    wrap = window_of(
        e.component(Ec2Component).create_window("w", (TimeRange("saturday", 22, "sunday", 2),))
    )  # across the week's end
    assert wrap.intervals() == [(6 * 24 + 22, 4)]
    cron = window_of(e.component(Ec2Component).create_window("c", cron="* 21-23 * * 2,3"))
    assert cron.intervals() == [(2 * 24 + 21, 2), (3 * 24 + 21, 2)]


def test_association_rules():
    e = engine()
    first = window_of(e.component(Ec2Component).create_window("a", (TimeRange("monday", 2, "monday", 8),)))
    second = window_of(e.component(Ec2Component).create_window("b", cron="* 0-4 * * 1,5"))
    e.component(Ec2Component).associate_window(first.window_id, instance_ids=(EBS,))
    with pytest.raises(Invalid, match="one window only"):
        e.component(Ec2Component).associate_window(second.window_id, instance_ids=(EBS,))
    with pytest.raises(Invalid, match="one kind of target"):
        e.component(Ec2Component).associate_window(first.window_id, instance_tags=(("team", "db"),))
    with pytest.raises(Invalid, match="associated targets"):
        e.component(Ec2Component).delete_window(first.window_id)
    e.component(Ec2Component).delete_window(first.window_id, force=True)
    with pytest.raises(NotFound):
        e.component(Ec2Component).ec2_window(first.window_id)
    with pytest.raises(NotFound):
        e.component(Ec2Component).associate_window(second.window_id, instance_ids=("i-0eeeeeeeeeeeeeee5",))


def test_new_events_are_placed_in_the_window_and_network_maintenance_is_not():
    e = engine()  # T0 is Monday 20 April 2026, 22:11:58 UTC
    window = window_of(e.component(Ec2Component).create_window("nights", (TimeRange("wednesday", 2, "wednesday", 6),)))
    e.component(Ec2Component).associate_window(window.window_id, instance_tags=(("Name", "db"),))
    [event] = schedule(e, "system-reboot", EBS, notice=timedelta(hours=1))
    assert (event.not_before.isoformat(), event.not_after.isoformat()) == (
        "2026-04-22T02:00:00+00:00",
        "2026-04-22T04:00:00+00:00",
    )
    assert event.not_before_deadline == event.not_before + timedelta(days=21)
    [network] = schedule(e, "system-maintenance", EBS, notice=timedelta(hours=1))
    assert network.not_before == T0 + timedelta(hours=1)  # windows do not apply to network maintenance
    [stop] = schedule(e, "instance-stop", EBS, notice=timedelta(days=1, hours=5))  # Wednesday 03:11: inside
    assert stop.not_before == T0 + timedelta(days=1, hours=5) and stop.not_after is None
    e.component(Ec2Component).modify_window(window.window_id, cron="* 10-14 * * 4")
    assert (
        e.component(Ec2Component).ec2_events[event.event_id].not_before == event.not_before
    )  # changing a window moves nothing


def test_notification_attributes_choose_the_tags_health_events_carry(tmp_path):
    from forewarn.aws.health.events import health_event
    from forewarn.aws.model import NotificationAttributes

    e = engine()
    e.component(Ec2Component).register_notification_attributes(keys=("Name",))
    instance = e.component(Ec2Component).ec2_instances[EBS]
    assert e.component(Ec2Component).notification_attributes.tags_of(instance) == {"Name": "db"}
    [event] = schedule(e, "system-reboot", EBS)
    message = health_event(
        event,
        instance,
        "scheduled",
        e.now,
        "s",
        "instance-id",
        e.component(Ec2Component).notification_attributes.tags_of(instance),
    )
    assert message["detail"]["affectedEntities"][0]["tags"] == {"Name": "db"}
    with pytest.raises(Invalid):
        e.component(Ec2Component).register_notification_attributes(include_all=True, keys=("x",))
    e.component(Ec2Component).deregister_notification_attributes()
    assert e.component(Ec2Component).notification_attributes == NotificationAttributes()
    service = Maintenance.open(open_store(str(tmp_path / "n.db")), parse_fleet(FLEET), "manual", 1.0, T0, "s")
    service.perform(lambda engine: engine.component(Ec2Component).register_notification_attributes(include_all=True))
    service.store.close()
    again = Maintenance.open(open_store(str(tmp_path / "n.db")), None, "manual", 1.0, None, None)
    assert again.settled_engine().component(Ec2Component).notification_attributes.include_all


def test_ids_that_are_not_events_are_never_reused_after_a_restart(tmp_path):
    """Windows and replacement instances take sequence numbers too; a restart must not hand them out again."""
    path = str(tmp_path / "seq.db")
    service = Maintenance.open(open_store(path), parse_fleet(FLEET), "manual", 1.0, T0, "seed")
    [first] = service.perform(
        lambda e: e.component(Ec2Component).create_window("a", (TimeRange("monday", 2, "monday", 8),))
    )
    service.store.close()
    again = Maintenance.open(open_store(path), None, "manual", 1.0, None, None)
    [second] = again.perform(
        lambda e: e.component(Ec2Component).create_window("b", (TimeRange("monday", 2, "monday", 8),))
    )
    assert first.window.window_id != second.window.window_id
    assert len(again.settled_engine().component(Ec2Component).ec2_windows) == 2
    again.store.close()
