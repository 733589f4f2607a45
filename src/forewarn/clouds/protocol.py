"""What a cloud gives the server: the one object each cloud package exports (its ``cloud.py``).

A cloud holds everything of its own: its model, its engine component and rules, its records in the store, its
surfaces. The corridors (the engine, the store, the runtime) know a cloud only through this protocol, and find the
clouds through the registry (``registry.py``); none of them names a cloud.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from forewarn.core.changes import Change
    from forewarn.core.scheduler import Scheduler, Sequence
    from forewarn.store.records import Records


@dataclass(frozen=True)
class Footing:
    """What every component of one engine stands on: the fleet, the seed its ids derive from, the rules, the shared
    deadline heap and numbering, and when the fleet was deployed (its machines' boot time).

    ``fleet`` and ``rules`` are the server's whole ones (``fleet/model.py``, ``engine/rules.py``), typed loosely here:
    they are made of every cloud's parts, and each cloud's component reads its own part through its own types."""

    fleet: Any
    seed: str
    rules: Any
    scheduler: Scheduler
    sequence: Sequence
    created_at: datetime


class Component(Protocol):
    """A cloud's part of the engine: its state, its commands and queries, its deadlines on the shared heap."""

    # What was brought inside the bounds (core/bounds.py) on loading a database written before them: the service
    # logs these changes and writes them back before it serves.
    repaired: list[Change]

    def replicate(self, rows: Any, created_at: datetime) -> list[Change]:
        """Take the rows the leader's commits touched (what the cloud's ``Records.reload`` read)."""
        ...

    def reschedule(self) -> None:
        """Set every deadline again from the state, as loading it does."""
        ...


class Cloud(Protocol):
    @property
    def name(self) -> str:
        """The package's name: it keys the cloud's stored state, its records and its component."""
        ...

    @property
    def title(self) -> str:
        """As its users read it, in logs and messages: "Azure", "Amazon EC2", "Compute Engine"."""
        ...

    @property
    def records(self) -> Records:
        """What the cloud writes to the store, and how its stored state is read back."""
        ...

    def component(self, footing: Footing, stored: Any | None) -> Component:
        """The cloud's engine component over ``stored`` (what its ``Records.load`` read; None: a fleet just
        deployed)."""
        ...
