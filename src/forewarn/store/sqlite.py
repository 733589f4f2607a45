"""SQLite store: the default, a single file (or ``:memory:`` for throwaway runs)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from forewarn.store.base import SQLStore
from forewarn.store.errors import DatabaseInUse, StoreError
from forewarn.store.records import Records


def hold_exclusively(path: str) -> int:
    """Lock ``PATH.lock`` (flock, exclusive) for as long as this process keeps the returned descriptor open; the
    kernel drops the lock when the process ends, however it ends (kill -9 too), so nothing stale is left to clean.

    A sidecar file, not the database: SQLite's own locks on the database are POSIX record locks, which the process
    loses on closing any descriptor of that file; a descriptor of ours on it could end them."""
    lock_path = f"{path}.lock"
    try:
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise StoreError(f"cannot open {lock_path!r}, the lock of SQLite database {path!r}: {error.strerror}") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
        os.close(descriptor)
        raise DatabaseInUse(
            f"SQLite database {path!r} is in use by another forewarn server"
            + (f" (process {holder})" if holder.isdigit() else "")
            + f" (it holds {lock_path!r}); stop that server, or give this one another --db"
        ) from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)  # for the message of the next one that tries
    return descriptor


#: The writer's page cache, in bytes. SQLite's own default (2 MiB) holds a fleet of a few thousand VMs' hot pages;
#: a wave over a million VMs reaches keys all over the index of random EventIds and the VMs' index by name, and with
#: 2 MiB each such page is read from the file again for nearly every change.
DEFAULT_CACHE = 64 * 1024**2


class SQLiteStore(SQLStore):
    name = "sqlite"

    def __init__(self, path: str, records: Iterable[Records] = (), exclusive: bool = False, cache: int = DEFAULT_CACHE):
        """``exclusive``: refuse the file (:class:`DatabaseInUse`) while another process opened it exclusively,
        and hold it until :meth:`close`; a server opens its database so. ``cache``: the writer's page cache, in
        bytes (a read-only reader beside it keeps SQLite's default)."""
        self._held: int | None = None
        if exclusive and path not in ("", ":memory:"):
            self._held = hold_exclusively(path)
        try:
            connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            if path != ":memory:":
                connection.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit is on disk before the response that reports it, even if the machine loses power.
            connection.execute("PRAGMA synchronous=FULL")
            connection.execute("PRAGMA busy_timeout=5000")
            connection.execute(f"PRAGMA cache_size=-{max(1, cache // 1024)}")  # negative: in KiB
        except sqlite3.Error as error:
            self._release()
            raise StoreError(f"cannot open SQLite database {path!r}: {error}") from None
        # A file in WAL mode is read by a connection of its own too, beside the writer's: a long read in a thread
        # (an event's journal, every ended event) then holds up no commit. An in-memory database is the connection's.
        self._path = path if path not in ("", ":memory:") else None
        self._reader: sqlite3.Connection | None = None
        self._reader_guard = threading.Lock()
        super().__init__(connection, f"sqlite:{path}", records)

    def close(self) -> None:
        try:
            with self._reader_guard:
                if self._reader is not None:
                    self._reader.close()
                    self._reader = None
                self._path = None
            with self.guard:
                super().close()
        finally:
            self._release()

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[Any]:
        """A read transaction on the reader's connection: it sees the last commit, not one under way, and waits for
        no writer (WAL). The engine reads there only what it released once committed (ended events)."""
        if self._path is None:
            with self._transaction() as cursor:
                yield cursor
            return
        with self._reader_guard:
            cursor = self._reading_connection().cursor()
            try:
                cursor.execute("BEGIN")
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

    def _reading_connection(self) -> sqlite3.Connection:
        if self._reader is None:
            assert self._path is not None
            try:
                uri = Path(self._path).resolve().as_uri() + "?mode=ro"  # the path percent-encoded
                reader = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
                reader.execute("PRAGMA busy_timeout=5000")
            except sqlite3.Error as error:
                raise StoreError(f"cannot open SQLite database {self._path!r} to read: {error}") from None
            self._reader = reader
        return self._reader

    def _release(self) -> None:
        if self._held is not None:
            os.close(self._held)
            self._held = None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self.guard:
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
