"""How components keep their state in the store: one writer per kind of change, one reader of what was written.

The store knows the generic parts (transactions, the journal, the outbox, the clock, the fleet, the schema). What a
kind of change writes, and how the stored rows come back as the component's state, belong to the component that
makes the change: each gives a :class:`Records` (``azure/records.py``, ``aws/records.py``, ``waves/records.py``),
and the composition root hands them to ``open_store``. A change with no writer is refused at commit
(:class:`UnregisteredChange`) rather than silently not stored.

A writer also names the rows it wrote (``Rows.touch``: the table and the row's key). A shared leader journals those
names with each commit (``forewarn_changes``), and a replica reads back only the rows they name, through the
component's ``reload`` (replication: a refresh that costs what the commits changed, not what the fleet holds).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from forewarn.core.changes import Change, DeliveryMade, TimeMoved
from forewarn.core.component import StoredRows

JOURNAL_INSERT = "INSERT INTO forewarn_journal (at, kind, event_id, detail) VALUES (?, ?, ?, ?)"
# Made once: json.dumps with options builds a new encoder on every call, which costs as much as encoding a small
# record. ``compact`` is what records are written with; ``sorted_keys`` the journal's details.
compact = json.JSONEncoder(separators=(",", ":")).encode
sorted_keys = json.JSONEncoder(sort_keys=True).encode
META_PUT = "INSERT INTO forewarn_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"

FINAL = "final"  # the key of Rows.write_final's rows, beside write_last's statements
C = TypeVar("C", bound=Change)
T = TypeVar("T")
K = TypeVar("K", str, int)

# The rows some commits wrote: table -> the keys of its rows (each once, in the order first written).
Touched = dict[str, dict[str, None]]


def time_text(value: datetime | None) -> str | None:
    """A moment as the store writes it in a record (ISO 8601), None kept."""
    if value is None:
        return None
    if value.tzinfo is UTC:  # equal UTC moments have one text (unlike equal moments in two zones)
        return _utc_text(value)
    return value.isoformat()


# The same few moments are written again and again (an event's NotBefore and creation at each of its changes, a
# step's time on each of its rows): formatting them was a third of encoding an event.
_utc_text = functools.lru_cache(maxsize=4096)(datetime.isoformat)


def time_from_text(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


class UnregisteredChange(TypeError):
    """A command returned a kind of change no component registered a writer for: it cannot be stored, so the
    command fails (and the engine is rebuilt from the database) instead of losing the change."""


class Rows:
    """One command's statements, queued before its transaction starts (so that a retried commit reuses them).

    Rows are queued per statement and written with one executemany each, in the order each statement first appears:
    a 100,000-VM wave step writes thousands of rows, and one round trip per row was most of its cost. Statements on
    one table keep their order (each table has one statement, or statements whose order of first appearance is the
    order they must run in)."""

    def __init__(self, now: datetime):
        self.now = now
        self.statements: dict[str, list[tuple[Any, ...]]] = {}
        self.touched: Touched = {}
        # (statement, key) or (FINAL, key) -> the statement and its latest params
        self._last: dict[tuple[str, Hashable], tuple[str, Callable[[], tuple[Any, ...]]]] = {}
        self._at = now.isoformat()

    def write(self, sql: str, params: tuple[Any, ...]) -> None:
        self.statements.setdefault(sql, []).append(params)

    def touch(self, table: str, key: str) -> None:
        """Name a row this command wrote (or deleted): a replica reads it back from there."""
        self.touched.setdefault(table, {})[key] = None

    def journal(self, kind: str, event_id: str | None, detail: dict[str, Any]) -> None:
        self.write(JOURNAL_INSERT, (self._at, kind, event_id, sorted_keys(detail)))

    def put_meta(self, key: str, value: str) -> None:
        self.write(META_PUT, (key, value))
        self.touch("forewarn_meta", key)

    def write_last(self, sql: str, key: Hashable, params: Callable[[], tuple[Any, ...]]) -> None:
        """A row written once, after every change of the command, with its latest params: a wave that moves many
        times in one command has its progress encoded and written once, and so has an event that an approval
        moves twice (approved, then Started), or that several commands of a group commit move."""
        self._last[(sql, key)] = (sql, params)

    def write_final(self, key: Hashable, sql: str, params: tuple[Any, ...]) -> None:
        """A row's last statement in the command, the only one written for ``key``: a row inserted and deleted by
        one command (a wave's unit that starts and ends in one clock step) is only deleted, whatever the order its
        statements' kinds first appeared in (each statement's rows are written together, Rows)."""
        self._last[(FINAL, key)] = (sql, lambda: params)

    def write_latest(self) -> None:
        """Queue the rows of write_last and write_final (once every change is written)."""
        for sql, params in self._last.values():
            self.write(sql, params())
        self._last.clear()


@dataclass(frozen=True)
class Writer(Generic[C]):
    """What one kind of change writes (its rows and its journal line)."""

    kind: type[C]
    write: Callable[[C, Rows], None]


Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
# A row's key: text, or the number of a table keyed by number (RecordTable.numbered)
Key = str | int
# (column, keys) -> the conditions, with their parameters, that select those keys: one or several (long lists)
KeyCondition = Callable[[str, Sequence[Key]], list[tuple[str, Sequence[Any]]]]


def key_in_list(column: str, keys: Sequence[Key]) -> list[tuple[str, Sequence[Any]]]:
    """``column IN (?, ...)``, in slices that stay under every database's limit on parameters."""
    slices = [keys[start : start + 500] for start in range(0, len(keys), 500)]
    return [(f"{column} IN ({', '.join('?' * len(part))})", part) for part in slices]


