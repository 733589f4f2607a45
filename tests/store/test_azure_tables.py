"""Migration 8: Azure's state tables get its prefix (``forewarn_azure_*``), in place, on SQLite and PostgreSQL.

A database as version 7 left it (migrations 1 to 7, holding rows a server wrote in every Azure table, under the old
names) is opened by this version: the engine holds the same state as before, the replicas' journal that named the
old tables is reset, and the migration runs only while no other process holds the writer's lock.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import timedelta

import pytest

import forewarn.store as forewarn_store
from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.store import DatabaseInUse, base, migrations
from helpers import T0, open_store, raw_connection, small_fleet

OLD_NAMES = ["forewarn_events", "forewarn_scopes", "forewarn_vms", "forewarn_policies", "forewarn_enabled"]
NEW_NAMES = [name.replace("forewarn_", "forewarn_azure_") for name in OLD_NAMES]
AZURE_RENAMES = list(zip(OLD_NAMES, NEW_NAMES, strict=True))


def _marker(url) -> str:
    return "%s" if url.startswith("postgresql://") else "?"


def _at_version_7(url, monkeypatch) -> None:
    """An empty database as version 7 left it: the released migrations 1 to 7, and nothing after them."""
    with monkeypatch.context() as older:
        older.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:7])
        older.setattr(migrations, "LATEST", 7)
        forewarn_store.open_store(url, []).close()


def _served(path: str) -> Maintenance:
    """A server's state with rows in every Azure table: events and their scopes' incarnations, VM states, a
    policy, an enabled scope."""
    service = Maintenance.open(open_store(path), small_fleet(), "manual", 1.0, T0, "seed")
    [frozen] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    [reboot] = azure_commands.schedule(service, ScheduleRequest(EventType.REBOOT, vms=("WestNO_0",)))
    azure_commands.approve(service, [reboot.event_id], by="WestNO_0")  # started: the VM is impacted
    service.perform(lambda engine: engine.component(AzureComponent).update_policy("myvmss", auto_approve_reboot=True))
    service.perform(lambda engine: engine.component(AzureComponent).request_seen(frozen.scope))
    service.advance_clock(timedelta(minutes=1))
    return service


def _copy_as_version_7(source: str, url: str) -> None:
    """Every Azure row and meta value of the SQLite database ``source`` into the version-7 database ``url``, under
    the names version 7 gave the tables."""
    reading = sqlite3.connect(source)
    writing = raw_connection(url)
    mark = _marker(url)
    try:
        for old, new in [*AZURE_RENAMES, ("forewarn_meta", "forewarn_meta")]:
            cursor = reading.execute(f"SELECT * FROM {new}")
            columns = [column[0] for column in cursor.description]
            rows = [row for row in cursor.fetchall() if row[0] != "schema_version"]
            assert rows, f"the source wrote nothing in {new}"
            marks = ", ".join(mark for _ in columns)
            for row in rows:
                writing.execute(f"INSERT INTO {old} ({', '.join(columns)}) VALUES ({marks})", row)
    finally:
        reading.close()
        writing.close()


def _tables(url) -> set[str]:
    connection = raw_connection(url)
    try:
        if url.startswith("postgresql://"):
            query = "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
        else:
            query = "SELECT name FROM sqlite_master"
        return {row[0] for row in connection.execute(query).fetchall()}
    finally:
        connection.close()


def _version(url) -> str:
    connection = raw_connection(url)
    try:
        return connection.execute("SELECT value FROM forewarn_meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        connection.close()


def _azure(service: Maintenance) -> tuple:
    azure = service.settled_engine().component(AzureComponent)
    return azure.events, azure.incarnations, azure.vm_states, azure.policies, azure.last_seen


def test_a_version_7_database_is_upgraded_in_place_and_the_engine_holds_the_same_state(
    store_url, tmp_path, monkeypatch
):
    source = str(tmp_path / "source.db")
    _served(source).store.close()
    before = Maintenance.open(open_store(source), None, "manual", 1.0, T0, "seed")  # the state as loaded
    _at_version_7(store_url, monkeypatch)
    _copy_as_version_7(source, store_url)
    assert set(OLD_NAMES) <= _tables(store_url) and not set(NEW_NAMES) & _tables(store_url)

    after = Maintenance.open(open_store(store_url), None, "manual", 1.0, T0, "seed")
    assert _version(store_url) == str(migrations.LATEST)
    tables = _tables(store_url)
    assert set(NEW_NAMES) <= tables and not set(OLD_NAMES) & tables
    # Keys and indexes carry the new names (PostgreSQL's primary keys keep the old table's name unless renamed).
    assert not [name for name in tables if any(old in name for old in OLD_NAMES)]
    assert after.settled_engine().now == before.settled_engine().now
    assert _azure(after) == _azure(before)
    statuses = sorted(event.status for event in after.settled_engine().component(AzureComponent).events.values())
    assert statuses == sorted([EventStatus.SCHEDULED, EventStatus.STARTED])
    # And it takes writes, which the next start reads back.
    [later] = azure_commands.schedule(after, ScheduleRequest(EventType.REDEPLOY, vms=("other-tenant",)))
    after.store.close()
    again = Maintenance.open(open_store(store_url), None, "manual", 1.0, T0, "seed")
    assert again.settled_engine().component(AzureComponent).event(later.event_id).status is EventStatus.SCHEDULED
    again.store.close()
    before.store.close()


def test_the_journal_that_named_the_old_tables_is_reset_and_later_commits_name_the_new_ones(
    store_url, tmp_path, monkeypatch
):
    source = str(tmp_path / "source.db")
    _served(source).store.close()
    _at_version_7(store_url, monkeypatch)
    _copy_as_version_7(source, store_url)
    # A shared leader's journal as version 7 wrote it: positions 1 to 3, naming the old tables.
    connection = raw_connection(store_url)
    mark = _marker(store_url)
    for position in (1, 2, 3):
        connection.execute(
            f"INSERT INTO forewarn_changes (position, written_ms, keys) VALUES ({mark}, 0, {mark})",
            (position, '{"forewarn_events":["X"],"forewarn_scopes":["Y"],"forewarn_meta":["now"]}'),
        )
    connection.close()

    store = open_store(store_url)
    try:
        connection = raw_connection(store_url)
        journal = connection.execute("SELECT position, keys FROM forewarn_changes ORDER BY position").fetchall()
        connection.close()
        # Migration 8 reset it at 4, and migration 13 (events by number) again at 5.
        assert [tuple(row) for row in journal] == [(5, '{"reset":[]}')]
        # A replica that had followed the journal up to any position before it loads the whole state (None).
        for position in (0, 2, 3, 4):
            assert store.changes_since(position) is None
        assert store.load().position == 5
        # Later commits of a shared leader name the new tables, which a replica at 5 reads back.
        store.keeps_changes = True
        service = Maintenance.open(store, None, "manual", 1.0, T0, "seed")
        [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("spotty",)))
        changed = store.changes_since(5)
        assert changed is not None and changed.position == 6
        assert str(event.seq) in changed.touched["forewarn_azure_events"]
        assert event.event_id in {found.event_id for found in changed.records["azure"].events.values() if found}
    finally:
        store.close()


def test_a_database_without_journal_entries_keeps_none(store_url, monkeypatch):
    _at_version_7(store_url, monkeypatch)
    open_store(store_url).close()
    connection = raw_connection(store_url)
    try:
        assert connection.execute("SELECT COUNT(*) FROM forewarn_changes").fetchone()[0] == 0
    finally:
        connection.close()


# ------------------------------------------------------------------------------- not under a running writer
def _hold_as_an_older_leader(url):
    """A session that holds the writer's lock and published itself as a shared leader, as an older forewarn's
    leader does (store/writer.py): its connection, open until closed."""
    import psycopg

    from forewarn.store import writer

    connection = psycopg.connect(url, autocommit=True)
    key = writer.lock_key(connection)
    assert writer.try_take(connection, key)
    connection.execute(
        "INSERT INTO forewarn_leader (id, node, term, position, addresses, store_pid, since, role, lock_pid) "
        "VALUES (1, 'older-host:4242', 3, 0, '{}', pg_backend_pid(), '2026-04-20T22:00:00+00:00', 'leader', "
        "pg_backend_pid())"
    )
    return connection


def test_a_database_an_older_leader_writes_to_is_not_migrated_and_the_refusal_names_it(
    postgres_url, tmp_path, monkeypatch
):
    source = str(tmp_path / "source.db")
    _served(source).store.close()
    _at_version_7(postgres_url, monkeypatch)
    _copy_as_version_7(source, postgres_url)
    older = _hold_as_an_older_leader(postgres_url)
    monkeypatch.setattr(base, "MIGRATION_WAIT", 1.0)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseInUse) as refused:
            open_store(postgres_url)
        waited = time.monotonic() - started
        message = str(refused.value)
        assert (
            f"the database has schema version 7, which this forewarn migrates to {migrations.LATEST} only while no "
            "other " in message
        )
        assert "(a forewarn server (role leader, older-host:4242, since 2026-04-20T22:00:00+00:00;" in message
        assert "stop it and its replicas" in message
        assert waited >= 1.0
        # Left as it was: what the older leader reads and writes is where it was.
        assert _version(postgres_url) == "7"
        assert set(OLD_NAMES) <= _tables(postgres_url) and not set(NEW_NAMES) & _tables(postgres_url)
    finally:
        older.close()
    # Once it has stopped, the next start migrates.
    open_store(postgres_url).close()
    assert _version(postgres_url) == str(migrations.LATEST)


def test_a_start_waits_for_another_process_migrating_the_same_database(postgres_url, monkeypatch):
    _at_version_7(postgres_url, monkeypatch)
    holding = _hold_as_an_older_leader(postgres_url)
    # The holder goes 1 s after the start began (one migrating, say, then leading with the new tables): the start
    # waits for it (MIGRATION_WAIT, 10 s, bounds the wait), then migrates.
    release = threading.Timer(1.0, holding.close)
    started = time.monotonic()
    release.start()
    try:
        open_store(postgres_url).close()
    finally:
        release.join()
    assert time.monotonic() - started >= 1.0
    assert _version(postgres_url) == str(migrations.LATEST)
