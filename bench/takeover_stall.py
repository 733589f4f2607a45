"""The longest event-loop gap while a replica takes over as the leader (issue 26: no stall).

In process, on PostgreSQL (a schema of its own, dropped afterwards), as ``forewarn serve --role shared`` runs it (the
heap settled, the collector tuned, threads switching every millisecond): a leader's service over a generated fleet
with a Freeze a day ahead for every VM (one live event each), a replica's service that loaded that state, then one
more commit at the leader, which the replica takes as it takes over. The replica's ``Node`` takes over as its
replication thread does once it holds the lock (``Node._promote``), while a task on the replica's event loop (a
thread of its own, as the server's) sleeps 1 ms at a time; the longest gap between two of its wake-ups is the
longest the loop was held. Two ways (``--way``, repeatable; default: both):

- ``kept``: the replica keeps its engine and sets every deadline again from its state;
- ``rebuilt``: it cannot keep it, the journal no longer telling what it lacks (reset, as after a single server;
  pruned, for a replica further behind than its retention), and builds one from the database.

Verdict: under 50 ms (the goal every server operation has, bench/README.md's stall table).

    .venv/bin/python bench/takeover_stall.py                # 100,000 VMs (a few minutes)
    .venv/bin/python bench/takeover_stall.py --vms 1000000  # about a quarter of an hour, 4 GB
    .venv/bin/python bench/takeover_stall.py --check        # 2,000 VMs: fails on a broken setup only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from datetime import UTC, datetime, timedelta

from benchlib import (
    SRC,  # noqa: F401  (imported first: this tree's forewarn, whatever the venv has installed)
    Meter,
    Usage,
    postgres_backends,
)
from million import drop_schema, postgres_schema
from rebuild_stall import conclude, judged

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml
from forewarn.replication.forward import Leaders
from forewarn.replication.node import Node, NodeSettings
from forewarn.replication.shared import LEADER, SharedService
from forewarn.server.stores import open_fleet_store
from forewarn.server.tuning import collector_paused, settle_heap, tune_collector, tune_thread_switching
from forewarn.store.lease import Lease

T0 = datetime(2026, 4, 20, 22, 11, 58, tzinfo=UTC)
HOSTS_PER_SCHEDULE = 5_000
WAYS = ("kept", "rebuilt")


def leader_and_replica(vms: int, url: str, way: str) -> tuple[Maintenance, SharedService]:
    """A leader with a live event for every VM, and a replica that loaded its state; then one more commit at the
    leader, which the replica has not taken (and, ``rebuilt``, the journal reset)."""
    fleet = parse_fleet(fleet_yaml(FleetShape(vms=vms, seed="bench")))
    writer = open_fleet_store(url)
    writer.keeps_changes = True  # the journal a replica reads the last commits from
    leader = Maintenance.open(writer, fleet, "manual", 1.0, T0, "bench")
    hosts = tuple(fleet.hosts)
    for start in range(0, len(hosts), HOSTS_PER_SCHEDULE):
        part = hosts[start : start + HOSTS_PER_SCHEDULE]
        azure_commands.schedule(leader, ScheduleRequest(EventType.FREEZE, hosts=part, notice=timedelta(days=1)))
    reader = open_fleet_store(url)
    state = reader.load()
    assert state is not None
    replica = SharedService.replica_of(reader, state, None, fleet)
    del state
    event_id = next(iter(leader.settled_engine().component(AzureComponent).events))
    azure_commands.approve(leader, [event_id], "the bench")
    if way == "rebuilt":
        writer.journal_reset()
    return leader, replica


def took_over(replica: SharedService, url: str) -> tuple[float, float, Usage]:
    """(the longest gap of the replica's event loop, the takeover's wall time in seconds), and what the machine did
    meanwhile (the PostgreSQL backends serving this process count as its own work)."""
    settle_heap()
    tune_collector()
    tune_thread_switching()
    replica.engine_building = collector_paused  # as the server sets it
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="the-event-loop", daemon=True)
    thread.start()
    gaps: list[float] = []
    running = threading.Event()
    running.set()

    async def ticker() -> None:
        last = time.perf_counter()
        while running.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticking = asyncio.run_coroutine_threadsafe(ticker(), loop)
    lease = Lease(url)
    node = Node(replica, url, lease, lambda: open_fleet_store(url), NodeSettings(), Leaders(None))
    node._loop = loop
    assert lease.try_acquire()
    reader = open_fleet_store(url)
    time.sleep(0.05)
    with Meter({"postgres": lambda: postgres_backends([os.getpid()])}, own="bench") as meter:
        started = time.perf_counter()
        node._promote(reader)
        took = time.perf_counter() - started
    time.sleep(0.05)
    running.clear()
    ticking.result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    assert replica.role == LEADER
    for store in (reader, replica.store):
        store.close()
    lease.connection.close()
    assert meter.usage is not None
    return max(gaps), took, meter.usage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vms", type=int, default=100_000, help="VMs of the generated fleet, one live event each")
    parser.add_argument("--way", choices=WAYS, action="append", help="how the replica takes over (default: each)")
    parser.add_argument(
        "--db", default="postgresql://postgres@127.0.0.1:5432/test", help="PostgreSQL (a schema of its own)"
    )
    parser.add_argument("--check", action="store_true", help="2,000 VMs: fails on a broken setup only")
    args = parser.parse_args()
    vms = 2_000 if args.check else args.vms
    verdicts = []
    for way in args.way or WAYS:
        schema, url = postgres_schema(args.db)
        try:
            leader, replica = leader_and_replica(vms, url, way)
            longest, took, usage = took_over(replica, url)
            leader.store.close()
        finally:
            drop_schema(args.db, schema)
        print(f"{vms:,} VMs, a live event each, {way}: the replica led {took:.2f} s after it took the lock")
        verdicts.append(judged(longest, usage, args.check))
    conclude(verdicts, args.check)


if __name__ == "__main__":
    main()
