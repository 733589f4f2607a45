"""Resource Graph's table after the engine is rebuilt from the database: loaded again, the events that ended read from
the database on the table's writer thread, not where the engine told it (at a million VMs, seconds of the event loop
every metadata GET waits on); the row of an event that ended is in the table again."""

from __future__ import annotations

import threading

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.azure.resource_graph import QueryRequest, run_query
from forewarn.azure.resource_graph.api import ResourceGraphApi
from forewarn.fleet.file import parse_fleet
from helpers import T0, HeldCommits, open_store

CENTRAL = "{scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}"
FLEET = f"""
hosts: [{{name: h1}}]
vms:
  - {{name: central-1, host: h1, scheduled_events_policy: {CENTRAL}}}
  - {{name: central-2, host: h1, scheduled_events_policy: {CENTRAL}}}
"""


class ReadThreads:
    """The store's reads of Azure's events, noting the thread each ran in."""

    def __init__(self, service: Maintenance):
        self.real = service.store.read
        self.threads: list[str] = []
        service.store.read = self  # type: ignore[method-assign]

    def __call__(self, sql: str, params=()):
        if "forewarn_azure_events" in sql:
            self.threads.append(threading.current_thread().name)
        return self.real(sql, params)


def test_the_table_is_loaded_again_after_a_rebuild_reading_the_ended_events_on_its_writer_thread(tmp_path):
    service = Maintenance.open(open_store(str(tmp_path / "g.db")), parse_fleet(FLEET, "c.yaml"), "manual", 1.0, T0, "s")
    graph = ResourceGraphApi(service)
    [ended] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("central-1",)))
    [live] = azure_commands.schedule(service, ScheduleRequest(EventType.REBOOT, vms=("central-2",), notice=None))
    while service.settled_engine().component(AzureComponent).find(ended.event_id).status is not EventStatus.COMPLETED:
        service.step_clock()
    assert ended.event_id not in service.settled_engine().component(AzureComponent).events  # only the database has it

    reads = ReadThreads(service)
    held = HeldCommits(service, fail_first=True)
    held.release.set()
    try:
        azure_commands.approve(service, [live.event_id], by="test")  # its commit fails: the engine is rebuilt
    except Unavailable:
        pass
    graph.written()
    assert reads.threads and all(name.startswith("resource-graph-writer") for name in reads.threads)
    names = run_query(graph.table, QueryRequest("maintenanceresources | project name"))["data"]
    assert {row["name"] for row in names} == {ended.event_id, live.event_id}
    service.store.close()


def test_rows_of_commits_made_while_the_writer_is_busy_are_written_together(tmp_path):
    """Each write holds the interpreter for part of its DuckDB statements (6 ms and more for a few rows), and with it
    every metadata GET: the rows of the commits that come while one write runs wait for it and go in one write."""
    fleet = "hosts: [{name: h1}]\nvms:\n" + "".join(
        f"  - {{name: central-{n}, host: h1, scheduled_events_policy: {CENTRAL}}}\n" for n in range(1, 5)
    )
    service = Maintenance.open(open_store(str(tmp_path / "g.db")), parse_fleet(fleet, "c.yaml"), "manual", 1.0, T0, "s")
    graph = ResourceGraphApi(service)
    graph.written()
    table = graph.table
    real_upsert, started, release = table.upsert, threading.Event(), threading.Event()
    written: list[list[str]] = []

    def upsert(rows, changed_at):
        written.append([row["name"] for row in rows])
        started.set()
        release.wait(10)  # the first write runs until the test has made the other commits
        return real_upsert(rows, changed_at)

    table.upsert = upsert  # type: ignore[method-assign]
    scheduled = [ScheduleRequest(EventType.FREEZE, vms=(f"central-{n}",)) for n in range(1, 5)]
    [first] = azure_commands.schedule(service, scheduled[0])
    assert started.wait(10)
    later = [azure_commands.schedule(service, request)[0] for request in scheduled[1:]]
    release.set()
    graph.written()
    assert len(written) == 2  # the first write, then the three commits made while it ran
    assert [len(names) for names in written] == [1, 3]
    names = run_query(graph.table, QueryRequest("maintenanceresources | project name"))["data"]
    assert sorted(row["name"] for row in names) == sorted(event.event_id for event in [first, *later])
    service.store.close()
