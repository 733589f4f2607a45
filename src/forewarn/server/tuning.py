"""The process around the server: the garbage collector's settings (and what it never walks), the event loop, the
database probe and the watch of the parent process."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio

from forewarn.app.runtime import CHANGES_PER_PART
from forewarn.core.changes import Change
from forewarn.store import SQLStore

log = logging.getLogger("forewarn.server")

PROBE_EVERY = 2.0  # seconds between two probes of the database (/healthz reports the latest outcome)


async def probe_database(store: SQLStore, every: float = PROBE_EVERY) -> None:
    """A round trip to the database every ``every`` seconds, off the event loop: /healthz reports its outcome when
    no commit has told more recently, and a connection lost while idle is replaced (a single server takes its
    writer lock again) before the next command needs it."""
    while True:
        await asyncio.sleep(every)
        try:
            await asyncio.to_thread(store.probe)
        except Exception:  # the probe records its outcome; a defect must not end it
            log.exception("probing the database failed")


async def exit_with(parent: int, every: float = 0.5) -> None:
    """SIGTERM to this process once ``parent`` has exited: the kernel then hands this one to another parent (init or
    a subreaper), so the parent process id changes. The same shutdown as a user's SIGTERM."""
    while os.getppid() == parent:
        await asyncio.sleep(every)
    log.warning("the process that started this server (pid %d) has exited: stopping", parent)
    os.kill(os.getpid(), signal.SIGTERM)


async def import_first_request_modules() -> None:
    """Import now what the first request would otherwise import on the event loop: anyio's asyncio backend, which
    FastAPI's task groups load on their first use (8 ms of a first POST, in one turn of the loop)."""
    await anyio.sleep(0)


def tune_collector() -> None:
    """Run the garbage collector's young collections every 10,000 allocations instead of 700.

    The metadata requests leave no reference cycles (a closed connection drops its parser; a group commit's callback
    names no group): what a young collection finds there is objects that live on (events, VM states), walked for
    nothing. 160 young collections during 6,000 approvals against 4 (bench/commands.py), about 5 µs of an
    approval's CPU; cyclic garbage (the control API makes some) waits a little longer. Full collections keep their
    own rule (a quarter more long-lived objects than at the last)."""
    gc.set_threshold(10_000, *gc.get_threshold()[1:])


# Seconds a thread that wants the interpreter waits before the one running Python must hand it over (CPython's
# default: 5 ms). The work the server does in threads (a reset's engine, a group's transaction, a replaced engine
# freed) would otherwise keep the event loop waiting 5 ms for each request's turn, several times a request: a
# reset at a million VMs held metadata GETs 35-42 ms, 22 ms at 1 ms (bench/stalls.py). No cost while the loop runs
# alone, as it mostly does.
SWITCH_INTERVAL = 0.001


def tune_thread_switching() -> None:
    sys.setswitchinterval(SWITCH_INTERVAL)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Around building a whole engine (``Maintenance.engine_building``: a reset): the cyclic collector paused, then
    what was built frozen, as at start-up (``settle_heap``). Its collections would walk the hundreds of thousands of
    objects being built, in the building thread and holding the interpreter (a collection of 27 ms during a reset at
    a million VMs, bench/stalls.py). The replaced engine is freed by reference counting (``Engine.close``), frozen or
    not."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def settle_heap() -> None:
    """Once the fleet and every surface are built. What start-up made (the fleet, its indexes, the engine) lives as
    long as the process: frozen (``gc.freeze``), the cyclic collector never walks it again, so a collection costs what
    the objects made since cost, not a million VMs. The memory the start-up freed (the fleet file's text and data)
    goes back to the system where the C library can give it back."""
    gc.freeze()
    gc.enable()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator keeps what it keeps
        pass


# Changes in one committed batch from which what the batch made is frozen (``freeze_after_bulk``): a part of a clock
# move makes at least CHANGES_PER_PART, and so does a command of a wave's or a schedule's MACHINES_PER_COMMAND (an
# event a machine, at least). A bound above them would never freeze a million-VM wave's events.
FROZEN_AFTER = CHANGES_PER_PART


def freeze_after_bulk(changes: list[Change]) -> None:
    """After a batch of at least ``FROZEN_AFTER`` changes (a part of a clock move, a command over hundreds of
    machines), freeze what lives: the events and VM states such batches make live on, and the cyclic collector's full
    collections walked all of them, more each round (0.5 s of the event loop per collection by a million-VM wave's
    third step, bench/stalls.py), as it would have walked start-up's fleet. Reference counting still frees what is
    dropped (an event that leaves memory); what freezing keeps for good is only the cyclic garbage not yet collected
    at that moment, which the young collections, every 10,000 allocations, leave little of."""
    if len(changes) >= FROZEN_AFTER:
        gc.freeze()


def event_loop_runner() -> Callable[[Coroutine[Any, Any, None]], None]:
    """uvloop when installed (uvicorn[standard] brings it): the IMDS hot path is much faster on it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run
