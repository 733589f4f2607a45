"""The store interface, against SQLite and PostgreSQL alike, and the service on top of it."""

from dataclasses import dataclass
from datetime import timedelta

import pytest

import forewarn.store as forewarn_store
from forewarn.app.runtime import FleetMismatch, Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.azure.records import AZURE_RECORDS
from forewarn.core.changes import Change, Rebuilt
from forewarn.core.errors import Conflict
from forewarn.store import Records, SchemaTooNew, StoreError, UnregisteredChange
from forewarn.store.migrations import LATEST, MIGRATIONS
from helpers import T0, open_store, parse_fleet, small_fleet


class FakeWall:
    def __init__(self, start: float):
        self.value = start

    def __call__(self) -> float:
        return self.value


def open_manual(url, fleet=None):
    return Maintenance.open(open_store(url), fleet, "manual", 1.0, T0, "seed")


def test_round_trip_and_restart(store_url):
    service = open_manual(store_url, small_fleet())
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("WestNO_0", "WestNO_1")))
    azure_commands.approve(service, [event.event_id], by="WestNO_0")
    service.advance_clock(timedelta(minutes=1))
    service.store.close()

    again = open_manual(store_url)  # no fleet: the stored one is used
    assert again.settled_engine().fleet == small_fleet()
    restored = again.settled_engine().component(AzureComponent).event(event.event_id)
    assert restored.status is EventStatus.STARTED and restored.approvals == ("WestNO_0",)
    assert again.settled_engine().component(AzureComponent).incarnation(event.scope) == 3
    assert again.now() == T0 + timedelta(minutes=1)
    again.advance_clock(timedelta(minutes=5))
    assert again.settled_engine().component(AzureComponent).event(event.event_id).status is EventStatus.COMPLETED
    assert [entry.kind for entry in again.store.journal(event.event_id)] == [
        "scheduled",
        "approved",
        "started",
        "completed",
    ]
    again.store.close()


def test_refuses_a_different_fleet(store_url):
    open_manual(store_url, small_fleet()).store.close()
    other = parse_fleet("vms: [{name: lonely}]")
    with pytest.raises(FleetMismatch):
        open_manual(store_url, other)


def test_empty_store_needs_a_fleet(store_url):
    with pytest.raises(FleetMismatch, match="give a fleet file"):
        open_manual(store_url)


def test_deadlines_passed_while_down_are_applied_in_order_at_start(store_url):
    wall = FakeWall(1_000_000.0)
    service = Maintenance.open(open_store(store_url), small_fleet(), "real", 1.0, T0, "seed", wall=wall)
    [first] = azure_commands.schedule(
        service, ScheduleRequest(EventType.FREEZE, vms=("solo",), notice=timedelta(minutes=1))
    )
    wall.value += 30
    [second] = azure_commands.schedule(
        service, ScheduleRequest(EventType.REBOOT, vms=("solo",), notice=timedelta(minutes=1))
    )
    service.store.close()

    wall.value += 3600  # down for an hour
    again = Maintenance.open(open_store(store_url), None, "real", 1.0, None, None, wall=wall)
    for event_id in (first.event_id, second.event_id):
        assert again.settled_engine().component(AzureComponent).event(event_id).status is EventStatus.COMPLETED
    kinds = [(entry.event_id, entry.kind, entry.at) for entry in again.store.journal() if entry.event_id]
    ordered = [(event_id, kind) for event_id, kind, _ in kinds]
    assert ordered == [
        (first.event_id, "scheduled"),
        (second.event_id, "scheduled"),
        (first.event_id, "started"),
        (second.event_id, "started"),
        (first.event_id, "completed"),
        (second.event_id, "completed"),
    ]
    assert [at for *_, at in kinds] == sorted(at for *_, at in kinds)
    # 1 -> 2 (first) -> 3 (second) -> 4, 5 (starts) -> 6, 7 (completions), one step per instant
    assert again.settled_engine().component(AzureComponent).incarnation(first.scope) == 7
    again.store.close()


