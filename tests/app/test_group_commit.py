"""Group commit (Maintenance.perform_soon): the commands of one turn of the event loop go in one transaction, each
answered only once that transaction is durable; a refused command fails alone; a failed commit fails them all and
leaves the engine as the database has it. The transaction runs in a worker thread while the next group forms; the
engine is read only as committed. Real SQLite file store, real engine."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.imds import scheduled_events
from forewarn.azure.imds.scheduled_events import AzureImds, ImdsSettings
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.core.errors import CoreError
from forewarn.fleet.file import parse_fleet
from forewarn.net.callers import CallerResolver
from forewarn.net.http import DROP, Deferred, Request
from forewarn.store import StoreError
from helpers import T0, HeldCommits, HeldLoad, open_store, small_fleet


def scheduled(tmp_path) -> tuple[Maintenance, list[str]]:
    service = Maintenance.open(open_store(str(tmp_path / "g.db")), small_fleet(), "manual", 1.0, T0, "seed")
    events = azure_commands.schedule(
        service, ScheduleRequest(EventType.FREEZE, hosts=tuple(service.settled_engine().fleet.hosts))
    )
    assert len(events) >= 2
    return service, [event.event_id for event in events]


def test_the_commands_of_one_turn_share_one_transaction_answered_after_it(tmp_path):
    service, ids = scheduled(tmp_path)
    commits = []
    commit = service.store.commit

    def counted(changes, *rest, **named):
        commit(changes, *rest, **named)
        commits.append([future.done() for future in futures])  # nothing is answered before this returns

    service.store.commit = counted  # type: ignore[method-assign]
    futures: list[asyncio.Future] = []

    async def approve_all() -> list:
        futures.extend(azure_commands.approve_soon(service, [event_id], by="test") for event_id in ids)
        futures.append(azure_commands.approve_soon(service, ["NO-SUCH-EVENT"], by="test"))
        return await asyncio.gather(*futures, return_exceptions=True)

    outcomes = asyncio.run(approve_all())
    assert commits == [[False] * len(futures)]  # one commit for the whole group, before any answer
    assert all(isinstance(outcome, list) and outcome for outcome in outcomes[:-1])
    assert isinstance(outcomes[-1], CoreError)  # refused alone
    service.store.close()
    again = Maintenance.open(open_store(str(tmp_path / "g.db")), small_fleet(), "manual", 1.0, T0, "seed")
    assert {again.settled_engine().component(AzureComponent).events[event_id].status for event_id in ids} == {
        EventStatus.STARTED
    }  # durable
    again.store.close()


def test_a_failed_group_commit_fails_every_command_and_changes_nothing(tmp_path):
    service, ids = scheduled(tmp_path)

    def fails(*args, **named):
        raise StoreError("disk full")

    service.store.commit = fails  # type: ignore[method-assign]

    async def approve_all() -> list:
        return await asyncio.gather(
            *(azure_commands.approve_soon(service, [event_id], by="test") for event_id in ids), return_exceptions=True
        )

    outcomes = asyncio.run(approve_all())
    assert all(isinstance(outcome, Unavailable) for outcome in outcomes)
    # The engine was rebuilt from the database: no approval shows anywhere.
    assert {service.settled_engine().component(AzureComponent).events[event_id].status for event_id in ids} == {
        EventStatus.SCHEDULED
    }
    service.store.close()


def test_perform_soon_needs_a_running_loop(tmp_path):
    service, ids = scheduled(tmp_path)
    with pytest.raises(RuntimeError):
        azure_commands.approve_soon(service, ids[:1], by="test")
    service.store.close()


def status(service: Maintenance, event_id: str) -> EventStatus:
    return service.settled_engine().component(AzureComponent).events[event_id].status


def test_the_next_group_forms_while_a_transaction_is_under_way(tmp_path):
    """The transaction runs in a worker thread: approvals that arrive meanwhile wait, untouched, and go together in
    the next transaction once the first is durable."""
    service, ids = scheduled(tmp_path)
    held = HeldCommits(service)

    async def run() -> None:
        first = azure_commands.approve_soon(service, [ids[0]], by="test")
        await held.wait_entered()  # the first group's transaction is under way (held)
        later = [azure_commands.approve_soon(service, [event_id], by="test") for event_id in ids[1:]]
        for _ in range(5):
            await asyncio.sleep(0)  # turns of the loop: nothing starts while the first transaction is held
        assert not first.done() and not any(future.done() for future in later)
        assert len(held.sizes) == 1
        held.release.set()
        await asyncio.gather(first, *later)

    asyncio.run(run())
    assert len(held.sizes) == 2  # the first approval alone, then all the others in one transaction
    assert {status(service, event_id) for event_id in ids} == {EventStatus.STARTED}
    service.store.close()


def test_reading_the_engine_waits_for_the_transaction_under_way(tmp_path):
    """While a group's transaction is under way the engine holds its changes; whoever reads the engine first waits
    for them to be durable, so that nothing uncommitted is ever shown."""
    service, ids = scheduled(tmp_path)
    held = HeldCommits(service)

    async def run() -> None:
        approval = azure_commands.approve_soon(service, [ids[0]], by="test")
        await held.wait_entered()
        threading.Thread(target=held.release.set).start()
        seen = status(service, ids[0])  # blocks until the commit is done
        assert held.finished == [True] and seen is EventStatus.STARTED
        assert approval.done()  # and the group was answered on the way
        await approval

    asyncio.run(run())
    service.store.close()


def test_a_command_waits_for_the_group_under_way_and_follows_it(tmp_path):
    service, ids = scheduled(tmp_path)
    held = HeldCommits(service)

    async def run() -> None:
        approval = azure_commands.approve_soon(service, [ids[0]], by="test")
        await held.wait_entered()
        threading.Thread(target=held.release.set).start()
        azure_commands.cancel(service, ids[1])  # committed synchronously, after the approval's transaction
        await approval

    asyncio.run(run())
    assert held.sizes[0] > 0 and len(held.sizes) == 2
    kinds = [(entry.kind, entry.event_id) for entry in service.journal(limit=20)]
    assert kinds.index(("approved", ids[0])) < kinds.index(("canceled", ids[1]))
    service.store.close()


def test_a_failed_transaction_fails_its_group_only_and_the_next_runs_on_the_rebuilt_engine(tmp_path):
    service, ids = scheduled(tmp_path)
    held = HeldCommits(service, fail_first=True)

    async def run() -> list:
        first = azure_commands.approve_soon(service, [ids[0]], by="test")
        await held.wait_entered()
        later = [azure_commands.approve_soon(service, [event_id], by="test") for event_id in ids[1:]]
        held.release.set()
        return await asyncio.gather(first, *later, return_exceptions=True)

    outcomes = asyncio.run(run())
    assert isinstance(outcomes[0], Unavailable)
    assert all(isinstance(outcome, list) and outcome for outcome in outcomes[1:])
    assert status(service, ids[0]) is EventStatus.SCHEDULED
    assert {status(service, event_id) for event_id in ids[1:]} == {EventStatus.STARTED}
    service.store.close()
    again = Maintenance.open(open_store(str(tmp_path / "g.db")), small_fleet(), "manual", 1.0, T0, "seed")
    assert again.settled_engine().component(AzureComponent).events[ids[0]].status is EventStatus.SCHEDULED
    assert {again.settled_engine().component(AzureComponent).events[event_id].status for event_id in ids[1:]} == {
        EventStatus.STARTED
    }
    again.store.close()


def test_the_rebuild_after_a_failed_transaction_runs_in_a_thread_and_nothing_reads_the_engine_meanwhile(tmp_path):
    """At a million VMs the rebuild takes seconds: on the event loop, every metadata GET would wait for it. It runs in
    a thread; meanwhile reads are refused as retryable (the engine may hold the failed commit's changes) and the
    commands that came wait for the rebuilt engine."""
    service, ids = scheduled(tmp_path)
    held = HeldCommits(service, fail_first=True)
    load = HeldLoad(service.store)

    async def run() -> tuple:
        first = azure_commands.approve_soon(service, [ids[0]], by="test")
        await held.wait_entered()
        held.release.set()
        failed = await asyncio.gather(first, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, load.loading.wait, 10)
        later = azure_commands.approve_soon(service, [ids[1]], by="test")
        await asyncio.sleep(0.05)  # the loop goes on while the engine is built
        with pytest.raises(Unavailable, match="being reloaded"):
            service.settled_engine()
        waiting = later.done()
        load.loaded.set()
        return failed, waiting, await later

    (failed, waiting, made) = asyncio.run(run())
    assert isinstance(failed[0], Unavailable) and waiting is False and made
    assert load.ran_off_the_main_thread()
    events = service.settled_engine().component(AzureComponent).events
    assert (events[ids[0]].approvals, events[ids[1]].approvals) == ((), ("test",))  # the first undone, the next made
    assert ("approved", ids[1]) in [(entry.kind, entry.event_id) for entry in service.journal(limit=5)]
    service.store.close()


def test_a_reset_waiting_for_a_transaction_that_fails_is_not_raced_by_its_rebuild(tmp_path):
    """The reset installs an engine built afresh from the store: the failed transaction starts no rebuild of its own,
    which would replace the reset's future (a second reset waiting on it would never be answered)."""
    service, ids = scheduled(tmp_path)
    held = HeldCommits(service, fail_first=True)

    async def run() -> list:
        approval = azure_commands.approve_soon(service, [ids[0]], by="test")
        await held.wait_entered()
        first = asyncio.ensure_future(service.reset_soon())
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(service.reset_soon())  # waits for the first reset
        await asyncio.sleep(0.01)
        held.release.set()
        return await asyncio.wait_for(asyncio.gather(approval, first, second, return_exceptions=True), 10)

    outcomes = asyncio.run(run())
    assert isinstance(outcomes[0], Unavailable) and outcomes[1:] == [None, None]
    assert service.resetting is None
    assert service.settled_engine().component(AzureComponent).events == {}  # reset: no events
    service.store.close()


def test_reads_of_the_store_wait_for_the_transaction_in_the_worker(tmp_path):
    """The worker's transaction and the loop's reads (the journal, the outbox) share one connection: each waits for
    the other instead of starting a transaction inside it."""
    service, ids = scheduled(tmp_path)

    async def run() -> None:
        pending = []
        for event_id in ids:
            pending.append(azure_commands.approve_soon(service, [event_id], by="test"))
            await asyncio.sleep(0)
            service.journal(limit=5)
            service.deliveries(limit=5)
        await asyncio.gather(*pending)

    asyncio.run(run())
    assert {status(service, event_id) for event_id in ids} == {EventStatus.STARTED}
    service.store.close()


def test_schedules_through_the_group_commit(tmp_path):
    service = Maintenance.open(open_store(str(tmp_path / "s.db")), small_fleet(), "manual", 1.0, T0, "seed")

    async def run() -> list:
        return await asyncio.gather(
            azure_commands.schedule_soon(service, ScheduleRequest(EventType.FREEZE, vms=("solo",))),
            azure_commands.schedule_soon(service, ScheduleRequest(EventType.FREEZE, vms=("ghost",))),
            azure_commands.schedule_soon(service, ScheduleRequest(EventType.REBOOT, vms=("WestNO_0",))),
            return_exceptions=True,
        )

    solo, ghost, west = asyncio.run(run())
    assert isinstance(ghost, CoreError)  # refused alone
    service.store.close()
    again = Maintenance.open(open_store(str(tmp_path / "s.db")), small_fleet(), "manual", 1.0, T0, "seed")
    assert {event.event_id for event in solo + west} <= set(again.settled_engine().component(AzureComponent).events)
    again.store.close()


def test_a_cached_document_is_served_while_a_transaction_is_under_way(tmp_path):
    """The metadata GET of a scope whose document is cached does not wait for the group commit under way: the cache
    drops a document only once the change that moved it is committed, so it shows what the database holds. Another
    scope's GET would otherwise sit behind the fsync, and every request on the loop with it."""
    service, ids = scheduled(tmp_path)
    imds = AzureImds(service, CallerResolver(service.settled_engine().fleet, shared_ports={8169}))
    approved = service.settled_engine().component(AzureComponent).events[ids[0]]
    other_scope = next(
        scope for scope in azure_fleet(service.settled_engine().fleet).vms_by_scope if scope != approved.scope
    )
    before = {scope: imds.document(scope, "2020-07-01") for scope in (approved.scope, other_scope)}
    held = HeldCommits(service)

    async def run() -> None:
        approval = azure_commands.approve_soon(service, [ids[0]], by="test")
        await held.wait_entered()
        # Both documents come from the cache, the commit still held: the approved scope's too, as committed.
        assert imds.document(other_scope, "2020-07-01") == before[other_scope]
        assert imds.document(approved.scope, "2020-07-01") == before[approved.scope]
        assert held.finished == [] and not approval.done()
        held.release.set()
        await approval
        after = json.loads(imds.document(approved.scope, "2020-07-01"))
        assert [event["EventStatus"] for event in after["Events"] if event["EventId"] == ids[0]] == ["Started"]

    asyncio.run(run())
    service.store.close()


def dropping_down_vms(tmp_path) -> tuple[Maintenance, AzureImds, Request]:
    """The small fleet's service, its Azure metadata dropping down VMs' connections, and solo's GET (the fleet's
    default VM)."""
    service = Maintenance.open(open_store(str(tmp_path / "d.db")), small_fleet(), "manual", 1.0, T0, "seed")
    settings = ImdsSettings(while_down="drop")
    imds = AzureImds(service, CallerResolver(service.settled_engine().fleet, shared_ports={8169}), settings)
    get = Request(
        "GET", "/metadata/scheduledevents", b"api-version=2020-07-01", ((b"metadata", b"true"),), b"",
        ("127.0.0.1", 8169), ("127.0.0.1", 50000),
    )  # fmt: skip
    return service, imds, get


def test_a_vm_down_is_dropped_only_once_its_impact_is_committed_and_the_read_does_not_wait(tmp_path):
    """With down VMs' connections dropped (the realistic profile), every metadata request asks whether its VM is
    down: the answer is the committed one, read without waiting for a group commit under way."""
    service, imds, get = dropping_down_vms(tmp_path)
    azure_commands.schedule(service, ScheduleRequest(EventType.REBOOT, vms=("solo",)))
    assert imds.handle(get)[0] == 200  # solo, the fleet's default VM, running
    held = HeldCommits(service)

    async def run() -> list:
        step = service.step_clock_soon()  # the reboot starts: solo goes down
        await held.wait_entered()
        during = [imds.handle(get)[0], step.done()]  # a read that waited would fail the held commit (10 s)
        held.release.set()
        await step
        return [*during, imds.handle(get)[0]]

    assert asyncio.run(run()) == [200, False, DROP]
    service.store.close()


def test_a_document_not_rendered_yet_waits_for_the_transaction_under_way_without_holding_the_loop(tmp_path):
    """A GET whose document must be rendered from the engine while a transaction is under way (the engine may be
    ahead of the database) is answered once that transaction has landed, with what it committed; the event loop
    goes on meanwhile."""
    service = Maintenance.open(open_store(str(tmp_path / "r.db")), small_fleet(), "manual", 1.0, T0, "seed")
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    imds = AzureImds(service, CallerResolver(service.settled_engine().fleet, shared_ports={8169}))

    def get(version: bytes) -> Request:
        return Request(
            "GET", "/metadata/scheduledevents", b"api-version=" + version, ((b"metadata", b"true"),), b"",
            ("127.0.0.1", 8169), ("127.0.0.1", 50000),
        )  # fmt: skip

    assert imds.handle(get(b"2020-07-01"))[0] == 200  # rendered at this version only
    held = HeldCommits(service)

    async def run() -> tuple:
        approval = azure_commands.approve_soon(service, [event.event_id], by="test")
        await held.wait_entered()
        waiting = imds.handle(get(b"2019-08-01"))  # not rendered at this version: the engine is to be read
        assert isinstance(waiting, Deferred) and not approval.done()
        assert imds.handle(get(b"2020-07-01"))[0] == 200  # a rendered one is answered meanwhile
        answered = asyncio.get_running_loop().create_future()
        waiting.attach(answered.set_result)
        held.release.set()
        return await answered, approval.done()

    (status, body, _, _), approved = asyncio.run(run())
    assert (status, approved) == (200, True)
    assert [e["EventStatus"] for e in json.loads(body)["Events"]] == ["Started"]
    service.store.close()


def test_a_kept_document_a_commit_changed_is_rendered_as_it_lands_and_answered_during_the_next(tmp_path):
    """A VM that asked before a commit changed its document is answered at once during the next transaction: the
    document is rendered again as the commit lands (the engine then holds what was committed), not dropped to be
    rendered after the next one. Its power state, asked of every request when down VMs are dropped, comes from the
    commit's own news."""
    service, imds, get = dropping_down_vms(tmp_path)
    assert json.loads(imds.handle(get)[1])["Events"] == []  # solo, the fleet's default VM: kept, with no event

    async def run() -> list:
        await azure_commands.schedule_soon(service, ScheduleRequest(EventType.REBOOT, vms=("solo",)))
        held = HeldCommits(service)
        freeze = ScheduleRequest(EventType.FREEZE, vms=("WestNO_0",))
        other = asyncio.ensure_future(azure_commands.schedule_soon(service, freeze))
        await held.wait_entered()
        # The transaction is held until the read is done: a read that waited for it would fail it (held's 10 s).
        during = imds.handle(get)
        assert not isinstance(during, Deferred) and not other.done()
        held.release.set()
        await other
        return [event["EventType"] for event in json.loads(during[1])["Events"]]

    assert asyncio.run(run()) == ["Reboot"]
    service.store.close()


TWO_ASKING = """
hosts: [{name: h1}, {name: h2}]
vms:
  - {name: a, host: h1, imds: {address: 127.0.0.51}}
  - {name: b, host: h2, imds: {address: 127.0.0.52}}
  - {name: c, host: h2}
"""


def test_at_most_rendered_as_landed_documents_are_rendered_again_as_a_commit_lands(tmp_path, monkeypatch):
    """The documents rendered again as a commit lands are bounded (``RENDERED_AS_LANDED``), so that a commit over a
    whole fleet that all asked does not hold the loop: past the bound, a document is rendered when asked, once the
    transaction under way has landed."""
    monkeypatch.setattr(scheduled_events, "RENDERED_AS_LANDED", 1)
    fleet = parse_fleet(TWO_ASKING)
    service = Maintenance.open(open_store(str(tmp_path / "b.db")), fleet, "manual", 1.0, T0, "seed")
    imds = AzureImds(service, CallerResolver(fleet, shared_ports={8169}))

    def get(address: str) -> Request:
        return Request(
            "GET", "/metadata/scheduledevents", b"api-version=2020-07-01", ((b"metadata", b"true"),), b"",
            ("127.0.0.1", 8169), (address, 50000),
        )  # fmt: skip

    asking = ["127.0.0.51", "127.0.0.52"]
    assert [imds.handle(get(address))[0] for address in asking] == [200, 200]  # both kept

    async def run() -> list[bool]:
        await azure_commands.schedule_soon(service, ScheduleRequest(EventType.REBOOT, vms=("a", "b")))
        held = HeldCommits(service)
        freeze = ScheduleRequest(EventType.FREEZE, vms=("c",))
        other = asyncio.ensure_future(azure_commands.schedule_soon(service, freeze))
        await held.wait_entered()
        waiting = [isinstance(imds.handle(get(address)), Deferred) for address in asking]
        held.release.set()
        await other
        return waiting

    assert sorted(asyncio.run(run())) == [False, True]
    service.store.close()
