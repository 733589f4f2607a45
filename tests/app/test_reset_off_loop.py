"""A server's reset (``Maintenance.reset_soon``, ``POST /v1/reset``) resets the database and builds the new engine in a
thread: the event loop answers meanwhile, and the commands that come during the reset run after it, on its engine."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.fleet.file import parse_fleet
from forewarn.server.timer import DeadlineTimer
from helpers import SMALL_FLEET, T0, open_store

HELD = 0.4  # seconds the database is held by another thread when the reset begins


def test_a_reset_waits_for_a_busy_database_without_holding_the_loop_and_commands_run_after_it(tmp_path):
    service = Maintenance.open(open_store(str(tmp_path / "a.db")), parse_fleet(SMALL_FLEET), "manual", 1.0, T0, "s")
    service.advance_clock(timedelta(hours=1))
    holding, release = threading.Event(), threading.Event()

    def hold_the_database() -> None:  # as the group commit's thread holds it for a part
        with service.store.guard:
            holding.set()
            release.wait(HELD)

    async def scenario() -> tuple[float, list[str]]:
        order: list[str] = []
        reset = asyncio.create_task(service.reset_soon())
        reset.add_done_callback(lambda _: order.append("reset"))
        await asyncio.sleep(0.05)
        assert service.now() == T0 + timedelta(hours=1)  # read meanwhile: the engine as it was
        moved = service.advance_clock_soon(timedelta(minutes=1))
        moved.add_done_callback(lambda _: order.append("advance"))
        longest, last = 0.0, time.monotonic()
        while not (reset.done() and moved.done()):
            await asyncio.sleep(0.005)
            now = time.monotonic()
            longest, last = max(longest, now - last), now
        await reset
        await moved
        return longest, order

    holder = threading.Thread(target=hold_the_database)
    holder.start()
    try:
        assert holding.wait(5)
        longest, order = asyncio.run(scenario())
    finally:
        release.set()
        holder.join()
    try:
        assert longest < HELD / 2, f"the loop was held {longest * 1000:.0f} ms during the reset"
        assert order == ["reset", "advance"]
        assert service.now() == T0 + timedelta(minutes=1)  # the start again, then the minute
    finally:
        service.store.close()


def test_two_resets_at_once_each_end_with_the_start(tmp_path):
    service = Maintenance.open(open_store(str(tmp_path / "a.db")), parse_fleet(SMALL_FLEET), "manual", 1.0, T0, "s")
    service.advance_clock(timedelta(hours=1))

    async def scenario() -> None:
        await asyncio.gather(service.reset_soon(), service.reset_soon())

    try:
        asyncio.run(scenario())
        assert service.now() == T0
    finally:
        service.store.close()


def test_the_deadline_timer_waits_for_a_reset_instead_of_asking_again_and_again(tmp_path):
    """A deadline of the engine as it was falls due during the reset: nothing is caught up until the reset ends, and
    the real clock's timer waits for that rather than spinning on the event loop."""
    service = Maintenance.open(open_store(str(tmp_path / "a.db")), parse_fleet(SMALL_FLEET), "real", 3600.0, T0, "s")
    azure_commands.schedule(
        service, ScheduleRequest(EventType.FREEZE, hosts=("host-01",), notice=timedelta(minutes=15))
    )
    asked: list[float] = []
    catch_up = service.catch_up

    def counted() -> list:
        asked.append(time.monotonic())
        return catch_up()

    service.catch_up = counted  # type: ignore[method-assign]
    holding, release = threading.Event(), threading.Event()

    def hold_the_database() -> None:
        with service.store.guard:
            holding.set()
            release.wait(HELD)

    async def scenario() -> None:
        timer = asyncio.create_task(DeadlineTimer(service).run())
        await service.reset_soon()  # the event's start (15 min at 3,600 times: 0.25 s) falls due meanwhile
        timer.cancel()
        await asyncio.gather(timer, return_exceptions=True)

    holder = threading.Thread(target=hold_the_database)
    holder.start()
    try:
        assert holding.wait(5)
        asyncio.run(scenario())
    finally:
        release.set()
        holder.join()
        service.store.close()
    assert len(asked) <= 3, f"the timer asked {len(asked)} times during the reset"
