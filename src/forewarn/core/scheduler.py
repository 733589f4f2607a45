"""Simulated time and the deadlines on it: one ``now`` and one heap shared by every component.

A component registers the kinds of deadline it has (:meth:`Scheduler.kind`): what to do when one falls due, and how
to tell that one is stale (the thing it was set for has changed since: the event started early, was canceled, the
VM recovered). Stale deadlines are not removed when their reason goes away; they are skipped when reached, which
keeps every command O(log n).

Time moves one *step* per instant: every deadline due at that instant fires, in the order it was set (across
components), and then each step hook runs once (Azure's DocumentIncarnation moves by one per step, however many
deadlines changed the scope's document at that instant).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from forewarn.core.changes import Change

Target = TypeVar("Target")


@dataclass(eq=False)
class DeadlineKind(Generic[Target]):
    """One kind of deadline a component sets: ``fire(target)`` applies it, ``is_stale(target, at)`` says that the
    deadline set for ``at`` no longer applies."""

    name: str
    fire: Callable[[Target], list[Change]]
    is_stale: Callable[[Target, datetime], bool]

    def close(self) -> None:
        """Let go of the component's methods (``Scheduler.close``): its deadlines fire nothing from now on."""
        self.fire = _fires_nothing
        self.is_stale = _always_stale


def _fires_nothing(target: object) -> list[Change]:
    return []


def _always_stale(target: object, at: datetime) -> bool:
    return True


@dataclass(frozen=True)
class Deadline(Generic[Target]):
    at: datetime
    kind: DeadlineKind[Target]
    target: Target

    @property
    def stale(self) -> bool:
        return self.kind.is_stale(self.target, self.at)


# (time, the order it was set in, the deadline): the order breaks ties, so deadlines are never compared
Heap = list[tuple[datetime, int, Deadline[Any]]]


class Scheduler:
    def __init__(self, now: datetime) -> None:
        self.now = now
        self._heap: Heap = []
        self._set_count = 0
        # The thread whose deadlines go to a heap apart (``set_apart``), and that heap; None: every one goes here.
        self._apart: tuple[int, Heap] | None = None
        self._kinds: dict[str, DeadlineKind[Any]] = {}
        self._step_hooks: list[Callable[[], list[Change]]] = []

    def kind(
        self, name: str, fire: Callable[[Target], list[Change]], is_stale: Callable[[Target, datetime], bool]
    ) -> DeadlineKind[Target]:
        if name in self._kinds:
            raise ValueError(f"a deadline kind named {name!r} is already registered")
        registered = DeadlineKind(name, fire, is_stale)
        self._kinds[name] = registered
        return registered

    def on_step_end(self, hook: Callable[[], list[Change]]) -> None:
        """``hook()`` after the deadlines of each instant have fired; its changes close the step."""
        self._step_hooks.append(hook)

    def add(self, at: datetime, kind: DeadlineKind[Target], target: Target) -> None:
        apart = self._apart
        if apart is not None and apart[0] == threading.get_ident():
            # Pushed one by one, not heapified at the end: that would be one call over a million entries, which
            # holds the interpreter (and so the event loop) for its whole length.
            heap = apart[1]
            heapq.heappush(heap, (at, len(heap) + 1, Deadline(at, kind, target)))
            return
        self._set_count += 1
        heapq.heappush(self._heap, (at, self._set_count, Deadline(at, kind, target)))

    @contextmanager
    def set_apart(self) -> Iterator[Heap]:
        """Within, the deadlines this thread sets go to a heap of their own (the one yielded), while this scheduler
        goes on serving the other threads: a state's deadlines set again in a thread of its own
        (``Engine.deadlines_again``), to be adopted at once (``adopt``)."""
        heap: Heap = []
        self._apart = (threading.get_ident(), heap)
        try:
            yield heap
        finally:
            self._apart = None

    def adopt(self, heap: Heap) -> Heap:
        """``heap`` (``set_apart``'s) replaces every deadline held: the heap it replaces is returned, for the caller
        to free off the event loop (a million deadlines freed at once hold the interpreter for 0.1 s)."""
        replaced, self._heap = self._heap, heap
        self._set_count = len(heap)
        return replaced

    def close(self) -> None:
        """Let go of every kind and hook: each names a component that holds this scheduler, a cycle that only the
        cyclic collector would free (and never, once frozen). The deadlines stay, inert, for whoever drops this
        scheduler to free (``engine.teardown``: a million of them freed at once hold the interpreter)."""
        for kind in self._kinds.values():
            kind.close()
        self._kinds.clear()
        self._step_hooks.clear()

    def pending(self) -> list[tuple[datetime, str, Any]]:
        """The deadlines that still apply, as (time, kind, target), in the order they fall due."""
        return [
            (at, deadline.kind.name, deadline.target) for at, _, deadline in sorted(self._heap) if not deadline.stale
        ]

    def next_deadline(self) -> datetime | None:
        """When the next deadline that still applies falls due."""
        while self._heap and self._heap[0][2].stale:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def run_until(self, to: datetime) -> list[Change]:
        """Apply every deadline due up to ``to``, one step per instant, and leave ``now`` at ``to``."""
        return self.run_some(to, None)[0]

    def run_some(self, to: datetime, budget: int | None) -> tuple[list[Change], bool]:
        """As :meth:`run_until`, but with a ``budget`` (changes), stop at the first deadline after which the
        changes made reach it: the changes, and whether every deadline due up to ``to`` was applied (``now`` is then
        ``to``; otherwise the instant reached). A step cut short ends there, its hooks run (a step of its own: the
        rest of its instant's deadlines, set before it, make the next one), so what was applied is whole. A part
        costs what it applies, not what is left of its instant (45,000 deadlines at one instant, a million VMs)."""
        changes: list[Change] = []
        heap = self._heap
        while (due := self.next_deadline()) is not None and due <= to:
            if budget is not None and len(changes) >= budget:
                return changes, False
            self.now = max(self.now, due)
            # The step is the deadlines set for this instant before it began, in the order they were set; those its
            # own deadlines set (for now or earlier) are the next step's.
            last_set = self._set_count
            set_meanwhile: list[tuple[datetime, int, Deadline[Any]]] = []
            while heap:
                at, order, deadline = heap[0]
                if order > last_set and at < due:
                    set_meanwhile.append(heapq.heappop(heap))
                    continue
                if at != due or order > last_set:
                    break
                heapq.heappop(heap)
                if not deadline.stale:  # an earlier deadline of the same instant may have made it stale
                    changes += deadline.kind.fire(deadline.target)
                if budget is not None and len(changes) >= budget:
                    break
            for entry in set_meanwhile:
                heapq.heappush(heap, entry)
            for hook in self._step_hooks:
                changes += hook()
        self.now = to
        return changes, True


class Sequence:
    """The numbers that name what a seed derives ids from (events, operations, windows, replacement instances,
    waves): one counter for the whole engine, so that an id is never derived twice."""

    def __init__(self, next_number: int = 1) -> None:
        self.next_number = next_number

    def take(self) -> int:
        number = self.next_number
        self.next_number += 1
        return number

    def past(self, used: int) -> None:
        """``used`` is taken already (a stored event's number)."""
        self.next_number = max(self.next_number, used + 1)
