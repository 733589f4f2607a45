"""A write to the maintenanceresources table that DuckDB refuses for want of memory, at whichever statement: the
write is refused as a MemoryError (which the writer tries again once a query has freed the memory), none of its rows
are seen, and the table goes on taking writes.

Near DuckDB's memory bound any statement can fail: a query filling the bound made a ROLLBACK fail, which left the
connection in an aborted transaction that refused every later write; and a COMMIT short of memory is refused as a
TransactionException ("Failed to commit: could not allocate block"), not as an out-of-memory error. Those failures
depend on what the other queries hold at that instant, so the connection here fails the statements it is told to,
the way DuckDB does; everything else runs on a real DuckDB database."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb
import pytest

from forewarn.azure.resource_graph import MaintenanceTable, QueryRequest, run_query
from resource_graph_rows import event
from watched_duckdb import WatchedDatabase

NOW = datetime(2025, 9, 19, 18, 0, tzinfo=UTC)
SHORT_OF_MEMORY = "Out of Memory Error: failed to allocate data of size 32.0 KiB (512.0 MiB/512.0 MiB used)"
COMMIT_SHORT_OF_MEMORY = (
    "TransactionContext Error: Failed to commit: could not allocate block of size 256.0 KiB (511.9 MiB/512.0 MiB used)"
)


class Refusing(WatchedDatabase):
    """Fails the statements that start with one of ``refusals``' keys, each once, with the exception given. A refused
    statement that DuckDB would have started (a write) aborts the transaction first, as DuckDB's own failure does; a
    refused ROLLBACK or COMMIT leaves the transaction as it was."""

    def __init__(self, refusals: dict[str, Exception]):
        self.refusals = refusals
        self.refused: list[str] = []

    def before(self, con, statement, params) -> None:
        for start, error in list(self.refusals.items()):
            if statement.startswith(start):
                del self.refusals[start]
                self.refused.append(start)
                if start not in ("ROLLBACK", "COMMIT"):
                    with pytest.raises(duckdb.Error):
                        con.execute("SELECT error('refused')")  # the transaction is aborted, as DuckDB's own
                raise error


def event_ids(table: MaintenanceTable) -> list[str]:
    answer = run_query(table, QueryRequest("maintenanceresources | project id = tostring(properties.EventId)", now=NOW))
    return sorted(row["id"] for row in answer["data"])


CASES = {
    "a write, then its ROLLBACK": {
        "INSERT INTO": duckdb.OutOfMemoryException(SHORT_OF_MEMORY),
        "ROLLBACK": duckdb.OutOfMemoryException(SHORT_OF_MEMORY),
    },
    "the batch's staging": {"CREATE OR REPLACE TEMP TABLE": duckdb.OutOfMemoryException(SHORT_OF_MEMORY)},
    "the COMMIT": {"COMMIT": duckdb.TransactionException(COMMIT_SHORT_OF_MEMORY)},
    "the BEGIN": {"BEGIN TRANSACTION": duckdb.OutOfMemoryException(SHORT_OF_MEMORY)},
}


@pytest.mark.parametrize("refusals", CASES.values(), ids=CASES.keys())
def test_a_write_refused_short_of_memory_is_said_as_such_and_the_next_write_lands(refusals):
    connection = Refusing({})
    table = MaintenanceTable(connect=connection.connect)
    table.upsert([event(1)], changed_at=NOW)
    connection.refusals.update(refusals)

    with pytest.raises(MemoryError, match="allocate"):
        table.upsert([event(2), event(3)], changed_at=NOW)
    assert connection.refused[0] in refusals
    assert event_ids(table) == ["E1"]  # nothing of the refused write

    assert table.upsert([event(2), event(3)], changed_at=NOW) == 2  # the writer's retry
    assert table.upsert([event(4)], changed_at=NOW) == 1
    assert event_ids(table) == ["E1", "E2", "E3", "E4"]
    assert len(table) == 4


def test_a_transaction_error_that_is_not_for_memory_is_not_taken_for_one():
    conflict = duckdb.TransactionException("TransactionContext Error: Catalog write-write conflict on create")
    table = MaintenanceTable(connect=Refusing({"COMMIT": conflict}).connect)
    with pytest.raises(duckdb.TransactionException, match="conflict"):
        table.upsert([event(1)], changed_at=NOW)
    assert table.upsert([event(1)], changed_at=NOW) == 1
