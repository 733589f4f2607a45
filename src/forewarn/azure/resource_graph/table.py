"""The ``maintenanceresources`` table: ARG rows in an in-memory DuckDB table, one row per id, updated in place.

Queries never read the stored table by name. ``query.py`` runs each query against a CTE called
``maintenanceresources`` that selects the ARG columns of the rows in scope, so the helper columns here stay hidden and
other subscriptions' rows stay out of reach.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import duckdb

#: The ARG resource columns, in ARG's order ("Resources - Resources", the REST API reference), with their storage types.
ARG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "VARCHAR"),
    ("name", "VARCHAR"),
    ("type", "VARCHAR"),
    ("tenantId", "VARCHAR"),
    ("kind", "VARCHAR"),
    ("location", "VARCHAR"),
    ("resourceGroup", "VARCHAR"),
    ("subscriptionId", "VARCHAR"),
    ("managedBy", "VARCHAR"),
    ("sku", "JSON"),
    ("plan", "JSON"),
    ("properties", "JSON"),
    ("tags", "JSON"),
    ("identity", "JSON"),
    ("zones", "JSON"),
    ("extendedLocation", "JSON"),
)
COLUMN_NAMES = tuple(name for name, _ in ARG_COLUMNS)
JSON_COLUMNS = frozenset(name for name, kind in ARG_COLUMNS if kind == "JSON")

#: Deliberately not ``maintenanceresources``: a query naming the stored table would bypass subscription scoping, and
#: query.py refuses this name wherever it appears.
STORED_TABLE = "forewarn_maintenance_rows"


def _text_of(path: str) -> str:
    # duckdb-kql's rendering of tostring(properties.<path>)
    return f"coalesce(json_extract(\"properties\", '$.{path}') ->> '$', '')"


#: duckdb-kql's rendering of todatetime(properties.NotBefore), as query.py amends it to read RFC 1123 text.
_NOT_BEFORE_TIME = (
    "COALESCE(TRY_CAST(json_extract(\"properties\", '$.NotBefore') AS TIMESTAMPTZ) AT TIME ZONE 'UTC', "
    "try_strptime(forewarn_json_text(CAST(json_extract(\"properties\", '$.NotBefore') AS VARCHAR)), "
    "['%m-%d-%Y', '%m/%d/%Y', '%m.%d.%Y', '%m-%d-%Y %H:%M:%S', '%m/%d/%Y %H:%M:%S', '%-d %b %Y', '%b %-d, %Y', "
    "'%a, %d %b %Y %H:%M:%S GMT', '%Y%m%d']))"
)

#: Values of ``properties`` that queries filter, sort and group on, kept as columns of their own: (name, type, the
#: SQL duckdb-kql renders for the KQL expression). DuckDB computes each from that very SQL when a row is written, and
#: plan.py swaps the expression for the column where a query step reads the table's rows, so the value is the same
#: by construction and a million rows are not parsed per query. A renderer that changes its SQL only makes the swap
#: stop applying (tests/azure/test_resource_graph_query.py checks that the documented queries still use it).
SHREDDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("forewarn_event_status", "VARCHAR", _text_of("EventStatus")),
    ("forewarn_event_id", "VARCHAR", _text_of("EventId")),
    ("forewarn_event_type", "VARCHAR", _text_of("EventType")),
    ("forewarn_event_source", "VARCHAR", _text_of("EventSource")),
    ("forewarn_not_before", "VARCHAR", _text_of("NotBefore")),
    ("forewarn_not_before_time", "TIMESTAMP", _NOT_BEFORE_TIME),
)
SHREDDED_NAMES = tuple(name for name, _, _ in SHREDDED_COLUMNS)

#: Hidden columns: the lower-cased subscription (scoping compares ids case-insensitively without lower() per row)
#: and the time of the last upsert (retention).
_HIDDEN_COLUMNS = (("subscription_key", "VARCHAR"), ("changed_at", "TIMESTAMP"))

#: Statuses of events still in progress: retention never drops these, however long ago they last changed.
_LIVE_STATUSES = ("Scheduled", "Started")

#: Rows written by one UPDATE and one INSERT, to bound the staging table.
_BATCH = 100_000

#: Rows handed to DuckDB by one statement. DuckDB converts Python lists holding the GIL, and so holding every other
#: thread of the server, the event loop included: a batch of 100,000 rows in one statement held it for 320 ms; a
#: statement of 1,000 rows holds it about 3 ms, and the loop runs between two.
_STAGED_PER_STATEMENT = 1_000

#: Up to this many rows, an upsert looks ids up in the primary key; beyond, it joins (see _write for the figures).
_INDEX_LOOKUP_MAX = 1_000

_UPDATED_COLUMNS = COLUMN_NAMES[1:] + SHREDDED_NAMES + ("subscription_key", "changed_at")
_STAGED_COLUMNS = COLUMN_NAMES + SHREDDED_NAMES


class MaintenanceTable:
    """ARG rows held in DuckDB. Thread-safe: writes take a lock, queries use their own cursors (DuckDB MVCC).

    ``memory_limit`` (bytes) bounds the DuckDB database as a whole: the rows, every query running over them and the
    writes. DuckDB refuses an allocation beyond it (``duckdb.OutOfMemoryException`` for a query; ``MemoryError`` for
    a write here) rather than spill: an in-memory database otherwise spills to ``.tmp`` in the working directory.

    Each write runs on a connection of its own, closed after it. Near the memory bound any statement can fail, the
    ROLLBACK and the COMMIT included, and a connection whose transaction could not be rolled back refuses every later
    statement; closing it ends that transaction whatever state it is in, so the next write starts clean.
    ``connect`` opens the database (``duckdb.connect``; a test gives one that fails where it is told to).
    """

    def __init__(self, memory_limit: int | None = None, connect: Callable[..., Any] = duckdb.connect) -> None:
        self.memory_limit = memory_limit
        bounds = {} if memory_limit is None else {"memory_limit": f"{memory_limit}B", "temp_directory": ""}
        self._database = connect(":memory:", config={**_SANDBOX, **bounds})
        self._database.execute("SET GLOBAL TimeZone = 'UTC'")  # KQL datetimes are UTC; duckdb-kql's SQL assumes it
        # Neither a query nor anything it smuggles can change settings after this, external access included.
        self._database.execute("SET lock_configuration = true")
        shredded = tuple((name, kind) for name, kind, _ in SHREDDED_COLUMNS)
        columns = ", ".join(f'"{name}" {kind}' for name, kind in ARG_COLUMNS + shredded + _HIDDEN_COLUMNS)
        self._database.execute(f"CREATE TABLE {STORED_TABLE} ({columns}, PRIMARY KEY (id))")
        self._database.execute(_JSON_TEXT_MACRO)
        self._lock = threading.Lock()

    def upsert(self, rows: Iterable[Mapping[str, Any]], changed_at: datetime) -> int:
        """Insert rows, or replace the row with the same id in place. Returns the number of distinct ids written.

        ``changed_at`` comes from the caller (the engine clock), not the wall clock. Within one call the last row of
        an id wins: DuckDB refuses to update one row twice in a statement, and the last state is the one ARG shows.
        The whole call is one transaction, so a query never sees half of it.
        """
        latest = list({row["id"]: row for row in rows}.values())
        stamp = _naive_utc(changed_at)
        with self._lock, _memory_error(), self._connection() as con:
            con.execute("BEGIN TRANSACTION")
            for start in range(0, len(latest), _BATCH):
                _write(con, latest[start : start + _BATCH], stamp)
            con.execute("COMMIT")  # not reached after a failure: closing the connection rolls back
        return len(latest)

    @contextmanager
    def _connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of its own to the database for one write, closed after it whatever happened (see the class)."""
        con = self._database.cursor()
        try:
            yield con
        finally:
            con.close()

    def remove_older_than(self, cutoff: datetime) -> int:
        """Retention: drop finished events last changed before ``cutoff``. Returns how many rows went.

        ARG's retention is undocumented, so the cutoff is the caller's. Scheduled and Started events stay whatever
        their age: a consumer polling ARG must still find an event that is due.
        """
        with self._lock, _memory_error(), self._connection() as con:
            (removed,) = one_row(
                con.execute(
                    f"DELETE FROM {STORED_TABLE} WHERE changed_at < ? "
                    "AND coalesce(properties ->> '$.EventStatus', '') NOT IN (SELECT unnest(?))",
                    [_naive_utc(cutoff), list(_LIVE_STATUSES)],
                )
            )
        return removed

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of its own to the same database, for one query (query.py). The caller closes it."""
        with self._lock:
            return self._database.cursor()

    def __len__(self) -> int:
        with self._lock, _memory_error(), self._connection() as con:
            (count,) = one_row(con.execute(f"SELECT count(*) FROM {STORED_TABLE}"))
        return count


def _write(con: duckdb.DuckDBPyConnection, rows: list[Mapping[str, Any]], stamp: datetime) -> None:
    _stage(con, rows)
    values = "SELECT b.*, lower(b.subscriptionId), ? FROM forewarn_batch AS b"
    assignments = ", ".join(f'"{name}" = b."{name}"' for name in _STAGED_COLUMNS[1:])
    if len(rows) <= _INDEX_LOOKUP_MAX:
        # A few rows (events changing status): primary-key lookups. On a million rows: 1 row 6 ms, 1,000 53 ms.
        con.execute(
            f"INSERT INTO {STORED_TABLE} {values} ON CONFLICT (id) DO UPDATE SET "
            + ", ".join(f'"{name}" = excluded."{name}"' for name in _UPDATED_COLUMNS),
            [stamp],
        )
        return
    # Many rows: one hash join to update, one anti-join to insert, each scanning every stored id (35 ms for one
    # row on a million rows, 77 ms for 1,000), where ON CONFLICT took 5 s for 200,000 rows and this 1.9 s.
    con.execute(
        f"UPDATE {STORED_TABLE} SET {assignments}, subscription_key = lower(b.subscriptionId), changed_at = ? "
        f"FROM forewarn_batch AS b WHERE {STORED_TABLE}.id = b.id",
        [stamp],
    )
    con.execute(
        f"INSERT INTO {STORED_TABLE} {values} WHERE NOT EXISTS (SELECT 1 FROM {STORED_TABLE} AS s WHERE s.id = b.id)",
        [stamp],
    )


def _stage(con: duckdb.DuckDBPyConnection, rows: list[Mapping[str, Any]]) -> None:
    """``rows`` in the temporary table ``forewarn_batch``, their shredded columns computed, ``_STAGED_PER_STATEMENT``
    rows a statement. Each column travels as one list parameter, unnested by DuckDB: 200,000 rows staged in 1.3 s in
    one statement, where executemany took 13 s for 20,000."""
    staged = ", ".join(f'unnest(${i + 1}) AS "{name}"' for i, name in enumerate(COLUMN_NAMES))
    shredded = ", ".join(f'{expression} AS "{name}"' for name, _, expression in SHREDDED_COLUMNS)
    select = f"SELECT *, {shredded} FROM (SELECT {staged})"
    for start in range(0, len(rows), _STAGED_PER_STATEMENT):
        part = rows[start : start + _STAGED_PER_STATEMENT]
        columns = [_column(name, part) for name in COLUMN_NAMES]
        if start == 0:
            con.execute(f"CREATE OR REPLACE TEMP TABLE forewarn_batch AS {select}", columns)
        else:
            con.execute(f"INSERT INTO forewarn_batch {select}", columns)


@contextmanager
def _memory_error() -> Iterator[None]:
    """A write DuckDB could not fit in its memory limit, as Python's MemoryError: the caller may retry it once the
    queries holding that memory have ended, without knowing DuckDB's exceptions."""
    try:
        yield
    except duckdb.OutOfMemoryException as error:
        raise MemoryError(str(error).splitlines()[0]) from error
    except duckdb.TransactionException as error:
        # A COMMIT short of memory is refused as a TransactionException: "Failed to commit: could not allocate".
        if "could not allocate" not in str(error):
            raise
        raise MemoryError(str(error).splitlines()[0]) from error


