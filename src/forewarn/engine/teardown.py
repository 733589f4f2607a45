"""Freeing a replaced engine a slice at a time (``dismantle``), so that no one stretch of it holds the interpreter.

A reset or a rebuild drops an engine of up to a million VMs' states and events. Dropped at once, reference counting
frees all of it in one call no other thread can interrupt (135 ms at 100,000 events), on whatever thread drops the
last reference, the event loop's included. Here the large containers the engine's parts own alone are emptied a
slice at a time, the interpreter handed to other threads between slices.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

# Entries freed between two hand-overs of the interpreter: a few milliseconds of freeing at most.
SLICE = 2_000
# How far below each part of the engine its containers are looked for (part -> its helpers -> their containers).
DEPTH = 3
# sys.getrefcount of a value that one attribute alone holds: that attribute, the walk's variable, the call's argument.
HELD_BY_ONE = 3


def dismantle(parts: Iterable[Any]) -> None:
    """Empty, a slice at a time, the large containers held by ``parts`` (a replaced engine's components), each
    through one attribute and by nothing else; the caller then drops them.

    What anything else also holds is left whole: the fleet and the rules, which the next engine shares, the store,
    and a container a reader still iterates (its iterator holds it). Those go with their last reference."""
    for container in list(_owned_containers(parts)):
        empty_in_slices(container)


def _owned_containers(parts: Iterable[Any]) -> Iterator[dict | list | set]:
    level = list(parts)
    for _ in range(DEPTH):
        below: list[Any] = []
        for node in level:
            for value in _values(node):
                if sys.getrefcount(value) > HELD_BY_ONE:
                    continue  # shared: not this engine's alone
                if isinstance(value, (dict, list, set)):
                    if len(value) > SLICE:
                        yield value
                elif hasattr(value, "__dict__") or hasattr(type(value), "__slots__"):
                    below.append(value)
        level = below


def _values(node: Any) -> Iterator[Any]:
    """Each attribute's value, handed on without a reference of this function's own (``HELD_BY_ONE`` counts none)."""
    if hasattr(node, "__dict__"):
        yield from vars(node).values()
    yield from (getattr(node, name, None) for name in getattr(type(node), "__slots__", ()))


def empty_in_slices(container: dict | list | set) -> None:
    """Empty ``container``, a slice at a time, the interpreter handed over between slices (from a thread of its own:
    the event loop answers meanwhile)."""
    pop = container.popitem if isinstance(container, dict) else container.pop
    while container:
        for _ in range(min(SLICE, len(container))):
            pop()
        time.sleep(0)  # hand the interpreter over: the event loop answers between slices
