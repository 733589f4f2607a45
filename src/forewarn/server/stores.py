"""The composition root's one list of the components that keep state in the store.

Each component owns its part of the store (the writer of each kind of change it makes, the reader of its stored
state) in its own records module: each registered cloud's (``Cloud.records``), then the waves'. This is where they
are all handed to the store.
"""

from __future__ import annotations

from forewarn.cloud import registered
from forewarn.store import Records, SQLStore, open_store
from forewarn.waves.records import WAVE_RECORDS


def store_records() -> list[Records]:
    return [*(cloud.records for cloud in registered()), WAVE_RECORDS]


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def open_fleet_store(url: str, exclusive: bool = False, sqlite_cache: int | None = None) -> SQLStore:
    """``open_store`` with every component's records: what the server (``exclusive``) and the tests open."""
    return open_store(url, store_records(), exclusive=exclusive, sqlite_cache=sqlite_cache)


def open_snapshot_store(url: str) -> SQLStore:
    """A second connection to a shared PostgreSQL database, whose loads are consistent snapshots (a replica's)."""
    from forewarn.store.lease import SnapshotStore

    return SnapshotStore(url, store_records())