def one_row(result: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """The one row of a statement that always has one (a count, a DELETE's count)."""
    row = result.fetchone()
    if row is None:
        raise RuntimeError("DuckDB returned no row where one is always returned")
    return row


#: Whatever KQL becomes, DuckDB may not read or write files or URLs, attach databases, load extensions, or resolve
#: an unknown table name to a Python variable of the calling frame (a replacement scan).
_SANDBOX: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False,
    "python_enable_replacements": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
}

#: The text of a JSON string value, or the value unchanged. query.py wraps duckdb-kql's todatetime() parsing branch
#: in it: that branch casts a dynamic value to VARCHAR, which keeps the JSON quotes, so RFC 1123 NotBefore parsed to
#: NULL.
_JSON_TEXT_MACRO = (
    "CREATE MACRO forewarn_json_text(s) AS "
    "CASE WHEN json_valid(s) AND json_type(s) = 'VARCHAR' THEN json_extract_string(s, '$') ELSE s END"
)


def _column(name: str, rows: list[Mapping[str, Any]]) -> list[Any]:
    values = [row.get(name) for row in rows]
    if name not in JSON_COLUMNS:
        return values
    # Compact JSON, as Kusto prints dynamic values: tostring(properties.Resources) then reads ["a","b"].
    return [None if value is None else _compact_json(value) for value in values]


_compact_json = json.JSONEncoder(separators=(",", ":")).encode


def _naive_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)
