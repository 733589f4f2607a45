"""The composition root's one list of the components that keep state in the store.

Each component owns its part of the store (the writer of each kind of change it makes, the reader of its stored
state) in its own records module; this is where they are all handed to the store. A new component with stored state
adds its ``Records`` here.
"""

from __future__ import annotations

from forewarn.aws.records import EC2_RECORDS
from forewarn.azure.records import AZURE_RECORDS
from forewarn.gcp.records import GCP_RECORDS
from forewarn.store import Records, SQLStore, open_store
from forewarn.waves.records import WAVE_RECORDS


def store_records() -> list[Records]:
    return [AZURE_RECORDS, EC2_RECORDS, GCP_RECORDS, WAVE_RECORDS]


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def open_fleet_store(url: str, exclusive: bool = False) -> SQLStore:
    """``open_store`` with every component's records: what the server (``exclusive``) and the tests open."""
    return open_store(url, store_records(), exclusive=exclusive)


def open_snapshot_store(url: str) -> SQLStore:
    """A second connection to a shared PostgreSQL database, whose loads are consistent snapshots (a replica's)."""
    from forewarn.store.lease import SnapshotStore

    return SnapshotStore(url, store_records())
