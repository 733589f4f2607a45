"""A clock move over many deadlines is made in parts (``Maintenance.changes_per_part``): each part is a group commit
of its own, durable before the next part runs, with the event loop free between them, and the move is answered once
its last part is durable, with every change. What anyone reads between parts is a whole state: deadlines applied
whole, in order, the clock committed with the last part. Real SQLite file store, real engine."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.changes import EventChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.imds.scheduled_events import AzureImds
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.core.errors import Conflict
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml
from forewarn.net.callers import CallerResolver
from forewarn.net.http import Deferred, Request
from helpers import T0, HeldCommits, open_store

# 120 VMs on 12 hosts: a Freeze over every host is 12 operations, one start deadline each.
GENERATED = fleet_yaml(FleetShape(vms=120, seed="parts"))


def opened(path, per_part: int | None) -> Maintenance:
    service = Maintenance.open(open_store(str(path)), parse_fleet(GENERATED), "manual", 1.0, T0, "seed")
    hosts = tuple(service.settled_engine().fleet.hosts)
    azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, hosts=hosts, notice=timedelta(minutes=15)))
    service.changes_per_part = per_part
    return service


class Commits:
    """The store's commits, as (changes, whether a clock was committed), in order."""

    def __init__(self, service: Maintenance):
        self.made: list[tuple[int, bool]] = []
        real = service.store.commit

        def counted(changes, now, clock=None, *rest, **named):
            real(changes, now, clock, *rest, **named)
            self.made.append((len(changes), clock is not None))

        service.store.commit = counted  # type: ignore[method-assign]

    async def first_landed(self) -> None:
        """Until the first part is durable: the move is then under way, with parts left (not a guess of time)."""
        while not self.made:
            await asyncio.sleep(0.001)


def operations_started(service: Maintenance) -> list[bool]:
    """For each operation, whether its events started; an operation half started would fail here."""
    azure = service.settled_engine().component(AzureComponent)
    found = []
    for operation_id in azure.operations:
        statuses = {event.status for event in azure.operation_events(operation_id)}
        assert len(statuses) == 1, f"operation {operation_id} is half started: {statuses}"
        found.append(statuses == {EventStatus.STARTED})
    return found


def test_a_clock_step_over_many_deadlines_is_committed_in_parts_with_the_loop_free_between_them(tmp_path):
    whole = opened(tmp_path / "whole.db", None)
    expected = whole.step_clock()
    service = opened(tmp_path / "parts.db", 10)
    commits = Commits(service)
    seen: list[int] = []  # operations started, as a reader on the loop saw them while the step went on

    async def step_and_read() -> list:
        step = service.step_clock_soon()
        while not step.done():
            seen.append(sum(operations_started(service)))
            await asyncio.sleep(0)
        return await step

    changes = asyncio.run(step_and_read())
    assert len(commits.made) >= 4  # 12 operations of 10 VMs, parts of at least 10 changes
    assert [clock for _, clock in commits.made] == [False] * (len(commits.made) - 1) + [True]
    assert any(0 < count < 12 for count in seen)  # read between parts, each part whole
    assert sorted(seen) == seen  # never a part undone
    assert [(c.event.event_id, c.what) for c in changes if isinstance(c, EventChanged)] == [
        (c.event.event_id, c.what) for c in expected if isinstance(c, EventChanged)
    ]
    assert service.clock_view() == whole.clock_view()
    service.store.close()
    again = Maintenance.open(open_store(str(tmp_path / "parts.db")), parse_fleet(GENERATED), "manual", 1.0)
    assert all(operations_started(again)) and again.clock_view() == whole.clock_view()  # durable, clock included
    again.store.close()
    whole.store.close()


def test_a_command_handed_in_during_a_step_in_parts_is_answered_before_the_step_ends(tmp_path):
    service = opened(tmp_path / "parts.db", 10)
    commits = Commits(service)
    order: list[str] = []

    async def both() -> None:
        step = service.step_clock_soon()
        step.add_done_callback(lambda _: order.append("step"))
        await commits.first_landed()
        scheduled = azure_commands.schedule_soon(service, ScheduleRequest(EventType.REBOOT, vms=("vm-00000",)))
        await scheduled
        order.append("schedule")
        await step

    asyncio.run(both())
    assert order == ["schedule", "step"]
    service.store.close()


def test_a_clock_move_asked_during_another_in_parts_waits_for_its_end(tmp_path):
    service = opened(tmp_path / "parts.db", 10)
    commits = Commits(service)

    async def two_steps() -> tuple[list, list]:
        first = service.step_clock_soon()
        await commits.first_landed()
        second = service.step_clock_soon()
        return await first, await second

    first, second = asyncio.run(two_steps())
    assert {c.what for c in first if isinstance(c, EventChanged)} == {"started"}
    assert not any(isinstance(c, EventChanged) and c.what == "started" for c in second)  # the recoveries' step
    clocks = [clock for _, clock in commits.made]
    assert clocks.count(True) == 2 and clocks.index(True) >= 3  # the second moved only once the first was done
    service.store.close()