class Reader:
    """What a component's loader reads from: queries on the open transaction, and the meta table (a replica's
    refresh reads only the meta keys its commits touched, with the store's own: now, clock, next_seq)."""

    def __init__(self, query: Query, meta: dict[str, str], key_condition: KeyCondition = key_in_list):
        self._query = query
        self._key_condition = key_condition
        self.meta = meta

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._query(sql, params)

    def keyed(self, select: str, column: str, keys: Iterable[Key]) -> list[tuple[Any, ...]]:
        """The rows of ``select`` (a query without WHERE) whose ``column`` is one of ``keys``."""
        wanted = list(keys)
        found: list[tuple[Any, ...]] = []
        if wanted:
            for condition, params in self._key_condition(column, wanted):
                found += self._query(f"{select} WHERE {condition}", params)
        return found

    def current(
        self, select: str, column: str, keys: Iterable[K], decode: Callable[[tuple[Any, ...]], T]
    ) -> dict[K, T | None]:
        """Each key's row as it is now, decoded (``select``'s first column is the key): None for a key whose row is
        gone (or never was)."""
        wanted = list(keys)
        found: dict[K, T | None] = dict.fromkeys(wanted)
        for row in self.keyed(select, column, wanted):
            found[row[0]] = decode(row)
        return found


@dataclass(frozen=True)
class RecordTable:
    """A table that holds one record per key: the key column, the columns written beside the record when its row is
    made (what queries order or select by), and the record's own column, which ``decode`` reads back. Its statements,
    its touches and its reads are made here once for every component."""

    name: str
    key: str
    decode: Callable[[Any], Any]
    beside: tuple[str, ...] = ()
    record: str = "data"
    updated: tuple[str, ...] = ()  # columns of ``beside`` that an update rewrites too (the record always is)
    order_by: str = ""  # the column the records load in the order of (none: the database's order)
    keyed: bool = False  # loads as {key: record} rather than a list of records
    # A condition on the rows loaded at start (none: all): the others stay in the database until asked for (events
    # that ended, which the component reads from there)
    loaded: str = ""
    # The key is a number (an event's): a row's new key then lands at the end of the table's index, not at a random
    # page of it. Rows are touched under its decimal text (forewarn_changes holds text) and reloaded by number.
    numbered: bool = False

    @functools.cached_property
    def upsert(self) -> str:
        columns = (self.key, *self.beside, self.record)
        updates = ", ".join(f"{column} = excluded.{column}" for column in (*self.updated, self.record))
        return (
            f"INSERT INTO {self.name} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
            f"ON CONFLICT ({self.key}) DO UPDATE SET {updates}"
        )

    def put(self, rows: Rows, key: str, *values: Any) -> None:
        """Write the row of ``key`` (``values``: the columns beside, then the record) and name it touched."""
        rows.write(self.upsert, (key, *values))
        rows.touch(self.name, key)

    def put_last(self, rows: Rows, key: str, params: Callable[[], tuple[Any, ...]]) -> None:
        """As ``put``, written once per command with the latest params (Rows.write_last)."""
        rows.write_last(self.upsert, key, params)
        rows.touch(self.name, key)

    def delete(self, rows: Rows, key: str) -> None:
        rows.write(f"DELETE FROM {self.name} WHERE {self.key} = ?", (key,))
        rows.touch(self.name, key)

    def load(self, reader: Reader) -> list[Any] | dict[str, Any]:
        """Every stored record, decoded: a list, or by key for a ``keyed`` table."""
        if self.keyed:
            select = f"SELECT {self.key}, {self.record} FROM {self.name}"
            return {row[0]: self.decode(row[1]) for row in _each_freed(reader.rows(select))}
        order = f" ORDER BY {self.order_by}" if self.order_by else ""
        where = f" WHERE {self.loaded}" if self.loaded else ""
        rows = reader.rows(f"SELECT {self.record} FROM {self.name}{where}{order}")
        return [self.decode(row[0]) for row in _each_freed(rows)]

    def current(self, reader: Reader, touched: Touched) -> Mapping[Any, Any]:
        """The touched rows of this table as they are now, decoded (None for a row that is gone), by their key: a
        number for a ``numbered`` table."""
        select = f"SELECT {self.key}, {self.record} FROM {self.name}"
        keys = touched.get(self.name, {})
        if self.numbered:
            return reader.current(select, self.key, [int(key) for key in keys], lambda row: self.decode(row[1]))
        return reader.current(select, self.key, keys, lambda row: self.decode(row[1]))


