"""The schema, as numbered migrations: a store is brought from the version it records (``schema_version`` in
``forewarn_meta``) to the newest one, in order, in one transaction, on SQLite and PostgreSQL alike.

A database whose version is newer than this code knows is refused (:class:`SchemaTooNew`): this code would not know
what the later migrations changed. To change the schema, append a migration with the next number; never edit one
that has been released, since databases already record that it ran.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from forewarn.store.errors import SchemaTooNew

OUTBOX_KIND_COLUMN = "kind TEXT NOT NULL DEFAULT 'webhook'"  # which sending policy delivers a message
OUTBOX_DETAIL_COLUMN = (
    "detail TEXT"  # state a policy keeps beyond attempts and errors (JSON), e.g. a dead-letter reason
)
VERSION_KEY = "schema_version"
RESET = "reset"  # a forewarn_changes entry's key: everything changed, a replica loads the whole state again
# Azure's state tables, each cloud's tables bearing its prefix as EC2's (forewarn_ec2_*) and Compute Engine's
# (forewarn_gce_*) do: the names migration 1 gave them, and those migration 8 gives them.
AZURE_RENAMES = (
    ("forewarn_events", "forewarn_azure_events"),
    ("forewarn_scopes", "forewarn_azure_scopes"),
    ("forewarn_vms", "forewarn_azure_vms"),
    ("forewarn_policies", "forewarn_azure_policies"),
    ("forewarn_enabled", "forewarn_azure_enabled"),
)


@dataclass(frozen=True)
class Dialect:
    """The DDL differences between the databases."""

    name: str
    identity_key: str  # an auto-numbered primary key column's type


@dataclass(frozen=True)
class Migration:
    version: int
    summary: str
    apply: Callable[[Any, Dialect], None]  # (an open cursor in the migrating transaction, the database's dialect)


def _tables(cursor: Any, dialect: Dialect) -> None:
    for statement in (
        "CREATE TABLE IF NOT EXISTS forewarn_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_events (event_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
        "scope TEXT NOT NULL, status TEXT NOT NULL, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_scopes (scope TEXT PRIMARY KEY, incarnation BIGINT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_vms (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_policies (owner TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_enabled (scope TEXT PRIMARY KEY, at TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_ec2_events (event_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
        "instance_id TEXT NOT NULL, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_ec2_instances (instance_id TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_ec2_windows (window_id TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_waves (wave_id TEXT PRIMARY KEY, plan TEXT NOT NULL, "
        "progress TEXT NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS forewarn_outbox (id {dialect.identity_key}, target TEXT NOT NULL, "
        "payload TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL, next_at TEXT NOT NULL, "
        "expires_at TEXT NOT NULL, last_error TEXT, created_at TEXT NOT NULL, "
        f"{OUTBOX_KIND_COLUMN}, {OUTBOX_DETAIL_COLUMN})",
        "CREATE INDEX IF NOT EXISTS forewarn_outbox_due ON forewarn_outbox (status, next_at)",
        # Event Grid system topics and event subscriptions (azure/eventgrid/registry.py), as JSON records.
        "CREATE TABLE IF NOT EXISTS forewarn_eventgrid_topics (topic_key TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_eventgrid_subscriptions (subscription_key TEXT PRIMARY KEY, "
        "topic_key TEXT NOT NULL, data TEXT NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS forewarn_journal (seq {dialect.identity_key}, at TEXT NOT NULL, "
        "kind TEXT NOT NULL, event_id TEXT, detail TEXT NOT NULL)",
    ):
        cursor.execute(statement)


def _outbox_kind_and_detail(cursor: Any, dialect: Dialect) -> None:
    # Both databases accept ADD COLUMN with a constant default; cursor.description names the columns on both.
    cursor.execute("SELECT * FROM forewarn_outbox WHERE 1 = 0")
    columns = {column[0].lower() for column in cursor.description}
    for name, definition in (("kind", OUTBOX_KIND_COLUMN), ("detail", OUTBOX_DETAIL_COLUMN)):
        if name not in columns:
            cursor.execute(f"ALTER TABLE forewarn_outbox ADD COLUMN {definition}")


def _gce_tables(cursor: Any, dialect: Dialect) -> None:
    for statement in (
        "CREATE TABLE IF NOT EXISTS forewarn_gce_events (event_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
        "instance TEXT NOT NULL, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_gce_instances (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
    ):
        cursor.execute(statement)


def _leader(cursor: Any, dialect: Dialect) -> None:
    # One row at most: the process that leads a shared PostgreSQL database (replication/), where the others reach
    # it, and the position it has published (bumped after each commit). SQLite gets the table too and never uses it.
    cursor.execute(
        "CREATE TABLE IF NOT EXISTS forewarn_leader (id INTEGER PRIMARY KEY CHECK (id = 1), node TEXT NOT NULL, "
        "term BIGINT NOT NULL, position BIGINT NOT NULL, addresses TEXT NOT NULL, store_pid BIGINT, "
        "since TEXT NOT NULL)"
    )


def _changes(cursor: Any, dialect: Dialect) -> None:
    # What each commit of a shared leader changed, for the replicas (replication/): a position given in the commit's
    # own transaction (one more than the last: gap-free, in commit order), when it was written (milliseconds since
    # the epoch, for pruning), and the rows it wrote, named by table and key (JSON). Only shared processes write it.
    cursor.execute(
        "CREATE TABLE IF NOT EXISTS forewarn_changes (position BIGINT PRIMARY KEY, written_ms BIGINT NOT NULL, "
        "keys TEXT NOT NULL)"
    )


def _fleet_in_columns(cursor: Any, dialect: Dialect) -> None:
    # No table changes: from this version the fleet's record in forewarn_meta may be in columns (fleet format 2, with
    # its digest beside it), which releases before it would misread. Records of the old format stay readable.
    return None


def _writer_columns(cursor: Any, dialect: Dialect) -> None:
    # Who holds the writer's lock (store/writer.py): the row's process is a single server or a shared leader
    # (NULL: a leader written before roles were recorded), and the backend that holds the lock, so that a process
    # refused the lock can name the holder.
    cursor.execute("SELECT * FROM forewarn_leader WHERE 1 = 0")
    columns = {column[0].lower() for column in cursor.description}
    for name, definition in (("role", "role TEXT"), ("lock_pid", "lock_pid BIGINT")):
        if name not in columns:
            cursor.execute(f"ALTER TABLE forewarn_leader ADD COLUMN {definition}")


def _azure_prefix(cursor: Any, dialect: Dialect) -> None:
    for old, new in AZURE_RENAMES:
        # Each table there under its old name (one whose recorded version was lowered by hand may be renamed already;
        # one there under both names is refused by the database, naming it).
        if _table_exists(cursor, dialect, old):
            cursor.execute(f"ALTER TABLE {old} RENAME TO {new}")
        if dialect.name == "postgresql":
            _rename_primary_key(cursor, new)
    _reset_the_changes(cursor)


def _table_exists(cursor: Any, dialect: Dialect, table: str) -> bool:
    if dialect.name == "postgresql":
        cursor.execute(f"SELECT to_regclass('{table}')")  # in the schema the connection's search_path selects
        return cursor.fetchone()[0] is not None
    cursor.execute(f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{table}'")
    return cursor.fetchone() is not None


def _rename_primary_key(cursor: Any, table: str) -> None:
    # PostgreSQL keeps a renamed table's primary key (constraint and index) under the old table's name, which would
    # then collide with the key of any later table of that name; SQLite renames its own with the table.
    cursor.execute(f"SELECT conname FROM pg_constraint WHERE conrelid = '{table}'::regclass AND contype = 'p'")
    for (name,) in cursor.fetchall():
        if name != f"{table}_pkey":
            cursor.execute(f'ALTER TABLE {table} RENAME CONSTRAINT "{name}" TO {table}_pkey')


def _reset_the_changes(cursor: Any) -> None:
    # Entries of forewarn_changes written before this migration name rows as it no longer does (the old tables,
    # migration 8; events by EventId, 13). They are replaced by one reset entry at the next position rather than
    # rewritten: a replica of this version that was behind it loads the whole state once (as after a pruned
    # journal), and an older replica still running is sent to load the whole state too (after migration 8 it fails
    # on the renamed tables and reports the database unreachable), where rewritten entries would have had it skip
    # every Azure row from then on without a word. A journal with no
    # entries (a single server's, SQLite's) stays empty.
    cursor.execute("SELECT MAX(position) FROM forewarn_changes")
    row = cursor.fetchone()
    if row is None or row[0] is None:
        return
    position = int(row[0]) + 1
    keys = json.dumps({RESET: []}, separators=(",", ":"))
    cursor.execute(
        "INSERT INTO forewarn_changes (position, written_ms, keys) "
        f"VALUES ({position}, {int(time.time() * 1000)}, '{keys}')"
    )
    cursor.execute(f"DELETE FROM forewarn_changes WHERE position < {position}")


def _sqs_tables(cursor: Any, dialect: Dialect) -> None:
    # Amazon SQS queues and their messages (aws/queues.py), EventBridge rules (aws/eventbus.py), Auto Scaling lifecycle
    # hooks and the actions instances wait on (aws/lifecycle.py), as JSON records; a message's key is
    # ``queue/message ID`` (a message moved to a dead-letter queue keeps its ID there).
    for statement in (
        "CREATE TABLE IF NOT EXISTS forewarn_sqs_queues (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_sqs_messages (message_key TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
        "queue TEXT NOT NULL, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_eventbridge_rules (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_asg_hooks (hook_key TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_asg_actions (token TEXT PRIMARY KEY, data TEXT NOT NULL)",
    ):
        cursor.execute(statement)


WAVE_RUNS_TABLE = (
    "CREATE TABLE IF NOT EXISTS forewarn_wave_runs (wave_id TEXT NOT NULL, unit INTEGER NOT NULL, "
    "operations TEXT NOT NULL, PRIMARY KEY (wave_id, unit))"
)


def _wave_runs(cursor: Any, dialect: Dialect) -> None:
    # A wave's units in flight (waves/records.py), one row each, out of the wave's progress record, which each commit
    # rewrote whole with all of them (thousands at a million VMs). A unit's row holds its operations (JSON).
    cursor.execute(WAVE_RUNS_TABLE)
    mark = "%s" if dialect.name == "postgresql" else "?"
    cursor.execute("SELECT wave_id, progress FROM forewarn_waves")
    for wave_id, text in cursor.fetchall():
        progress = json.loads(text)
        runs = progress.pop("in_flight", [])
        for unit, operations in runs:
            cursor.execute(
                f"INSERT INTO forewarn_wave_runs (wave_id, unit, operations) VALUES ({mark}, {mark}, {mark})",
                (wave_id, unit, json.dumps(operations, separators=(",", ":"))),
            )
        cursor.execute(
            f"UPDATE forewarn_waves SET progress = {mark} WHERE wave_id = {mark}",
            (json.dumps(progress, separators=(",", ":")), wave_id),
        )


WAVE_PROGRESS_TABLE = (
    "CREATE TABLE IF NOT EXISTS forewarn_wave_progress (wave_id TEXT PRIMARY KEY, progress TEXT NOT NULL)"
)


def _wave_progress(cursor: Any, dialect: Dialect) -> None:
    # A wave's progress, written at every command that moves the wave, in a row of its own: beside the plan (1.3 MB
    # of units at a million VMs), each write rewrote the whole row, plan included. forewarn_waves.progress stays,
    # unread and '{}' (SQLite drops a column only from 3.35 on).
    cursor.execute(WAVE_PROGRESS_TABLE)
    cursor.execute(
        "INSERT INTO forewarn_wave_progress (wave_id, progress) SELECT wave_id, progress FROM forewarn_waves"
    )
    cursor.execute("UPDATE forewarn_waves SET progress = '{}'")


# The columns beside each record that say whether an EC2 or Compute Engine event is live (its state), and when an
# EC2 event ended: the events that ended are loaded no more, read from the table when asked (aws/records.py,
# gcp/records.py), by instance through the index.
EVENT_STATE_COLUMNS = {
    "forewarn_ec2_events": ("instance_id", ("state", "ended_at")),
    "forewarn_gce_events": ("instance", ("state",)),
}


def _event_states(cursor: Any, dialect: Dialect) -> None:
    mark = "%s" if dialect.name == "postgresql" else "?"
    for table, (instance, added) in EVENT_STATE_COLUMNS.items():
        cursor.execute(f"SELECT * FROM {table} WHERE 1 = 0")
        columns = {column[0].lower() for column in cursor.description}
        for name in added:
            if name not in columns:
                cursor.execute(f"ALTER TABLE {table} ADD COLUMN {name} TEXT")
        cursor.execute(f"SELECT event_id, data FROM {table}")
        for event_id, text in cursor.fetchall():
            record = json.loads(text)
            values = [record["state"], *([record.get("ended_at")] if "ended_at" in added else [])]
            assignments = ", ".join(f"{name} = {mark}" for name in added)
            cursor.execute(f"UPDATE {table} SET {assignments} WHERE event_id = {mark}", (*values, event_id))
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {table}_by_instance ON {table} ({instance}, seq)")


# EventIds of Azure events written before migration 13, when they were hashes: the events' table, keyed by number
# since, finds these by this table (azure/records.py); later EventIds give their number back.
AZURE_EVENT_IDS = "forewarn_azure_event_ids"


def _azure_events_by_number(cursor: Any, dialect: Dialect) -> None:
    # SQLite makes only INTEGER PRIMARY KEY the table's own key (its rowid), where new rows are appended; a BIGINT
    # key would be an index beside it.
    number = "BIGINT" if dialect.name == "postgresql" else "INTEGER"
    cursor.execute(f"CREATE TABLE IF NOT EXISTS {AZURE_EVENT_IDS} (event_id TEXT PRIMARY KEY, seq BIGINT NOT NULL)")
    cursor.execute(f"INSERT INTO {AZURE_EVENT_IDS} (event_id, seq) SELECT event_id, seq FROM forewarn_azure_events")
    cursor.execute(
        f"CREATE TABLE forewarn_azure_events_by_number (seq {number} PRIMARY KEY, event_id TEXT NOT NULL, "
        "scope TEXT NOT NULL, status TEXT NOT NULL, data TEXT NOT NULL)"
    )
    cursor.execute(
        "INSERT INTO forewarn_azure_events_by_number (seq, event_id, scope, status, data) "
        "SELECT seq, event_id, scope, status, data FROM forewarn_azure_events"
    )
    cursor.execute("DROP TABLE forewarn_azure_events")
    cursor.execute("ALTER TABLE forewarn_azure_events_by_number RENAME TO forewarn_azure_events")
    if dialect.name == "postgresql":
        _rename_primary_key(cursor, "forewarn_azure_events")
    _reset_the_changes(cursor)


MIGRATIONS: Sequence[Migration] = (
    # Every table, as written before versions were read. Tables already there are kept as they are (a database
    # that never recorded a version, version 0, may hold some of them).
    Migration(1, "the tables of events, VMs, policies, EC2, waves, the outbox, Event Grid and the journal", _tables),
    # Databases recorded as version 1 by releases before outbox deliveries had a kind and a detail lack the two
    # columns; the rest have them already and are left unchanged.
    Migration(2, "outbox deliveries gain their sending policy (kind) and its state (detail)", _outbox_kind_and_detail),
    Migration(3, "Compute Engine maintenance events and instance states (gcp/records.py)", _gce_tables),
    Migration(4, "forewarn_leader: which process leads a shared PostgreSQL database, and where", _leader),
    Migration(5, "forewarn_changes: the rows each commit of a shared leader wrote, for its replicas", _changes),
    Migration(6, "the fleet's record may be in columns, with its digest (fleet format 2)", _fleet_in_columns),
    Migration(7, "forewarn_leader: the writer's role and the backend holding its lock", _writer_columns),
    # Not additive: code before it reads the old names. It runs only while no process holds the writer's lock
    # (store/postgres.py), and code before it refuses the database from then on (SchemaTooNew).
    Migration(8, "Azure's tables get its prefix (forewarn_azure_*); the replicas' journal is reset", _azure_prefix),
    Migration(
        9, "SQS queues and messages, EventBridge rules, Auto Scaling lifecycle hooks (aws/records.py)", _sqs_tables
    ),
    # Not additive: code before it reads a wave's units in flight from its progress record, where they no longer
    # are. It runs only while no process holds the writer's lock; code before it refuses the database at its next
    # start (SchemaTooNew), and an older replica still running fails on the first wave it reads.
    Migration(10, "a wave's units in flight, each a row of forewarn_wave_runs, out of its progress", _wave_runs),
    # Not additive either: code before it reads a wave's progress from forewarn_waves (SchemaTooNew, as above).
    Migration(11, "a wave's progress in a row of forewarn_wave_progress, apart from its plan", _wave_progress),
    # Not additive: code before it writes events without their state, which this code loads by (SchemaTooNew, as
    # above).
    Migration(12, "EC2 and Compute Engine events: their state (and an EC2 event's end) in columns", _event_states),
    # Not additive: code before it writes events by EventId, which is no longer the key (SchemaTooNew, as above).
    Migration(
        13,
        "Azure events keyed by their number; the EventIds written before, in forewarn_azure_event_ids",
        _azure_events_by_number,
    ),
)
LATEST = MIGRATIONS[-1].version


def refuse_newer(stored: int, description: str) -> None:
    """SchemaTooNew for a database at a version newer than the code knows."""
    if stored > LATEST:
        raise SchemaTooNew(
            f"{description}: the database has schema version {stored}, newer than this forewarn knows (up to "
            f"{LATEST}); it was written by a newer forewarn: upgrade forewarn, or give another database"
        )


def pending(stored: int, description: str) -> list[Migration]:
    """The migrations a database at version ``stored`` needs, in order; SchemaTooNew for one newer than the code."""
    refuse_newer(stored, description)
    return [migration for migration in MIGRATIONS if migration.version > stored]
