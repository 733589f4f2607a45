"""A large write to the maintenanceresources table hands DuckDB its rows a thousand at a time: DuckDB converts a
statement's Python parameters holding the GIL, so one statement of 100,000 rows held every other thread of the
server, the event loop included, for 320 ms. Real DuckDB; the connection only counts what each statement is given."""

from __future__ import annotations

from datetime import UTC, datetime

from forewarn.azure.resource_graph import MaintenanceTable, QueryRequest, run_query
from resource_graph_rows import event
from watched_duckdb import WatchedDatabase

NOW = datetime(2025, 9, 19, 18, 0, tzinfo=UTC)
ROWS = 5_000


class Counting(WatchedDatabase):
    """Notes the most list values one statement was given."""

    largest = 0

    def before(self, con, statement, params) -> None:
        given = sum(len(value) for value in params if isinstance(value, list))
        self.largest = max(self.largest, given)


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
