"""Durable stores behind one interface: SQLite (default) and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

from forewarn.extras import POSTGRES
from forewarn.store.base import (
    Attempt,
    Delivery,
    JournalEntry,
    Outgoing,
    SQLStore,
    StoredChanges,
    StoredState,
    records_digest,
)
from forewarn.store.errors import DatabaseInUse, SchemaTooNew, StoreError, StoreUnavailable
from forewarn.store.records import Records, UnregisteredChange


def open_store(
    url: str, records: Sequence[Records], exclusive: bool = False, sqlite_cache: int | None = None
) -> SQLStore:
    """Open and migrate a store: ``postgresql://...`` or ``postgres://...``, ``sqlite:PATH``, a file path or ``:memory:``.

    ``records``: every component's part of the store (the writer of each kind of change it makes, the reader of its
    stored state), given by the composition root. A change of a kind none of them writes fails its commit.
    ``exclusive``: a database another process holds so is refused (``DatabaseInUse``), and this one holds it until
    closed (what a server that writes alone does): a SQLite file by its lock file, a PostgreSQL database by the
    writer's lock (store/writer.py), which a shared leader holds too. ``sqlite_cache``: a SQLite writer's page cache
    in bytes (default ``DEFAULT_CACHE``); PostgreSQL's cache is the server's own (``shared_buffers``)."""
    if url.startswith(("postgresql://", "postgres://")):
        if not POSTGRES.installed():
            raise StoreError(POSTGRES.message)
        from forewarn.store.postgres import PostgresStore

        store: SQLStore = PostgresStore(url, records, exclusive=exclusive)
    else:
        from forewarn.store.sqlite import SQLiteStore

        path = url[len("sqlite://") :] if url.startswith("sqlite://") else url
        path = path[len("sqlite:") :] if path.startswith("sqlite:") else path
        from forewarn.store.sqlite import DEFAULT_CACHE

        store = SQLiteStore(path, records, exclusive=exclusive, cache=sqlite_cache or DEFAULT_CACHE)
    try:
        store.migrate()
    except BaseException:
        store.close()
        raise
    return store


__all__ = [
    "Attempt",
    "DatabaseInUse",
    "Delivery",
    "JournalEntry",
    "Outgoing",
    "Records",
    "SchemaTooNew",
    "SQLStore",
    "StoreError",
    "StoredChanges",
    "StoredState",
    "StoreUnavailable",
    "UnregisteredChange",
    "open_store",
    "records_digest",
]
