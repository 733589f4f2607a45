"""Migration 13: Azure's events keyed by their number, with no index of EventIds, on SQLite and PostgreSQL.

New EventIds give their number back (core/ids.py's NumberedGuids), so the database finds an event by number. A
database written before holds EventIds that were hashes: they are kept in ``forewarn_azure_event_ids``, and each of
those events is found by its EventId, its prefix and its number as before.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest

import forewarn.store as forewarn_store
from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent, event_numbering
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.core.ids import derived_guid
from forewarn.store import migrations
from helpers import T0, open_store, raw_connection, small_fleet

AZURE_TABLES = [
    "forewarn_azure_events",
    "forewarn_azure_scopes",
    "forewarn_azure_vms",
    "forewarn_azure_policies",
    "forewarn_azure_enabled",
    "forewarn_meta",
]


def _at_version_12(url, monkeypatch) -> None:
    with monkeypatch.context() as older:
        older.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:12])
        older.setattr(migrations, "LATEST", 12)
        forewarn_store.open_store(url, []).close()


def _served(path: str) -> dict[str, int]:
    """A server's Azure state (a Scheduled event, a Started one, a Completed one): their numbers by EventId."""
    service = Maintenance.open(open_store(path), small_fleet(), "manual", 1.0, T0, "seed")
    schedule = azure_commands.schedule
    [frozen] = schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    [reboot] = schedule(service, ScheduleRequest(EventType.REBOOT, vms=("WestNO_0",)))
    [ended] = schedule(service, ScheduleRequest(EventType.REDEPLOY, vms=("other-tenant",)))
    azure_commands.approve(service, [reboot.event_id], by="WestNO_0")
    azure_commands.cancel(service, ended.event_id)
    service.advance_clock(timedelta(minutes=1))
    service.store.close()
    return {event.event_id: event.seq for event in (frozen, reboot, ended)}


def _copy_with_hashed_ids(source: str, url: str, numbers: dict[str, int]) -> dict[str, str]:
    """The rows of ``source`` into the version-12 database ``url``, each EventId replaced by the hash the versions
    before 13 made it with: the hashed id of each new one."""
    hashed = {event_id: derived_guid("seed", "event", seq) for event_id, seq in numbers.items()}
    reading = sqlite3.connect(source)
    writing = raw_connection(url)
    mark = "%s" if url.startswith("postgresql://") else "?"
    try:
        for table in AZURE_TABLES:
            cursor = reading.execute(f"SELECT * FROM {table}")
            columns = [column[0] for column in cursor.description]
            for row in cursor.fetchall():
                if row[0] == "schema_version":
                    continue
                values = [_rewritten(value, hashed) for value in row]
                marks = ", ".join(mark for _ in columns)
                writing.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", values)
    finally:
        reading.close()
        writing.close()
    return hashed


def _rewritten(value, hashed: dict[str, str]):
    if isinstance(value, str):
        for new, old in hashed.items():
            value = value.replace(new, old)
    return value


def _indexes(url) -> list[str]:
    connection = raw_connection(url)
    try:
        if url.startswith("postgresql://"):
            query = "SELECT indexdef FROM pg_indexes WHERE tablename = 'forewarn_azure_events' AND schemaname = current_schema()"
        else:
            query = "SELECT name FROM pragma_index_list('forewarn_azure_events')"
        return [row[0] for row in connection.execute(query).fetchall()]
    finally:
        connection.close()


def test_events_written_before_keep_their_event_ids_and_new_ones_give_their_number_back(
    store_url, tmp_path, monkeypatch
):
    source = str(tmp_path / "source.db")
    numbers = _served(source)
    _at_version_12(store_url, monkeypatch)
    hashed = _copy_with_hashed_ids(source, store_url, numbers)
    old_ids = {old: numbers[new] for new, old in hashed.items()}

    service = Maintenance.open(open_store(store_url), None, "manual", 1.0, T0, "seed")
    azure = service.settled_engine().component(AzureComponent)
    # One index only, the key's, on the number: SQLite's rowid (no index at all), PostgreSQL's primary key.
    if store_url.startswith("postgresql://"):
        [index] = _indexes(store_url)
        assert index.endswith("USING btree (seq)")
    else:
        assert _indexes(store_url) == []
    statuses = {event_id: azure.event(event_id).status for event_id in old_ids}
    assert sorted(statuses.values()) == sorted([EventStatus.SCHEDULED, EventStatus.STARTED, EventStatus.CANCELED])
    for event_id, seq in old_ids.items():
        assert azure.resolve_event_id(event_id[:9].lower()) == event_id
        found = azure.event_by_seq(seq)
        assert found is not None and found.event_id == event_id

    # An old event that ends leaves memory, and is still found by its EventId, its prefix and its number.
    [scheduled] = [event_id for event_id, status in statuses.items() if status is EventStatus.SCHEDULED]
    azure_commands.cancel(service, scheduled)
    azure = service.settled_engine().component(AzureComponent)
    assert scheduled not in azure.events
    assert azure.event(scheduled).status is EventStatus.CANCELED
    assert azure.resolve_event_id(scheduled[:6]) == scheduled
    assert azure.event_by_seq(old_ids[scheduled]) == azure.event(scheduled)

    # A new event's EventId is its number's; ended, it is read back by that number.
    [later] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    assert later.event_id == event_numbering("seed").guid(later.seq)
    azure_commands.cancel(service, later.event_id)
    azure = service.settled_engine().component(AzureComponent)
    assert later.event_id not in azure.events and azure.event(later.event_id.lower()).seq == later.seq
    service.store.close()

    # A reset empties the EventIds kept from before with the events they named.
    again = Maintenance.open(open_store(store_url), None, "manual", 1.0, T0, "seed")
    again.reset()
    connection = raw_connection(store_url)
    try:
        assert connection.execute(f"SELECT COUNT(*) FROM {migrations.AZURE_EVENT_IDS}").fetchone()[0] == 0
    finally:
        connection.close()
    with pytest.raises(Exception, match="no event"):
        again.settled_engine().component(AzureComponent).event(scheduled)
    again.store.close()


def test_a_new_database_keeps_no_event_ids_beside_its_events(store_url):
    service = Maintenance.open(open_store(store_url), small_fleet(), "manual", 1.0, T0, "seed")
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    azure_commands.cancel(service, event.event_id)
    service.store.close()
    connection = raw_connection(store_url)
    try:
        assert connection.execute(f"SELECT COUNT(*) FROM {migrations.AZURE_EVENT_IDS}").fetchone()[0] == 0
        assert connection.execute("SELECT seq, event_id FROM forewarn_azure_events").fetchall() == [
            (event.seq, event.event_id)
        ]
    finally:
        connection.close()
