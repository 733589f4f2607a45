"""A DuckDB database for ``MaintenanceTable(connect=...)`` whose connections show each statement to ``before``
first: a test counts what statements are given, or fails the ones it names as DuckDB would."""

from __future__ import annotations

from typing import Any

import duckdb


class WatchedDatabase:
    def connect(self, *args: Any, **kwargs: Any) -> WatchedDatabase:
        self.database = duckdb.connect(*args, **kwargs)
        return self

    def execute(self, *args: Any) -> Any:
        return self.database.execute(*args)

    def cursor(self) -> WatchedCursor:
        return WatchedCursor(self.database.cursor(), self)

    def before(self, con: duckdb.DuckDBPyConnection, statement: str, params: Any) -> None:
        """Called before each statement of a connection (not the database's own setup); may raise."""


class WatchedCursor:
    def __init__(self, con: duckdb.DuckDBPyConnection, watcher: WatchedDatabase):
        self.con, self.watcher = con, watcher

    def execute(self, statement: str, params: Any = ()) -> Any:
        self.watcher.before(self.con, statement, params)
        return self.con.execute(statement, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)
