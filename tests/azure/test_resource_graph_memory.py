"""Resource Graph's memory and answer-size bounds on a real server: a query that needs more memory than
``--resource-graph-memory`` is refused in ARG's error shape, the server's memory stays within that bound, and the
server goes on answering; an answer larger than its byte bound is refused rather than built. Real process on
loopback, real DuckDB."""

from __future__ import annotations

import os
import threading
import time

import click
import pytest
import requests

from forewarn.cli.serve import memory_size
from helpers import Server

SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
ROWS = 300
CENTRAL = "{scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}"
FLEET = (
    f"default_vm: solo\ndefaults: {{subscription: {SUB}, resource_group: rg, location: westeurope}}\n"
    "hosts: [{name: h1}, {name: h2}]\nvms:\n  - {name: solo, host: h1}\n"
    + "".join(f"  - {{name: vm{i}, host: h{1 + i % 2}, scheduled_events_policy: {CENTRAL}}}\n" for i in range(ROWS))
)
ARG = "/providers/Microsoft.ResourceGraph/resources"
MEMORY = 512 * 1024**2
#: Two self-joins of 300 rows (27 million) gathered into one set: before the bound, this took a server to 3 GB in
#: 6.6 s (and past it: it was stopped there).
HOSTILE = (
    "maintenanceresources | join kind=inner (maintenanceresources) on type"
    " | join kind=inner (maintenanceresources) on type | summarize make_set(properties)"
)
#: What the server may grow by while refusing it: DuckDB's bound, plus room for what DuckDB does not count (its
#: threads' stacks, the allocator's slack, Python's objects of the request). Before the bound: past 1.5 GiB, where
#: the watchdog below stops the server so that the machine does not go down with it.
GROWTH_BOUND = MEMORY + 256 * 1024**2
WATCHDOG = 3 * 1024**3 // 2


