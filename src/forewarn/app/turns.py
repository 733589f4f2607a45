"""Long work on the event loop, cut into turns of a few milliseconds of wall time: a long answer shown and encoded, a
clock move's report counted, what an answer held let go of, an index built on first use.

Only work whose outcome does not depend on where it is cut is cut by time: the same answer, the same index, on a
fast machine or a slow one. What the engine commits is cut by counts instead (a clock move's parts, a command's
machines: ``app/runtime.py``'s ``CHANGES_PER_PART``), because where those cuts fall shows in the documents.

Counted slices held the loop for a fixed number of items, however long that took: on a machine half as fast, twice
as long, and the metadata GETs waiting behind them with it (``bench/stalls.py``). A turn that has run
``TURN_SECONDS`` hands the loop over, whatever the machine.
"""

from __future__ import annotations

import asyncio
import time

# Wall seconds of work on the loop before it answers others: under a millisecond of work is left between two turns
# (a metadata GET is about 20 µs), so a GET waits at most about this long for a turn to end.
TURN_SECONDS = 0.004


class Turns:
    """The clock of one piece of long work: ``over()`` once the current turn has run its time, ``next()`` to hand
    the loop over and start another. ``TURN_SECONDS`` is read when the work starts (tests set it to 0: a turn an
    item)."""

    __slots__ = ("_seconds", "_ends")

    def __init__(self) -> None:
        self._seconds = TURN_SECONDS
        self._ends = time.perf_counter() + self._seconds

    def over(self) -> bool:
        return time.perf_counter() >= self._ends

    async def next(self) -> None:
        """Hand the loop over (every callback ready meanwhile runs), then start a new turn."""
        await asyncio.sleep(0)
        self._ends = time.perf_counter() + self._seconds

    async def pause(self) -> None:
        """``next()`` if the turn is over: between two items of work dear enough (tens of µs) to look at the clock
        after each."""
        if time.perf_counter() >= self._ends:
            await self.next()
