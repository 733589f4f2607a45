"""How long the event loop is held at a time, recorded for benchmarks (``bench/stalls.py``), and what every thread
was doing meanwhile, for whoever looks for the cause.

With ``FOREWARN_LOOP_HOLDS`` naming a file, the server wakes every millisecond and, whenever it woke more than
``RECORDED_FROM`` late, appends to that file when the late turn began and ended (the monotonic clock every process on
the machine shares) and the CPU time the loop's thread used meanwhile. The wall time is what a request waiting on the
loop waited; the CPU time is the loop's own work, which other processes on a shared machine do not stretch.

With ``FOREWARN_LOOP_STACKS`` naming a file, a thread of its own looks every half millisecond at when the loop last
woke and, while it is more than ``NOTED_FROM`` late, appends every other thread's innermost frames to that file. A
hold with little of the loop's CPU is the loop waiting: for the interpreter, which another thread holds (a C call
that does not release it), or for a core. The watching thread takes the interpreter itself to look, so it is not for
measuring. Both are off unless asked: nothing else reads the files, and the server works the same without them.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
import threading
import time
import traceback

LOOP_HOLDS_FILE = "FOREWARN_LOOP_HOLDS"
LOOP_STACKS_FILE = "FOREWARN_LOOP_STACKS"
HOLD = struct.Struct("ddd")  # began, ended (monotonic seconds), CPU seconds of the loop's thread in between
WAKE_EVERY = 0.001
RECORDED_FROM = 0.002  # seconds late: a shorter hold is a turn of the loop, not worth a line
NOTED_FROM = 0.006  # seconds since the loop last woke from which the stacks are noted, every LOOKED_EVERY
LOOKED_EVERY = 0.0005
FRAMES_NOTED = 4  # a thread's innermost frames noted


def loop_holds_file() -> str | None:
    """The file the server records its loop holds in, if the environment names one."""
    return os.environ.get(LOOP_HOLDS_FILE) or None


def loop_stacks_file() -> str | None:
    """The file the server notes the threads' stacks in while its loop is late, if the environment names one."""
    return os.environ.get(LOOP_STACKS_FILE) or None


async def note_stacks_while_late(path: str) -> None:
    """Wake every millisecond, and have a thread note every other thread's stack while the loop is late (the module's
    text), until cancelled."""
    woke = [time.monotonic()]
    done = threading.Event()
    watcher = threading.Thread(target=_note_stacks, args=(path, woke, done), name="loop-stacks", daemon=True)
    watcher.start()
    try:
        while True:
            woke[0] = time.monotonic()
            await asyncio.sleep(WAKE_EVERY)
    finally:
        done.set()


def _note_stacks(path: str, woke: list[float], done: threading.Event) -> None:
    with open(path, "a", encoding="utf-8") as out:
        while not done.wait(LOOKED_EVERY):
            late = time.monotonic() - woke[0]
            if late > NOTED_FROM:
                out.write(_stacks_now(late))
                out.flush()


def _stacks_now(late: float) -> str:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    lines = [f"=== the loop {late * 1000:.1f} ms late at {time.monotonic():.4f}"]
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        frames = " < ".join(
            f"{entry.name} ({os.path.basename(entry.filename)}:{entry.lineno})"
            for entry in reversed(traceback.extract_stack(frame)[-FRAMES_NOTED:])
        )
        lines.append(f"  [{names.get(ident, ident)}] {frames}")
    return "\n".join(lines) + "\n"


async def record_loop_holds(path: str) -> None:
    """Append a ``HOLD`` to ``path`` for every wake-up later than ``RECORDED_FROM``, until cancelled."""
    with open(path, "ab", buffering=0) as out:
        while True:
            began, cpu = time.monotonic(), time.thread_time()
            await asyncio.sleep(WAKE_EVERY)
            ended = time.monotonic()
            if ended - began - WAKE_EVERY > RECORDED_FROM:
                out.write(HOLD.pack(began, ended, time.thread_time() - cpu))
