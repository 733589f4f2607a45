"""The Compute Engine metadata server's reads against the group commit, in process: a GET answers what the database
holds without waiting for a transaction under way. Real SQLite file store, real engine, the handler driven as the
metadata listener drives it."""

from __future__ import annotations

import asyncio

from forewarn.app.runtime import Maintenance
from forewarn.fleet.file import parse_fleet
from forewarn.gcp.component import GceRequest, GcpComponent
from forewarn.gcp.metadata.server import GceMetadata
from forewarn.net.callers import CallerResolver
from forewarn.net.http import Deferred, Request, Response
from helpers import T0, HeldCommits, open_store

FLEET = """
hosts: [{name: host-a}, {name: host-b}]
defaults: {gcp_project: forewarn-demo, gce_zone: europe-west1-b}
gce_instances:
  - {name: web-1, host: host-a, imds: {address: 127.0.0.40}}
  - {name: web-2, host: host-b, imds: {address: 127.0.0.41}}
"""
ADDRESS = {"web-1": "127.0.0.40", "web-2": "127.0.0.41"}
EVENT = "/computeMetadata/v1/instance/maintenance-event"


def get(metadata: GceMetadata, name: str) -> Response | Deferred:
    flavor = ((b"metadata-flavor", b"Google"),)
    return metadata.handle(Request("GET", EVENT, b"", flavor, b"", ("127.0.0.1", 8169), (ADDRESS[name], 50000)))


async def answered(metadata: GceMetadata, name: str) -> bytes:
    """The body of an instance's GET of maintenance-event, once answered (its first read waits for its watch)."""
    answer = get(metadata, name)
    if isinstance(answer, Deferred):
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        answer.attach(future.set_result)
        answer = await future
    assert answer[0] == 200, answer
    return answer[1]


def test_maintenance_event_answers_what_is_committed_without_waiting_for_a_commit_under_way(tmp_path):
    """Whether the instance watches maintenance-event (asked on every GET of it) and the value are read from what
    was committed, dropped once the change that moves them is: while the transaction that gives web-1 its notice is
    under way, web-1 still reads NONE, and so does the control API's view of it; once it is durable, the notice."""
    service = Maintenance.open(open_store(str(tmp_path / "g.db")), parse_fleet(FLEET), "manual", 1.0, T0, "seed")
    metadata = GceMetadata(service, CallerResolver(service.settled_engine().fleet, shared_ports={8169}))

    async def notify_and_read() -> list:
        for _ in range(2):  # the first read starts the watch; the next, as an agent polls, finds it committed
            assert [await answered(metadata, name) for name in ADDRESS] == [b"NONE", b"NONE"]
        held = HeldCommits(service)
        maintenance = GceRequest(("web-1",))  # its notice (60 s) from now: maintenance-event changes at once
        notice = service.perform_soon(lambda engine: engine.component(GcpComponent).schedule_gce(maintenance))
        await held.wait_entered()
        # The transaction is held until the reads are done: a read that waited for it would fail it (held's 10 s).
        during = [get(metadata, name)[1] for name in ADDRESS]
        during += [metadata.read("web-1", EVENT)[1], notice.done()]
        held.release.set()
        await asyncio.wait([notice])
        return [*during, await answered(metadata, "web-1"), await answered(metadata, "web-2")]

    assert asyncio.run(notify_and_read()) == [
        *(b"NONE", b"NONE", b"NONE", False),  # during the transaction: what the database holds, at once
        *(b"MIGRATE_ON_HOST_MAINTENANCE", b"NONE"),  # once it is durable
    ]
    service.store.close()


def test_a_get_that_reads_the_engine_waits_for_the_transaction_under_way_off_the_event_loop(tmp_path):
    """A GET whose answer is not kept yet (here, maintenance-event asked with ``alt=text`` for the first time) while
    a transaction is under way is answered once that transaction has landed, with what it committed; a kept answer
    is given meanwhile."""
    service = Maintenance.open(open_store(str(tmp_path / "g.db")), parse_fleet(FLEET), "manual", 1.0, T0, "seed")
    metadata = GceMetadata(service, CallerResolver(service.settled_engine().fleet, shared_ports={8169}))
    flavor = ((b"metadata-flavor", b"Google"),)
    as_text = Request("GET", EVENT, b"alt=text", flavor, b"", ("127.0.0.1", 8169), (ADDRESS["web-1"], 50000))

    async def notify_and_read() -> list:
        for _ in range(2):  # both watch maintenance-event, their plain answers kept
            assert [await answered(metadata, name) for name in ADDRESS] == [b"NONE", b"NONE"]
        held = HeldCommits(service)
        maintenance = GceRequest(("web-1",))
        notice = service.perform_soon(lambda engine: engine.component(GcpComponent).schedule_gce(maintenance))
        await held.wait_entered()
        waiting = metadata.handle(as_text)  # not kept: the engine is to be read
        assert isinstance(waiting, Deferred)
        during = [get(metadata, "web-1")[1], notice.done()]  # kept: at once, as committed
        later: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        waiting.attach(later.set_result)
        held.release.set()
        return [*during, (await later)[:2]]

    assert asyncio.run(notify_and_read()) == [b"NONE", False, (200, b"MIGRATE_ON_HOST_MAINTENANCE")]
    service.store.close()


def test_a_kept_answer_a_commit_changed_is_rendered_as_it_lands_and_answered_during_the_next(tmp_path):
    """An instance that asked before a commit changed it is answered at once during the next transaction: its kept
    answer (and whether it watches) is rendered again as the commit lands, not dropped to be read after the next."""
    service = Maintenance.open(open_store(str(tmp_path / "g.db")), parse_fleet(FLEET), "manual", 1.0, T0, "seed")
    metadata = GceMetadata(service, CallerResolver(service.settled_engine().fleet, shared_ports={8169}))

    def notice(name: str):
        maintenance = GceRequest((name,))
        return service.perform_soon(lambda engine: engine.component(GcpComponent).schedule_gce(maintenance))

    async def notify_and_read() -> bytes:
        for _ in range(2):  # the first read starts the watch; the next finds it committed
            assert await answered(metadata, "web-1") == b"NONE"
        await notice("web-1")
        held = HeldCommits(service)
        other = notice("web-2")
        await held.wait_entered()
        # The transaction is held until the read is done: a read that waited for it would fail it (held's 10 s).
        during = get(metadata, "web-1")
        assert not isinstance(during, Deferred) and not other.done()
        held.release.set()
        await other
        return during[1]

    assert asyncio.run(notify_and_read()) == b"MIGRATE_ON_HOST_MAINTENANCE"
    service.store.close()
