"""The engine on its own: lifecycle, grouping, approvals, incarnations (no I/O)."""

from datetime import timedelta

import pytest

from forewarn.azure.changes import EventChanged, IncarnationChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventSource, EventStatus, EventType, ScheduleRequest
from forewarn.core.errors import Conflict, Invalid, NotFound
from forewarn.engine.engine import Engine
from helpers import T0, small_fleet

AVSET = "avset:00000000-0000-0000-0000-000000000000/forewarn-rg/westno"


def engine() -> Engine:
    return Engine(small_fleet(), seed="test", now=T0)


def test_seed_example_flow_two_vm_freeze():
    """The Scheduled Events overview and IMDS pages' example: one Freeze for WestNO_0 and WestNO_1, incarnation 1 -> 2 Scheduled -> 3 Started -> 4 []."""
    e = engine()
    assert e.component(AzureComponent).incarnation(AVSET) == 1 and e.component(AzureComponent).live_events(AVSET) == []
    e.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, vms=("WestNO_0", "WestNO_1")))
    [event] = e.component(AzureComponent).live_events(AVSET)
    assert e.component(AzureComponent).incarnation(AVSET) == 2
    assert event.resources == ("WestNO_0", "WestNO_1")
    assert event.status is EventStatus.SCHEDULED
    assert event.not_before == T0 + timedelta(minutes=15)
    assert event.event_id == event.event_id.upper() and len(event.event_id) == 36
    e.component(AzureComponent).approve([event.event_id], by="WestNO_1")
    [started] = e.component(AzureComponent).live_events(AVSET)
    assert (started.event_id, started.status, e.component(AzureComponent).incarnation(AVSET)) == (
        event.event_id,
        EventStatus.STARTED,
        3,
    )
    e.advance(T0 + timedelta(minutes=5))
    assert e.component(AzureComponent).live_events(AVSET) == [] and e.component(AzureComponent).incarnation(AVSET) == 4
    assert e.component(AzureComponent).event(event.event_id).status is EventStatus.COMPLETED


def test_not_before_starts_without_approval():
    e = engine()
    [changed, _] = e.component(AzureComponent).schedule(
        ScheduleRequest(EventType.REBOOT, vms=("solo",), notice=timedelta(minutes=1))
    )
    event_id = changed.event.event_id
    e.advance(T0 + timedelta(seconds=59))
    assert e.component(AzureComponent).event(event_id).status is EventStatus.SCHEDULED
    e.advance(T0 + timedelta(minutes=1))
    assert e.component(AzureComponent).event(event_id).status is EventStatus.STARTED
    assert e.component(AzureComponent).event(event_id).started_at == T0 + timedelta(minutes=1)
    e.advance(T0 + timedelta(minutes=11))
    assert e.component(AzureComponent).event(event_id).status is EventStatus.COMPLETED


def test_host_schedules_one_event_per_scope_and_waits_for_every_tenant():
    e = engine()
    changes = e.component(AzureComponent).schedule(ScheduleRequest(EventType.REBOOT, hosts=("host-02",)))
    events = [c.event for c in changes if isinstance(c, EventChanged)]
    assert sorted(ev.resources for ev in events) == [("WestNO_2",), ("other-tenant",), ("solo",)]
    assert len({ev.operation_id for ev in events}) == 1
    e.component(AzureComponent).approve([events[0].event_id], by="WestNO_2")
    e.component(AzureComponent).approve([events[1].event_id], by="solo")
    assert all(e.component(AzureComponent).event(ev.event_id).status is EventStatus.SCHEDULED for ev in events)
    e.component(AzureComponent).approve([events[2].event_id], by="other-tenant")
    assert all(e.component(AzureComponent).event(ev.event_id).status is EventStatus.STARTED for ev in events)


def test_vms_on_different_hosts_get_separate_events():
    e = engine()
    changes = e.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, vms=("WestNO_0", "WestNO_2")))
    events = [c.event for c in changes if isinstance(c, EventChanged)]
    assert [ev.resources for ev in events] == [("WestNO_0",), ("WestNO_2",)]
    assert events[0].operation_id != events[1].operation_id
    # Both are in the same scope: one command, one incarnation step.
    assert [c for c in changes if isinstance(c, IncarnationChanged)] == [IncarnationChanged(AVSET, 2)]
    e.component(AzureComponent).cancel(events[0].event_id)
    assert [ev.event_id for ev in e.component(AzureComponent).live_events(AVSET)] == [events[1].event_id]


