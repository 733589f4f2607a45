"""A replica about to lead sets every deadline again from its state (as loading it would set them, in their order):
a pass over every event and machine, seconds at a million, that runs in the replication thread while the event loop
goes on answering; the loop only adopts the heap it built. Real PostgreSQL, a leader's and a replica's services."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.fleet.file import load_fleet
from forewarn.replication.forward import Leaders
from forewarn.replication.node import Node, NodeSettings
from forewarn.replication.shared import LEADER, SharedService
from forewarn.store import SQLStore
from forewarn.store.lease import Lease
from helpers import T0, open_store


class Pair:
    """A leader's service and a replica's, on one PostgreSQL schema, and a reader of what the leader commits."""

    def __init__(self, url: str):
        self.fleet = load_fleet("demo")
        writer = open_store(url)
        writer.keeps_changes = True
        self.leader = Maintenance.open(writer, self.fleet, "manual", 1.0, T0, "seed")
        self.reader: SQLStore = open_store(url)
        state = self.reader.load()
        assert state is not None
        self.replica = SharedService.replica_of(open_store(url), state, None, self.fleet)
        self.position = state.position

    def fresh(self):
        """The engine a fresh load of the database builds."""
        state = self.reader.load()
        assert state is not None
        return SharedService.replica_of(self.reader, state, None, self.fleet).settled_engine()

    def close(self) -> None:
        for store in (self.leader.store, self.reader, self.replica.store):
            store.close()


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
        real_pass = AzureComponent.reschedule

        def watched_pass(component: AzureComponent) -> None:
            # The loop answers while the pass runs: a coroutine handed to it now completes.
            answered = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, result=True), loop)
            try:
                answered_now = answered.result(timeout=2)
            except TimeoutError:
                answered_now = False
            passes.append((threading.current_thread().name, answered_now))
            real_pass(component)

        monkeypatch.setattr(AzureComponent, "reschedule", watched_pass)
        node = Node(pair.replica, postgres_url, lease, lambda: open_store(postgres_url), NodeSettings(), Leaders(None))
        node._loop = loop
        assert lease.try_acquire()
        node._lead(changed, after_single=False)

        assert passes == [(threading.current_thread().name, True)]
        assert pair.replica.role == LEADER
        # The deadlines, in the order they fall due and fire, as a fresh load of the database sets them.
        fresh = pair.fresh()
        assert pair.replica.settled_engine().scheduler.pending() == fresh.scheduler.pending()
        assert pair.replica.settled_engine().scheduler.pending()
    finally:
        lease.connection.close()
        pair.close()