class EndedRecords(Generic[T]):
    """The records of a table's rows that ended, as the database holds them: where a component reads the events it
    no longer keeps in memory (``table.loaded`` selects the live rows it loads; the others are these). ``owner``: the
    column naming each row's machine, which the table has an index on with ``seq`` (store/migrations.py)."""

    def __init__(self, database: StoredRows, table: RecordTable, owner: str) -> None:
        self._database = database
        self._table = table
        self._owner = owner
        self._select = f"SELECT {table.record} FROM {table.name}"

    def get(self, key: str) -> T | None:
        rows = self._database.read(f"{self._select} WHERE {self._table.key} = ?", (key,))
        return self._decoded(rows)[0] if rows else None

    def of(self, owners: Sequence[str]) -> list[T]:
        """The ended records of these machines, in the order they were created."""
        found: list[tuple[Any, ...]] = []
        for condition, params in key_in_list(self._owner, list(owners)):
            found += self._database.read(
                f"SELECT seq, {self._table.record} FROM {self._table.name} WHERE {condition} AND NOT "
                f"({self._table.loaded})",
                params,
            )
        found.sort(key=lambda row: row[0])
        return self._decoded([row[1:] for row in found])

    def where(self, condition: str, params: Sequence[Any]) -> list[T]:
        """The ended records that also meet ``condition`` (on the table's columns), in the order they were created."""
        return self._decoded(
            self._database.read(
                f"{self._select} WHERE NOT ({self._table.loaded}) AND {condition} ORDER BY {self._table.order_by}",
                params,
            )
        )

    def all(self) -> list[T]:
        """Every ended record, in the order they were created."""
        return self._decoded(
            self._database.read(f"{self._select} WHERE NOT ({self._table.loaded}) ORDER BY {self._table.order_by}")
        )

    def _decoded(self, rows: list[tuple[Any, ...]]) -> list[T]:
        return [self._table.decode(row[0]) for row in rows]


