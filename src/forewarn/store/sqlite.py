"""SQLite store: the default, a single file (or ``:memory:`` for throwaway runs)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

from forewarn.store.base import SQLStore
from forewarn.store.errors import StoreError
from forewarn.store.records import Records


class SQLiteStore(SQLStore):
    name = "sqlite"

    def __init__(self, path: str, records: Iterable[Records] = ()):
        try:
            connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            if path != ":memory:":
                connection.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit is on disk before the response that reports it, even if the machine loses power.
            connection.execute("PRAGMA synchronous=FULL")
            connection.execute("PRAGMA busy_timeout=5000")
        except sqlite3.Error as error:
            raise StoreError(f"cannot open SQLite database {path!r}: {error}") from None
        super().__init__(connection, f"sqlite:{path}", records)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        cursor = self.connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
            yield cursor
            cursor.execute("COMMIT")
        except sqlite3.Error as error:
            with contextlib.suppress(sqlite3.Error):
                cursor.execute("ROLLBACK")
            raise StoreError(f"{self.description}: {error}") from None
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                cursor.execute("ROLLBACK")
            raise
        finally:
            cursor.close()