def arg(server: Server, query: str, **extra) -> requests.Response:
    return requests.post(
        f"{server.arm}{ARG}", params={"api-version": "2022-10-01"}, json={"query": query, **extra}, timeout=120
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(
        tmp_path_factory.mktemp("graph-memory"),
        FLEET,
        extra=["--resource-graph-memory", f"{MEMORY // 1024**2}MiB", "--resource-graph-query-timeout", "60s"],
    ).start()
    running.schedule(type="Freeze", vms=[f"vm{i}" for i in range(ROWS)])  # one event, one row, per VM
    assert arg(running, "maintenanceresources | count").json()["data"] == [{"Count": ROWS}]
    yield running
    running.stop()


def memory_of(pid: int, field: str) -> int:
    """VmRSS (now) or VmHWM (the peak so far) of a process, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for process {pid}")


class Watchdog(threading.Thread):
    """Kills the server if it grows past ``WATCHDOG`` over ``base``: a server without the bound would otherwise take
    the test machine with it."""

    def __init__(self, pid: int, base: int):
        super().__init__(daemon=True)
        self.pid, self.base = pid, base
        self.fired = False
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            try:
                grown = memory_of(self.pid, "VmRSS") - self.base
            except (OSError, AssertionError):
                return
            if grown > WATCHDOG:
                self.fired = True
                os.kill(self.pid, 9)
                return


def test_an_answer_beyond_the_byte_bound_is_refused(server):
    # 300 rows of 150 copies of their properties (about 73 KB a row, 22 MB in all): past 16 MiB of JSON.
    big = (
        "maintenanceresources | project a = tostring(properties) | extend a = strcat(a, a, a, a, a, a, a, a, a, a)"
        " | extend a = strcat(a, a, a, a, a, a, a, a, a, a, a, a, a, a, a)"
    )
    answer = arg(server, big)
    assert answer.status_code == 400, answer.text[:300]
    error = answer.json()["error"]
    assert error["code"] == "BadRequest"
    assert [detail["code"] for detail in error["details"]] == ["ResponsePayloadTooLarge"]
    assert len(answer.content) < 2000
    # The same rows, fewer at a time, are answered: the bound is on the page, not on the query.
    small = arg(server, big, options={"$top": 100})
    assert small.status_code == 200, small.text[:300]
    assert small.json()["count"] == 100
    assert small.json()["$skipToken"]
    # A facet shares the bound with the answer: one too large for what the page left is a FacetError, the page stands.
    faceted = arg(server, big, options={"$top": 100}, facets=[{"expression": "a", "options": {"$top": 1000}}])
    assert faceted.status_code == 200, faceted.text[:300]
    [facet] = faceted.json()["facets"]
    assert facet["resultType"] == "FacetError", str(facet)[:300]
    assert facet["errors"][0]["code"] == "ResponsePayloadTooLarge"
    assert faceted.json()["count"] == 100
    assert len(faceted.content) <= 16 * 1024**2


def hostile_query(server: Server) -> tuple[requests.Response, float, int]:
    """The hostile query's answer, how long it took, and how much the server grew meanwhile (its peak)."""
    pid = server.process.pid
    base = memory_of(pid, "VmRSS")
    watchdog = Watchdog(pid, base)
    watchdog.start()
    began = time.perf_counter()
    answer = None
    try:
        answer = arg(server, HOSTILE)
    except requests.ConnectionError:
        pass  # the watchdog stopped the server
    finally:
        watchdog.done.set()
        watchdog.join()
    seconds = time.perf_counter() - began
    assert not watchdog.fired, f"the server grew past 1.5 GiB in {seconds:.1f} s on one query and was stopped"
    assert answer is not None
    return answer, seconds, memory_of(pid, "VmHWM") - base


def test_a_query_beyond_the_memory_bound_is_refused_and_the_server_stays_within_it(server):
    answer, seconds, growth = hostile_query(server)
    print(f"refused in {seconds:.2f} s; server peak growth {growth / 2**20:.0f} MiB")
    assert growth < GROWTH_BOUND, growth

    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "BadRequest"
    assert [detail["code"] for detail in error["details"]] == ["InvalidQuery", "QueryMemoryLimitExceeded"]
    assert "512 MiB" in error["message"]
    assert set(answer.headers) >= {"x-ms-user-quota-remaining", "x-ms-user-quota-resets-after"}

    # The server is whole: the next query is answered, and so are IMDS and the control API.
    assert arg(server, "maintenanceresources | summarize count() by type").json()["data"] == [
        {"type": "microsoft.maintenance/scheduledevents", "count_": ROWS}
    ]
    assert server.scheduled_events().status_code == 200
    assert requests.get(f"{server.control}/healthz", timeout=10).status_code == 200


def test_rows_written_while_a_query_holds_the_memory_are_kept(server):
    # Changes committed all along the hostile query, while it fills DuckDB's bound: an upsert that meets the bound
    # is tried again once the query has been refused, rather than lost.
    hostile = threading.Thread(target=hostile_query, args=(server,), daemon=True)
    hostile.start()
    scheduled = []
    while hostile.is_alive():
        scheduled += server.schedule(type="Reboot", vms=[f"vm{len(scheduled) % ROWS}"])
        time.sleep(0.1)
    hostile.join()
    ids = ", ".join(f"'{event['event_id']}'" for event in scheduled)
    rows = arg(server, f"maintenanceresources | where properties.EventId in ({ids}) | count")
    assert rows.json()["data"] == [{"Count": len(scheduled)}]


@pytest.mark.parametrize("given, size", [("2GiB", 2 * 1024**3), ("512MiB", 512 * 1024**2), ("65536KiB", 64 * 1024**2)])
def test_the_memory_option_reads_binary_sizes(given, size):
    assert memory_size(given, "--resource-graph-memory") == size


@pytest.mark.parametrize("given", ["2GB", "2 gib", "GiB", "-1GiB", "1.5GiB", "32MiB", "0KiB"])
def test_the_memory_option_refuses_what_it_cannot_read_or_is_too_small(given):
    with pytest.raises(click.BadParameter, match="KiB, MiB or GiB|at least 64MiB"):
        memory_size(given, "--resource-graph-memory")
