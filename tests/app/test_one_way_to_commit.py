"""Every command a surface on the event loop hands in goes through the group commit: clock moves, approvals, the
platform's and the other clouds' control routes commit in the worker thread, together when they arrive together, and
the event loop goes on while a transaction is under way. The control API in process, a real SQLite file store."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import httpx

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.control.app import create_control_app
from helpers import T0, open_store, small_fleet

HELD = 0.4  # seconds each transaction takes


def test_commands_from_the_control_api_commit_off_the_loop_and_together(tmp_path):
    service = Maintenance.open(open_store(str(tmp_path / "one.db")), small_fleet(), "manual", 1.0, T0, "seed")
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    app = create_control_app(service)
    commits: list[str] = []
    ticks: list[float] = []  # the event loop's, every 10 ms while it is free
    ticked_during: list[int] = []  # how many times it ticked during each transaction
    commit = service.store.commit

    def slow(*args, **named):
        commits.append(threading.current_thread().name)
        before = len(ticks)
        time.sleep(HELD)  # a slow disk
        ticked_during.append(len(ticks) - before)
        commit(*args, **named)

    service.store.commit = slow  # type: ignore[method-assign]

    async def run() -> list[httpx.Response]:
        done = asyncio.Event()

        async def tick() -> None:
            while not done.is_set():
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
            answers = await asyncio.gather(
                client.post("/v1/clock/advance", json={"by": "1m"}),
                client.post("/v1/approvals", json={"event_ids": [event.event_id], "by": "solo"}),
                client.post("/v1/clock/advance", json={"by": "1m"}),
                client.post("/v1/platform/evict", json={"vms": ["spotty"]}),
            )
        done.set()
        await ticker
        return answers

    answers = asyncio.run(run())
    assert [answer.status_code for answer in answers] == [200, 200, 200, 200], [a.text for a in answers]
    assert answers[1].json()[0]["status"] == "Started"
    assert service.now() == T0 + timedelta(minutes=2)  # the two moves one after the other, as sent
    assert commits and set(commits) == {"forewarn-commit_0"}  # the worker's, never the loop's
    assert len(commits) < len(answers)  # those that came during a transaction went in the next one, together
    # The loop goes on while a transaction is under way (a read of the engine meanwhile waits for it, by design).
    assert max(ticked_during) >= 5, ticked_during
    service.store.close()
    again = Maintenance.open(open_store(str(tmp_path / "one.db")), small_fleet(), "manual", 1.0, T0, "seed")
    assert again.now() == T0 + timedelta(minutes=2)  # the clock was committed with the moves
    again.store.close()
