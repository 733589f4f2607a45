"""A replaced engine (a reset, a rebuild) is freed as it is dropped, a slice at a time: nothing of it is left for the
cyclic collector, which would walk all of it on the event loop, or, once frozen, keep it for good."""

from __future__ import annotations

import gc
import threading
from collections import Counter

import pytest

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.engine.teardown import SLICE, dismantle
from forewarn.store import StoreError
from helpers import T0, open_store, small_fleet


def opened(tmp_path) -> Maintenance:
    service = Maintenance.open(open_store(str(tmp_path / "t.db")), small_fleet(), "manual", 1.0, T0, "seed")
    hosts = tuple(service.settled_engine().fleet.hosts)
    azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, hosts=hosts))
    service.step_clock()
    return service


def dismantled() -> None:
    for thread in threading.enumerate():
        if thread.name == "forewarn-dismantle":
            thread.join(10)


def garbage_after(replace) -> Counter:
    """The types of what the cyclic collector finds once ``replace()`` has dropped an engine."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        replace()
        dismantled()
        gc.collect()
        return Counter(type(found).__qualname__ for found in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_a_reset_leaves_nothing_of_the_old_engine_to_the_cyclic_collector(tmp_path):
    service = opened(tmp_path)
    fleet = service.settled_engine().fleet
    assert garbage_after(lambda: service.reset()) == Counter()
    # The next engine works on the fleet the old one shared, untouched.
    assert service.settled_engine().fleet is fleet and len(list(fleet.hosts)) == 3
    assert azure_commands.schedule(service, ScheduleRequest(EventType.REBOOT, vms=("solo",)))
    service.store.close()


def test_a_rebuild_after_a_failed_commit_leaves_nothing_of_the_old_engine_to_the_cyclic_collector(tmp_path):
    service = opened(tmp_path)
    real = service.store.commit

    def fails(*args, **named):
        raise StoreError("disk full")

    def fail_one_command() -> None:
        service.store.commit = fails  # type: ignore[method-assign]
        try:
            with pytest.raises(Unavailable):
                azure_commands.schedule(service, ScheduleRequest(EventType.REBOOT, vms=("solo",)))
        finally:
            service.store.commit = real  # type: ignore[method-assign]

    assert garbage_after(fail_one_command) == Counter()
    service.store.close()


def test_dismantling_empties_what_a_part_alone_holds_and_leaves_what_is_shared():
    class Part:
        pass

    shared = {index: object() for index in range(SLICE + 1)}
    part = Part()
    part.own, part.shared, part.helper = {index: [index] for index in range(3 * SLICE)}, shared, Part()
    part.helper.own = list(range(SLICE + 5))  # a helper the part alone holds: looked into
    keeper = {"holds": shared}
    dismantle([part])
    assert (len(part.own), len(part.helper.own)) == (0, 0)
    assert len(part.shared) == SLICE + 1 and keeper["holds"] is shared


def test_a_container_a_reader_iterates_is_left_whole():
    class Part:
        pass

    part = Part()
    part.events = {index: index for index in range(SLICE + 1)}
    reading = iter(part.events.values())  # a reader of the replaced engine, part-way through
    next(reading)
    dismantle([part])
    assert len(list(reading)) == SLICE
