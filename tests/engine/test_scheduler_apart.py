"""Deadlines set apart (``Scheduler.set_apart``) by one thread, while the scheduler goes on taking other threads'
deadlines, then adopted at once in their order."""

from __future__ import annotations

import threading
from datetime import timedelta

from forewarn.core.scheduler import Scheduler
from helpers import T0


def test_deadlines_set_apart_by_one_thread_are_adopted_whole_and_in_order():
    scheduler = Scheduler(T0)
    fired: list[str] = []
    kind = scheduler.kind("note", lambda target: fired.append(target) or [], lambda target, at: False)
    scheduler.add(T0 + timedelta(minutes=5), kind, "held before")
    with scheduler.set_apart() as apart:
        scheduler.add(T0 + timedelta(minutes=2), kind, "second")
        scheduler.add(T0 + timedelta(minutes=1), kind, "first")
        scheduler.add(T0 + timedelta(minutes=2), kind, "second, set after")
        other = threading.Thread(target=scheduler.add, args=(T0 + timedelta(minutes=3), kind, "another thread's"))
        other.start()
        other.join()
    assert len(apart) == 3
    assert [target for _, _, target in scheduler.pending()] == ["another thread's", "held before"]
    replaced = scheduler.adopt(apart)
    assert sorted(deadline.target for _, _, deadline in replaced) == ["another thread's", "held before"]
    scheduler.add(T0 + timedelta(minutes=1), kind, "first, set after adopting")
    scheduler.run_until(T0 + timedelta(hours=1))
    assert fired == ["first", "first, set after adopting", "second", "second, set after"]