def _each_freed(rows: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """The rows in order, each freed as the next is taken. Freed together when the list went, a million rows held
    the interpreter for 70 ms in one C call: an engine rebuilt in a thread held the event loop that long."""
    rows.reverse()
    while rows:
        yield rows.pop()


def load_tables(reader: Reader, tables: Mapping[str, RecordTable]) -> dict[str, Any]:
    """Each table's records under the name the component's stored state takes them by."""
    return {name: table.load(reader) for name, table in tables.items()}


def reload_tables(reader: Reader, touched: Touched, tables: Mapping[str, RecordTable]) -> dict[str, Any]:
    """Each table's touched rows as they are now, under the name the component's replicated rows take them by."""
    return {name: table.current(reader, touched) for name, table in tables.items()}


def any_touched(touched: Touched, tables: Iterable[RecordTable]) -> bool:
    return any(table.name in touched for table in tables)


@dataclass(frozen=True)
class Records:
    """A component's part of the store: the writers of the changes it makes, and ``load``, which reads its stored
    state back as named values (the names the engine takes them by, each name given by one component only)."""

    owner: str
    writers: Sequence[Writer[Any]]
    load: Callable[[Reader], dict[str, Any]] = field(default=lambda reader: {})
    tables: tuple[str, ...] = ()  # what holds its state: emptied by a reset (store.reset)
    # The rows of ``touched`` as they are now, under the engine's names for them (each component's Engine.replicate
    # argument); nothing for a component none of whose rows were touched.
    reload: Callable[[Reader, Touched], dict[str, Any]] = field(default=lambda reader, touched: {})
    # ``CREATE TABLE IF NOT EXISTS`` statements of its tables, run each time a store opens, after the migrations: the
    # schema of a cloud kept outside forewarn, whose tables no numbered migration (store/migrations.py) creates. They
    # only add a table that is missing: a table already there is left as it is.
    schema: tuple[str, ...] = ()


def records_of_tables(
    owner: str,
    writers: Sequence[Writer[Any]],
    tables: Mapping[str, RecordTable],
    stored: Callable[..., Any],
    replicated: Callable[..., Any],
    schema: tuple[str, ...] = (),
    emptied: tuple[str, ...] = (),
) -> Records:
    """The Records of a component whose whole stored state is ``tables`` (by the names its state takes them under):
    loaded as ``stored(**records)``, reloaded as ``replicated(**touched rows)`` (``schema``: as Records'; ``emptied``:
    tables a reset empties beside them)."""

    def load(reader: Reader) -> dict[str, Any]:
        return {owner: stored(**load_tables(reader, tables))}

    def reload(reader: Reader, touched: Touched) -> dict[str, Any]:
        if not any_touched(touched, tables.values()):
            return {}
        return {owner: replicated(**reload_tables(reader, touched, tables))}

    names = (*(table.name for table in tables.values()), *emptied)
    return Records(owner, writers, load, tables=names, reload=reload, schema=schema)


def _time_moved(change: TimeMoved, rows: Rows) -> None:
    """Time needs no row of its own: the commit writes the time the command left the engine at."""


DELIVERY_MADE = (
    "UPDATE forewarn_outbox SET status = 'delivered', attempts = ?, next_at = ?, last_error = NULL WHERE id = ?"
)


def _delivery_made(change: DeliveryMade, rows: Rows) -> None:
    rows.write(DELIVERY_MADE, (change.attempts, rows.now.isoformat(), change.delivery_id))


# The kinds of change the store itself owns (core/changes.py).
CORE_RECORDS = Records(
    "core",
    [Writer(TimeMoved, _time_moved), Writer(DeliveryMade, _delivery_made)],
    tables=("forewarn_outbox", "forewarn_journal"),
)


class Registry:
    """Change type -> writer, and the loaders, of every registered component."""

    def __init__(self, records: Iterable[Records]):
        self.writers: dict[type[Change], Writer[Any]] = {}
        self.loaders: list[Records] = []
        self.tables: list[str] = []  # every registered part's state tables, in registration order
        self.schema: list[str] = []  # the statements creating the tables of parts no migration knows
        owners: dict[type[Change], str] = {}
        for part in (CORE_RECORDS, *records):
            for writer in part.writers:
                if writer.kind in owners:
                    raise ValueError(
                        f"two writers for {writer.kind.__name__}: {owners[writer.kind]} and {part.owner} both "
                        "register one"
                    )
                owners[writer.kind] = part.owner
                self.writers[writer.kind] = writer
            self.loaders.append(part)
            self.tables.extend(part.tables)
            self.schema.extend(part.schema)

    def write(self, change: Change, rows: Rows) -> None:
        writer = self.writers.get(type(change))
        if writer is None:
            kind = type(change)
            raise UnregisteredChange(
                f"no store writer for {kind.__module__}.{kind.__qualname__}: the component that makes this change "
                "registers one in its records module, given to open_store"
            )
        writer.write(change, rows)

    def load(self, reader: Reader) -> dict[str, Any]:
        return self._by_name(lambda part: part.load(reader))

    def reload(self, reader: Reader, touched: Touched) -> dict[str, Any]:
        """The touched rows as they are now, by the names the engine's ``replicate`` takes them under."""
        return self._by_name(lambda part: part.reload(reader, touched))

    def _by_name(self, read: Callable[[Records], dict[str, Any]]) -> dict[str, Any]:
        loaded: dict[str, Any] = {}
        owners: dict[str, str] = {}
        for part in self.loaders:
            for name, value in read(part).items():
                if name in owners:
                    raise ValueError(f"stored state {name!r} is loaded by both {owners[name]} and {part.owner}")
                owners[name] = part.owner
                loaded[name] = value
        return loaded

    def touched_by(self, changes: Iterable[Change], now: datetime) -> Touched:
        """The rows committing ``changes`` would write (nothing is written): what a replica reads back to undo
        changes it made without committing them (a projection)."""
        rows = Rows(now)
        for change in changes:
            writer = self.writers.get(type(change))
            if writer is not None:
                writer.write(change, rows)
        rows.write_latest()
        return rows.touched


def merge_touched(into: Touched, more: Mapping[str, Iterable[str]]) -> Touched:
    for table, keys in more.items():
        into.setdefault(table, {}).update(dict.fromkeys(keys))
    return into
