"""A SQLite file is read by a connection of its own beside the writer's: a long read in a thread (an event's journal,
every ended event) holds up no commit, and a commit under way holds up no read, which sees the last commit."""

from __future__ import annotations

import threading

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.model import EventType, ScheduleRequest
from helpers import T0, open_store, small_fleet


def test_a_read_runs_while_the_writer_holds_its_connection_and_sees_the_last_commit(tmp_path):
    service = Maintenance.open(open_store(str(tmp_path / "odd name #1?.db")), small_fleet(), "manual", 1.0, T0, "s")
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    store = service.store
    answers: list = []
    with store.guard:  # the writer's connection is busy (a commit under way holds it so)
        reader = threading.Thread(target=lambda: answers.append(store.journal(event.event_id)))
        reader.start()
        reader.join(5)
        assert not reader.is_alive(), "the read waited for the writer"
    assert [entry.kind for entry in answers[0]] == ["scheduled"]
    assert store.read("SELECT event_id FROM forewarn_azure_events", ()) == [(event.event_id,)]
    store.close()


def test_an_in_memory_database_is_read_on_its_one_connection():
    service = Maintenance.open(open_store(":memory:"), small_fleet(), "manual", 1.0, T0, "s")
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    assert service.store.read("SELECT event_id FROM forewarn_azure_events", ()) == [(event.event_id,)]
    service.store.close()
