"""A large write to the maintenanceresources table hands DuckDB its rows a thousand at a time: DuckDB converts a
statement's Python parameters holding the GIL, so one statement of 100,000 rows held every other thread of the
server, the event loop included, for 320 ms. Real DuckDB; the connection only counts what each statement is given."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

from forewarn.azure.resource_graph import MaintenanceTable, QueryRequest, run_query
from resource_graph_rows import event

NOW = datetime(2025, 9, 19, 18, 0, tzinfo=UTC)
ROWS = 5_000


class Counting:
    """A DuckDB database whose connections note the most list values one statement was given."""

    def __init__(self) -> None:
        self.largest = 0

    def connect(self, *args, **kwargs) -> Counting:
        self.database = duckdb.connect(*args, **kwargs)
        return self

    def execute(self, *args):
        return self.database.execute(*args)

    def cursor(self) -> CountingCursor:
        return CountingCursor(self.database.cursor(), self)


class CountingCursor:
    def __init__(self, con: duckdb.DuckDBPyConnection, owner: Counting):
        self.con, self.owner = con, owner

    def execute(self, statement: str, params=()):
        given = sum(len(value) for value in params if isinstance(value, list))
        self.owner.largest = max(self.owner.largest, given)
        return self.con.execute(statement, params)

    def __getattr__(self, name):
        return getattr(self.con, name)


def test_a_large_write_gives_duckdb_a_thousand_rows_a_statement_and_writes_them_all():
    counting = Counting()
    table = MaintenanceTable(connect=counting.connect)
    assert table.upsert([event(n) for n in range(ROWS)], changed_at=NOW) == ROWS
    per_row = 16  # one value a column
    assert 0 < counting.largest <= 1_000 * per_row
    answer = run_query(table, QueryRequest("maintenanceresources | count", now=NOW))
    assert answer["data"] == [{"Count": ROWS}]
    assert table.upsert([event(n, "Completed") for n in range(ROWS)], changed_at=NOW) == ROWS  # updated in place
    answer = run_query(
        table, QueryRequest("maintenanceresources | summarize count() by tostring(properties.EventStatus)")
    )
    assert answer["data"] == [{"properties_EventStatus": "Completed", "count_": ROWS}]
