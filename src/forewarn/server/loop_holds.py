"""How long the event loop is held at a time, recorded for benchmarks (``bench/stalls.py``).

With ``FOREWARN_LOOP_HOLDS`` naming a file, the server wakes every millisecond and, whenever it woke more than
``RECORDED_FROM`` late, appends to that file when the late turn began and ended (the monotonic clock every process on
the machine shares) and the CPU time the loop's thread used meanwhile. The wall time is what a request waiting on the
loop waited; the CPU time is the loop's own work, which other processes on a shared machine do not stretch. Off
unless asked: nothing else reads the file, and the server works the same without it.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time

LOOP_HOLDS_FILE = "FOREWARN_LOOP_HOLDS"
HOLD = struct.Struct("ddd")  # began, ended (monotonic seconds), CPU seconds of the loop's thread in between
WAKE_EVERY = 0.001
RECORDED_FROM = 0.002  # seconds late: a shorter hold is a turn of the loop, not worth a line


def loop_holds_file() -> str | None:
    """The file the server records its loop holds in, if the environment names one."""
    return os.environ.get(LOOP_HOLDS_FILE) or None


async def record_loop_holds(path: str) -> None:
    """Append a ``HOLD`` to ``path`` for every wake-up later than ``RECORDED_FROM``, until cancelled."""
    with open(path, "ab", buffering=0) as out:
        while True:
            began, cpu = time.monotonic(), time.thread_time()
            await asyncio.sleep(WAKE_EVERY)
            ended = time.monotonic()
            if ended - began - WAKE_EVERY > RECORDED_FROM:
                out.write(HOLD.pack(began, ended, time.thread_time() - cpu))
