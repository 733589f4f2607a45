"""Long work on the event loop hands the loop over once a turn has run ``TURN_SECONDS`` of wall time
(``app/turns.py``), whatever the machine's speed: on a clock that each item of work moves by a millisecond, a turn of 4
ms ends every fourth item."""

from __future__ import annotations

import asyncio

import forewarn.app.turns as turns_module
from forewarn.app.turns import Turns


class SteppedClock:
    """``time.perf_counter`` for the turns: moved by the work, not by the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def others_ran_at(clock: SteppedClock, items: int, each: float) -> list[int]:
    """The clock's milliseconds at which another task ran while ``items`` items of ``each`` seconds were worked."""
    ran: list[int] = []

    async def work() -> None:
        async def other() -> None:
            while True:
                ran.append(round(clock.now * 1000))
                await asyncio.sleep(0)

        watcher = asyncio.ensure_future(other())
        await asyncio.sleep(0)  # the other task's first turn, before the work
        turns = Turns()
        for _ in range(items):
            clock.now += each
            await turns.pause()
        watcher.cancel()

    asyncio.run(work())
    return ran


def test_a_turn_ends_once_it_has_run_its_time_and_not_before(monkeypatch):
    clock = SteppedClock()
    monkeypatch.setattr(turns_module, "time", clock)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0.004)
    assert others_ran_at(clock, 20, 0.001) == [0, 4, 8, 12, 16, 20]


def test_dearer_items_make_shorter_turns_in_items_and_the_same_in_time(monkeypatch):
    clock = SteppedClock()
    monkeypatch.setattr(turns_module, "time", clock)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0.004)
    assert others_ran_at(clock, 10, 0.002) == [0, 4, 8, 12, 16, 20]  # a slower machine: two items a turn


def test_no_time_given_makes_a_turn_of_every_item(monkeypatch):
    clock = SteppedClock()
    monkeypatch.setattr(turns_module, "time", clock)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0)
    assert others_ran_at(clock, 3, 0.001) == [0, 1, 2, 3]
