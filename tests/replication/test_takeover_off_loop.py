"""A replica about to lead sets every deadline again from its state (as loading it would set them, in their order):
a pass over every event and machine, seconds at a million, that runs in the replication thread while the event loop
goes on answering; the loop only adopts the heap it built. Real PostgreSQL, a leader's and a replica's services."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.replication.forward import Leaders
from forewarn.replication.node import Node, NodeSettings
from forewarn.replication.shared import LEADER, SharedService
from forewarn.server.tuning import collector_paused
from forewarn.store.lease import Lease
from helpers import open_store
from replication_helpers import Pair


def watched(real, loop: asyncio.AbstractEventLoop, calls: list[tuple[str, bool]]):
    """``real``, noting the thread that calls it and whether the event loop answers meanwhile (a coroutine handed to
    it completes)."""

    def call(*args, **named):
        answered = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, result=True), loop)
        try:
            answered_now = answered.result(timeout=2)
        except TimeoutError:
            answered_now = False
        calls.append((threading.current_thread().name, answered_now))
        return real(*args, **named)

    return call


def node_of(pair: Pair, url: str, lease: Lease, loop: asyncio.AbstractEventLoop) -> Node:
    node = Node(pair.replica, url, lease, lambda: open_store(url), NodeSettings(), Leaders(None))
    node._loop = loop
    assert lease.try_acquire()
    return node


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, name="the-event-loop", daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(5)
    running.close()


def test_a_new_leader_sets_its_deadlines_again_off_the_event_loop(postgres_url, loop, monkeypatch):
    pair = Pair(postgres_url)
    lease = Lease(postgres_url)
    try:
        hosts = tuple(pair.leader.settled_engine().fleet.hosts)
        azure_commands.schedule(pair.leader, ScheduleRequest(EventType.FREEZE, hosts=hosts, notice=timedelta(hours=1)))
        pair.leader.advance_clock(timedelta(minutes=30))
        azure_commands.schedule(pair.leader, ScheduleRequest(EventType.REBOOT, hosts=hosts[:1]))
        changed = pair.reader.changes_since(pair.position, pair.replica.projected_rows())
        assert changed is not None and changed.commits

        passes: list[tuple[str, bool]] = []
        monkeypatch.setattr(AzureComponent, "reschedule", watched(AzureComponent.reschedule, loop, passes))
        node_of(pair, postgres_url, lease, loop)._lead(changed, False, pair.reader)

        assert passes == [(threading.current_thread().name, True)]
        assert pair.replica.role == LEADER
        # The deadlines, in the order they fall due and fire, as a fresh load of the database sets them.
        fresh = pair.fresh()
        assert pair.replica.settled_engine().scheduler.pending() == fresh.scheduler.pending()
        assert pair.replica.settled_engine().scheduler.pending()
    finally:
        lease.connection.close()
        pair.close()


def test_a_new_leader_with_a_projection_left_builds_its_engine_from_the_database_off_the_event_loop(
    postgres_url, loop, monkeypatch
):
    """A replica on a real clock applies in memory the deadlines that pass while the leader is gone (projections):
    it cannot keep that engine to lead, and loads the database's state. The load and the build run in the
    replication thread; the event loop only adopts the engine."""
    pair = Pair(postgres_url, clock="real")
    lease = Lease(postgres_url)
    try:
        azure_commands.schedule(
            pair.leader, ScheduleRequest(EventType.FREEZE, vms=("standalone-01",), notice=timedelta(minutes=15))
        )
        changed = pair.reader.changes_since(pair.position, pair.replica.projected_rows())
        assert changed is not None and changed.commits
        pair.replica.replicate(changed, catch_up=False)
        pair.wall.value += 20 * 60  # past NotBefore: the replica starts the event in memory
        pair.replica.catch_up()
        assert pair.replica.projected
        changed = pair.reader.changes_since(changed.position, pair.replica.projected_rows())
        assert changed is not None

        builds: list[tuple[str, bool]] = []
        monkeypatch.setattr(SharedService, "engine_of", watched(SharedService.engine_of, loop, builds))
        node_of(pair, postgres_url, lease, loop)._lead(changed, False, pair.reader)

        assert builds == [(threading.current_thread().name, True)]
        assert pair.replica.role == LEADER and not pair.replica.projected
        # It led from the database's state, then committed the start that came due while nobody led.
        fresh = pair.fresh()
        assert fresh.component(AzureComponent).events == pair.replica.settled_engine().component(AzureComponent).events
        assert fresh.scheduler.pending() == pair.replica.settled_engine().scheduler.pending()
        started = [entry.kind for entry in pair.replica.runtime.journal(limit=20)]
        assert "started" in started, started
    finally:
        lease.connection.close()
        pair.close()


def test_the_collector_is_paused_while_the_deadlines_are_set_again(postgres_url, loop, monkeypatch):
    """The pass makes a deadline a live event: the cyclic collector, which the allocations would start, would walk
    them holding the interpreter, in the replication thread, and the event loop would wait. The server's setting
    (``engine_building``) reaches the runtime, whose reset and rebuilds use it too."""
    pair = Pair(postgres_url)
    lease = Lease(postgres_url)
    try:
        pair.replica.engine_building = collector_paused
        assert pair.replica.runtime.engine_building is collector_paused
        hosts = tuple(pair.leader.settled_engine().fleet.hosts)
        azure_commands.schedule(pair.leader, ScheduleRequest(EventType.FREEZE, hosts=hosts))
        changed = pair.reader.changes_since(pair.position, pair.replica.projected_rows())
        assert changed is not None
        collecting: list[bool] = []
        real_pass = AzureComponent.reschedule

        def noting(component: AzureComponent) -> None:
            collecting.append(gc.isenabled())
            real_pass(component)

        monkeypatch.setattr(AzureComponent, "reschedule", noting)
        node_of(pair, postgres_url, lease, loop)._lead(changed, False, pair.reader)
        assert collecting == [False] and gc.isenabled()
    finally:
        lease.connection.close()
        pair.close()