def test_sped_up_clock_continues_across_restart(store_url):
    wall = FakeWall(2_000_000.0)
    service = Maintenance.open(open_store(store_url), small_fleet(), "real", 60.0, T0, "seed", wall=wall)
    wall.value += 10
    assert service.now() == T0 + timedelta(minutes=10)
    service.store.close()
    wall.value += 5
    again = Maintenance.open(open_store(store_url), None, "real", 60.0, None, None, wall=wall)
    assert again.now() == T0 + timedelta(minutes=15)
    # A new speed continues from the same simulated time.
    again.store.close()
    slower = Maintenance.open(open_store(store_url), None, "real", 1.0, None, None, wall=wall)
    wall.value += 60
    assert slower.now() == T0 + timedelta(minutes=16)
    slower.store.close()


def test_manual_clock_cannot_go_backwards(store_url):
    service = open_manual(store_url, small_fleet())
    with pytest.raises(Conflict):
        service.set_clock(T0 - timedelta(seconds=1))
    service.store.close()


def test_failed_commit_leaves_memory_as_the_database(tmp_path):
    service = open_manual(str(tmp_path / "s.db"), small_fleet())
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    service.store.commit = broken
    with pytest.raises(RuntimeError):
        azure_commands.approve(service, [event.event_id], by="solo")
    del service.store.commit
    assert service.settled_engine().component(AzureComponent).event(event.event_id).approvals == ()
    assert service.settled_engine().component(AzureComponent).incarnation(event.scope) == 2


def test_listeners_hear_of_changes_and_of_rebuilds_but_not_of_commands_that_changed_nothing(store_url):
    service = open_manual(store_url, small_fleet())
    heard: list[list] = []
    service.subscribe(heard.append)
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    azure_commands.approve(service, [event.event_id], by="solo")
    assert len(heard) == 2 and all(heard)
    azure_commands.approve(service, [event.event_id], by="solo")  # already Started: nothing changes
    assert len(heard) == 2
    service._rebuild(RuntimeError("simulated"))
    assert len(heard[-1]) == 1 and isinstance(heard[-1][0], Rebuilt)
    service.store.close()


# ------------------------------------------------------------------------------------------- writers and schema
def _raw(url):
    """A plain connection to the store's database, to make databases the way older releases left them."""
    if url.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(url)
    import sqlite3

    return sqlite3.connect(url)


