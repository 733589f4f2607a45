"""Durable stores behind one interface: SQLite (default) and PostgreSQL."""

from __future__ import annotations

from forewarn.store.base import (
    Attempt,
    Delivery,
    JournalEntry,
    Outgoing,
    SQLStore,
    StoredState,
    StoreError,
    StoreUnavailable,
)


def open_store(url: str) -> SQLStore:
    """Open and migrate a store: ``postgresql://...`` or ``postgres://...``, ``sqlite:PATH``, a file path or ``:memory:``."""
    if url.startswith(("postgresql://", "postgres://")):
        from forewarn.store.postgres import PostgresStore

        store: SQLStore = PostgresStore(url)
    else:
        from forewarn.store.sqlite import SQLiteStore

        path = url[len("sqlite://") :] if url.startswith("sqlite://") else url
        path = path[len("sqlite:") :] if path.startswith("sqlite:") else path
        store = SQLiteStore(path)
    store.migrate()
    return store


__all__ = [
    "Attempt",
    "Delivery",
    "JournalEntry",
    "Outgoing",
    "SQLStore",
    "StoreError",
    "StoredState",
    "StoreUnavailable",
    "open_store",
]
