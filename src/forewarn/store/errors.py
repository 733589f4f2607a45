"""What the store raises."""

from __future__ import annotations


class StoreError(Exception):
    """The database refused or failed; the message says which database and why."""

    retry_after = 1  # seconds a client is told to wait before retrying (the surfaces' Retry-After)


class StoreUnavailable(StoreError):
    """The database cannot be reached now; nothing was changed, and the store is reconnecting."""

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


class SchemaTooNew(StoreError):
    """The database was written by a newer forewarn, whose schema this code does not know (the message says which
    versions): it is refused rather than read or written wrongly."""


class DatabaseInUse(StoreError):
    """Another live process writes to the database (a SQLite file's lock, a PostgreSQL database's writer lock): two
    writers would each run their own engine over the other's commits. The message names the holder."""