def _stored_version(url) -> str:
    connection = _raw(url)
    try:
        return connection.execute("SELECT value FROM forewarn_meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        connection.close()


def test_a_new_database_is_at_the_latest_schema_version(store_url):
    open_store(store_url).close()
    assert _stored_version(store_url) == str(LATEST) == str(MIGRATIONS[-1].version)
    open_store(store_url).close()  # migrating again changes nothing
    assert _stored_version(store_url) == str(LATEST)


def test_records_that_bring_their_schema_have_their_tables_made_on_every_open(store_url):
    """A cloud kept outside forewarn (no numbered migration knows its tables) creates them through its records."""
    table = "forewarn_extra_rows"
    extra = Records("extra", [], schema=(f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY)",))
    forewarn_store.open_store(store_url, [extra]).close()
    connection = _raw(store_url)
    try:
        connection.execute(f"INSERT INTO {table} (key) VALUES ('kept')")
        connection.commit()
    finally:
        connection.close()

    forewarn_store.open_store(store_url, [extra]).close()  # a table already there stays as it is

    connection = _raw(store_url)
    try:
        assert connection.execute(f"SELECT key FROM {table}").fetchall() == [("kept",)]
    finally:
        connection.close()
    assert _stored_version(store_url) == str(LATEST)  # no migration of forewarn's ran for it


def test_an_old_version_database_is_migrated_and_keeps_its_state(store_url):
    service = open_manual(store_url, small_fleet())
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    service.store.close()
    # As a version-1 database of a release before outbox deliveries had a kind and a detail: the outbox lacks the
    # two columns, and holds a pending delivery.
    connection = _raw(store_url)
    connection.execute("DROP TABLE forewarn_outbox")
    connection.execute(
        "CREATE TABLE forewarn_outbox (id INTEGER PRIMARY KEY, target TEXT NOT NULL, payload TEXT NOT NULL, "
        "status TEXT NOT NULL, attempts INTEGER NOT NULL, next_at TEXT NOT NULL, expires_at TEXT NOT NULL, "
        "last_error TEXT, created_at TEXT NOT NULL)"
    )
    connection.execute(
        "INSERT INTO forewarn_outbox VALUES (1, 'http://127.0.0.1:9/hook', '{}', 'pending', 0, "
        f"'{T0.isoformat()}', '{(T0 + timedelta(days=1)).isoformat()}', NULL, '{T0.isoformat()}')"
    )
    connection.execute("UPDATE forewarn_meta SET value = '1' WHERE key = 'schema_version'")
    connection.commit()
    connection.close()

    again = open_manual(store_url)
    assert _stored_version(store_url) == str(LATEST)
    [delivery] = again.store.due_deliveries(T0)
    assert (delivery.target, delivery.kind, delivery.detail) == ("http://127.0.0.1:9/hook", "webhook", None)
    assert again.settled_engine().component(AzureComponent).event(event.event_id).status is EventStatus.SCHEDULED
    azure_commands.approve(again, [event.event_id], by="solo")  # and it takes writes
    again.store.close()


def test_a_database_newer_than_the_code_is_refused(store_url):
    open_manual(store_url, small_fleet()).store.close()
    connection = _raw(store_url)
    connection.execute(f"UPDATE forewarn_meta SET value = '{LATEST + 1}' WHERE key = 'schema_version'")
    connection.commit()
    connection.close()
    with pytest.raises(SchemaTooNew) as refused:
        open_store(store_url)
    assert f"schema version {LATEST + 1}, newer than this forewarn knows (up to {LATEST})" in str(refused.value)
    assert isinstance(refused.value, StoreError)  # the CLI prints it as one line
    assert _stored_version(store_url) == str(LATEST + 1)  # left as it was


def test_a_store_open_before_a_newer_migration_refuses_to_load_the_state_after_it(store_url):
    """A replica loads the whole state again at the reset entry a migration leaves in forewarn_changes; one older
    than the migration must stop there, not follow entries whose keys it would misread (events by number, 13)."""
    open_manual(store_url, small_fleet()).store.close()
    store = open_store(store_url)
    try:
        assert store.load() is not None
        connection = _raw(store_url)
        connection.execute(f"UPDATE forewarn_meta SET value = '{LATEST + 1}' WHERE key = 'schema_version'")
        connection.commit()
        connection.close()
        with pytest.raises(SchemaTooNew, match=f"schema version {LATEST + 1}, newer than this forewarn knows"):
            store.load()
    finally:
        store.close()


@dataclass(frozen=True)
class Unwritten(Change):
    """A kind of change no component registered a writer for."""


def test_a_change_with_no_writer_fails_its_commit_and_the_engine_is_rebuilt(store_url):
    service = open_manual(store_url, small_fleet())
    heard: list[list] = []
    service.subscribe(heard.append)
    with pytest.raises(UnregisteredChange, match=r"no store writer for (\w+\.)*test_store\.Unwritten"):
        service.perform(
            lambda engine: [
                *engine.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, vms=("solo",))),
                Unwritten(),
            ]
        )
    assert (
        service.settled_engine().component(AzureComponent).events == {}
    )  # nothing half-applied: the scheduled event was not committed
    assert [type(change) for changes in heard for change in changes] == [Rebuilt]
    service.store.close()


def test_a_store_opened_without_a_component_refuses_its_changes(tmp_path):
    store = forewarn_store.open_store(str(tmp_path / "bare.db"), [])
    service = Maintenance.open(store, small_fleet(), "manual", 1.0, T0, "seed")
    with pytest.raises(UnregisteredChange, match="EventChanged"):
        azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    store.close()


def test_two_writers_for_one_kind_of_change_are_refused(tmp_path):
    with pytest.raises(ValueError, match="two writers for EventChanged: azure and azure"):
        forewarn_store.open_store(str(tmp_path / "twice.db"), [AZURE_RECORDS, AZURE_RECORDS])