def test_cancel_rules():
    e = engine()
    [changed, _] = e.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    event_id = changed.event.event_id
    e.component(AzureComponent).approve([event_id], by="control")
    with pytest.raises(Conflict, match="only Scheduled events can be canceled"):
        e.component(AzureComponent).cancel(event_id)
    with pytest.raises(NotFound):
        e.component(AzureComponent).cancel("00000000-0000-0000-0000-000000000000")


def test_refused_commands_change_nothing():
    e = engine()
    with pytest.raises(NotFound):
        e.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, vms=("solo", "nope")))
    with pytest.raises(NotFound):
        e.component(AzureComponent).approve(["nope"], by="x")
    with pytest.raises(Conflict):
        e.advance(T0 - timedelta(seconds=1))
    with pytest.raises(Invalid):
        e.component(AzureComponent).schedule(
            ScheduleRequest(EventType.FREEZE, vms=("solo",), notice=timedelta(seconds=-1))
        )
    assert e.component(AzureComponent).events == {} and e.component(AzureComponent).incarnations == {} and e.now == T0


def test_approval_of_started_or_gone_event_is_a_no_op():
    e = engine()
    [changed, _] = e.component(AzureComponent).schedule(
        ScheduleRequest(EventType.FREEZE, vms=("solo",), source=EventSource.USER)
    )
    event_id = changed.event.event_id
    e.component(AzureComponent).approve([event_id], by="solo")
    incarnation = e.component(AzureComponent).incarnation(changed.event.scope)
    assert e.component(AzureComponent).approve([event_id], by="solo") == []
    assert e.component(AzureComponent).incarnation(changed.event.scope) == incarnation


def test_scale_set_placement_group_is_one_scope():
    e = engine()
    e.component(AzureComponent).schedule(ScheduleRequest(EventType.REBOOT, vms=("myvmss_0", "myvmss_2")))
    scope = azure_fleet(e.fleet).vm("myvmss_1").scope
    [event] = e.component(AzureComponent).live_events(scope)
    assert event.resources == ("myvmss_0", "myvmss_2")


def test_next_deadline_and_zero_impact_window():
    e = engine()
    e.component(AzureComponent).schedule(
        ScheduleRequest(EventType.FREEZE, vms=("solo",), notice=timedelta(0), impact_window=timedelta(0))
    )
    scope = azure_fleet(e.fleet).vm("solo").scope
    assert e.next_deadline() == T0
    e.advance(T0)
    # Started and Completed at the same instant are two steps: two incarnations.
    assert e.component(AzureComponent).incarnation(scope) == 4 and e.component(AzureComponent).live_events(scope) == []
    assert e.next_deadline() is None


def test_a_vm_approves_only_the_events_of_its_scope():
    """The IMDS POST's rule, kept by the component: a VM approves what its scope sees; another scope's EventId (or
    none at all) is refused with nothing approved, or passed over, as the endpoint is configured."""
    e = engine()
    azure = e.component(AzureComponent)
    [theirs] = {
        c.event
        for c in azure.schedule(ScheduleRequest(EventType.FREEZE, vms=("WestNO_0",)))
        if isinstance(c, EventChanged)
    }
    [mine] = {
        c.event for c in azure.schedule(ScheduleRequest(EventType.REBOOT, vms=("solo",))) if isinstance(c, EventChanged)
    }
    solo = azure_fleet(e.fleet).vm("solo").scope
    assert azure.in_scope(solo, [mine.event_id, theirs.event_id, "NOPE"]) == (
        [mine.event_id],
        [theirs.event_id, "NOPE"],
    )
    with pytest.raises(NotFound, match=f"EventId {theirs.event_id} is not a scheduled event of this VM"):
        azure.check_approve_from(solo, [mine.event_id, theirs.event_id], reject_unseen=True)
    with pytest.raises(NotFound):
        azure.approve_from(solo, [mine.event_id, theirs.event_id], "solo", reject_unseen=True)
    assert azure.events[mine.event_id].status is EventStatus.SCHEDULED  # refused: nothing approved
    changes = azure.approve_from(solo, [mine.event_id, theirs.event_id], "solo", reject_unseen=False)
    assert {c.event.event_id for c in changes if isinstance(c, EventChanged)} == {mine.event_id}
    assert azure.events[mine.event_id].status is EventStatus.STARTED
    assert azure.events[theirs.event_id].status is EventStatus.SCHEDULED
