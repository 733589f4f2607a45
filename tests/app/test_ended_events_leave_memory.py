"""An Azure event that ended leaves the engine's memory once its end is committed, and every reader still finds it,
from the database: by EventId or a prefix of it, in the listing with ended events, by its number (ARM's operation
status), in a VM's approval (a no-op, not an unknown EventId), after a restart (which loads only live events). The
service in process, over a real SQLite file and a real PostgreSQL schema."""

from __future__ import annotations

from datetime import timedelta

import pytest

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.changes import EventChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.core.errors import NotFound
from forewarn.engine.engine import Engine
from helpers import T0, open_store, small_fleet


def azure(service: Maintenance) -> AzureComponent:
    return service.settled_engine().component(AzureComponent)


def test_an_ended_event_leaves_memory_and_is_read_from_the_database(store_url):
    service = Maintenance.open(open_store(store_url), small_fleet(), "manual", 1.0, T0, "seed")
    [ended] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    [canceled] = azure_commands.schedule(service, ScheduleRequest(EventType.REBOOT, vms=("WestNO_0",)))
    [live] = azure_commands.schedule(
        service, ScheduleRequest(EventType.REBOOT, vms=("WestNO_1",), notice=timedelta(days=1))
    )
    azure_commands.cancel(service, canceled.event_id)
    while azure(service).event(ended.event_id).status is not EventStatus.COMPLETED:
        service.step_clock()

    component = azure(service)
    assert ended.event_id not in component.events and canceled.event_id not in component.events
    assert live.event_id in component.events
    assert not component.operation_events(ended.operation_id)  # its operation is gone with it
    assert component.event(ended.event_id.lower()).status is EventStatus.COMPLETED
    assert component.find(canceled.event_id).status is EventStatus.CANCELED
    assert component.find("00000000-0000-0000-0000-000000000000") is None
    assert component.event_by_seq(ended.seq) == component.find(ended.event_id)
    assert component.resolve_event_id(ended.event_id[:8].lower()) == ended.event_id
    with pytest.raises(NotFound):
        component.resolve_event_id("ZZZZ")
    with pytest.raises(NotFound):
        component.resolve_event_id("%%%%")  # no LIKE pattern: the characters are themselves
    listed = [event.event_id for event in component.all_events()]
    assert listed == sorted([ended.event_id, canceled.event_id, live.event_id], key=lambda i: component.find(i).seq)

    # A VM approving its own ended event: nothing changes, and it is not an EventId the VM cannot see.
    def approval(scope: str, by: str):
        return lambda engine: engine.component(AzureComponent).approve_from(scope, [ended.event_id], by, True)

    assert service.perform(approval(ended.scope, "solo")) == []
    with pytest.raises(NotFound):
        service.perform(approval(live.scope, "WestNO_1"))
    service.store.close()

    # A restart loads the live events only; the ended ones are still read from the database.
    restarted = Maintenance.open(open_store(store_url), small_fleet(), "manual", 1.0, T0, "seed")
    component = azure(restarted)
    assert set(component.events) == {live.event_id}
    assert [event.event_id for event in component.all_events()] == listed
    assert component.event(canceled.event_id).status is EventStatus.CANCELED
    restarted.store.close()


def test_an_engine_committed_nowhere_keeps_every_event():
    engine = Engine(small_fleet(), seed="test", now=T0)
    changes = engine.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    [created] = [change.event for change in changes if isinstance(change, EventChanged)]
    engine.advance(T0 + timedelta(days=1))
    engine.release()
    assert engine.component(AzureComponent).events[created.event_id].status is EventStatus.COMPLETED