def test_a_real_clock_catching_up_on_many_deadlines_applies_one_part_at_once_and_the_rest_in_parts(tmp_path):
    wall = [T0.timestamp()]
    store = open_store(str(tmp_path / "real.db"))
    service = Maintenance.open(store, parse_fleet(GENERATED), "real", 1.0, T0, "seed", wall=lambda: wall[0])
    hosts = tuple(service.settled_engine().fleet.hosts)
    azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, hosts=hosts, notice=timedelta(minutes=15)))
    service.changes_per_part = 10
    commits = Commits(service)
    wall[0] += 16 * 60  # every NotBefore passed

    async def catch_up() -> tuple[int, int]:
        service.catch_up()
        first = sum(operations_started(service))
        assert service.catching_up is not None
        assert service.catch_up() == []  # a read meanwhile applies nothing more itself
        await service.catching_up
        return first, sum(operations_started(service))

    first, last = asyncio.run(catch_up())
    assert 0 < first < 12 and last == 12
    assert len(commits.made) >= 4 and service.catching_up is None
    service.store.close()


def test_a_reset_during_a_step_in_parts_refuses_the_rest_of_it(tmp_path):
    service = opened(tmp_path / "parts.db", 10)
    commits = Commits(service)
    start = service.clock_view()

    async def step_then_reset() -> BaseException | list:
        step = service.step_clock_soon()
        await commits.first_landed()
        assert not step.done()
        service.reset()
        return (await asyncio.gather(step, return_exceptions=True))[0]

    outcome = asyncio.run(step_then_reset())
    assert isinstance(outcome, Conflict)
    assert service.clock_view().now == start.now and not service.settled_engine().component(AzureComponent).events
    service.store.close()


def test_the_time_is_read_without_waiting_for_a_clock_move_under_way(tmp_path):
    """Every metadata answer reads the time (its Date header): while a clock move's transaction is under way, the
    time read is the one the database holds, at once, and the new time once the move has landed."""
    service = opened(tmp_path / "parts.db", None)
    start, goal = service.clock_view().now, service.clock_view().next_deadline
    entered, gate, real = threading.Event(), threading.Event(), service.store.commit

    def held(*args, **named):
        entered.set()
        assert gate.wait(10), "the test never opened the gate"
        real(*args, **named)

    service.store.commit = held  # type: ignore[method-assign]

    async def step_and_read() -> list:
        step = service.step_clock_soon()
        while not entered.is_set():
            await asyncio.sleep(0.001)
        read = [service.now(), step.done()]  # the transaction is held: a read that waited would never return here
        gate.set()
        await step
        return [*read, service.now()]

    assert asyncio.run(step_and_read()) == [start, False, goal]
    service.store.close()


def test_a_metadata_get_waiting_for_a_part_is_answered_as_it_lands_not_when_the_move_ends(tmp_path):
    """A move in parts queues its next part as each lands: a GET that waits for the transaction under way (its
    document to be rendered) is answered once that part has landed, before the next part holds the engine again,
    not once the whole move has ended."""
    store = open_store(str(tmp_path / "parts.db"))
    fleet = parse_fleet(GENERATED + "default_vm: vm-00000\n")
    service = Maintenance.open(store, fleet, "manual", 1.0, T0, "seed")
    hosts = tuple(service.settled_engine().fleet.hosts)
    azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, hosts=hosts, notice=timedelta(minutes=15)))
    service.changes_per_part = 10
    commits = Commits(service)
    imds = AzureImds(service, CallerResolver(service.settled_engine().fleet, shared_ports={8169}))
    get = Request(
        "GET", "/metadata/scheduledevents", b"api-version=2019-08-01", ((b"metadata", b"true"),), b"",
        ("127.0.0.1", 8169), ("127.0.0.1", 50000),
    )  # fmt: skip

    held = HeldCommits(service)  # the first part's transaction, held until the GET is waiting for it

    async def step_and_get() -> tuple[bool, int, int]:
        step = service.step_clock_soon()
        await held.wait_entered()
        answer = imds.handle(get)  # not asked before: the engine is to be read
        assert isinstance(answer, Deferred)
        answered = asyncio.get_running_loop().create_future()
        answer.attach(lambda response: answered.set_result((response[0], step.done(), len(commits.made))))
        held.release.set()
        status, step_done, parts_landed = await answered
        await step
        assert status == 200
        return step_done, parts_landed, len(commits.made)

    step_done, parts_landed, parts = asyncio.run(step_and_get())
    assert not step_done and parts_landed < parts  # answered between parts
    service.store.close()
