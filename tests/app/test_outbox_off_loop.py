"""The outbox sender reads the database off the event loop: it wakes after every part of a clock move, while the group
commit's thread holds the database for the next part, and the metadata GETs must not wait for that commit."""

from __future__ import annotations

import asyncio
import threading
import time

from forewarn.app.outbox import OutboxSender
from forewarn.app.runtime import Maintenance
from forewarn.fleet.file import parse_fleet
from helpers import SMALL_FLEET, T0, open_store

HELD = 0.4  # seconds the database is held by another thread


def test_the_sender_waits_for_a_busy_database_without_holding_the_event_loop(tmp_path):
    service = Maintenance.open(open_store(str(tmp_path / "a.db")), parse_fleet(SMALL_FLEET), "manual", 1.0, T0, "s")
    holding, release = threading.Event(), threading.Event()

    def hold_the_database() -> None:  # as the group commit's thread holds it for a part
        with service.store.guard:
            holding.set()
            release.wait(HELD)

    async def scenario() -> float:
        sender = OutboxSender(service)
        task = asyncio.create_task(sender.run())
        longest, last = 0.0, time.monotonic()
        while time.monotonic() - started < HELD + 0.2:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            longest, last = max(longest, now - last), now
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return longest

    holder = threading.Thread(target=hold_the_database)
    holder.start()
    try:
        assert holding.wait(5)
        started = time.monotonic()
        longest = asyncio.run(scenario())
    finally:
        release.set()
        holder.join()
        service.store.close()
    assert longest < HELD / 2, f"the loop was held {longest * 1000:.0f} ms while the database was busy"
