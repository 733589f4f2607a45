"""What the engine asks of each cloud: a component built on the engine's footing.

The whole of what a cloud gives the server is ``forewarn/cloud.py``'s ``Cloud``; this is the part the engine needs,
kept in the core so that the engine and the registry (``forewarn/registry.py``) depend on nothing above them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from forewarn.core.changes import Change
from forewarn.core.scheduler import Scheduler
from forewarn.core.scheduler import Sequence as Numbering


class StoredRows(Protocol):
    """Reads of what the database holds durably (the store, ``store/base.py``): how a component finds again what
    it no longer keeps in memory (events that ended once their end was committed)."""

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one query (``?`` marks its parameters), read in a transaction of their own."""
        ...


@dataclass(frozen=True)
class Footing:
    """What every component of one engine stands on: the fleet, the seed its ids derive from, the rules, the shared
    deadline heap and numbering, and when the fleet was deployed (its machines' boot time).

    ``fleet`` and ``rules`` are the server's whole ones (``fleet/model.py``, ``engine/rules.py``), typed loosely here:
    they are made of every cloud's parts, and each cloud's component reads its own part through its own types
    (``rules.of(AzureRules)``).

    ``stored``: the database the engine's state was loaded from and is committed to (None: an engine that is not
    committed anywhere, which keeps everything in memory)."""

    fleet: Any
    seed: str
    rules: Any
    scheduler: Scheduler
    sequence: Numbering
    created_at: datetime
    stored: StoredRows | None = None


R = TypeVar("R")


class OnFooting(Generic[R]):
    """What every cloud's component keeps of its footing (with the rules read as the cloud's own type ``R``), and
    the engine's time, which is its deadline heap's."""

    def __init__(self, footing: Footing, rules: R) -> None:
        self.fleet = footing.fleet
        self.seed = footing.seed
        self.rules = rules
        self.scheduler = footing.scheduler
        self.sequence = footing.sequence

    @property
    def now(self) -> datetime:
        return self.scheduler.now


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

    def release(self) -> None:
        """Everything the component changed so far is durable (committed): what it keeps only until then (events
        that ended) may leave memory, to be read from ``Footing.stored`` when asked."""
        ...


class ComponentSource(Protocol):
    """A registered cloud, as the engine sees it."""

    @property
    def name(self) -> str:
        """The package's name: it keys the cloud's stored state, its records and its component."""
        ...

    def default_rules(self) -> Any:
        """The cloud's rules as a server runs them unless told otherwise (an object of the cloud's own type, with a
        ``check()`` that refuses a rule outside the bounds every event is held to)."""
        ...

    def component(self, footing: Footing, stored: Any | None) -> Component:
        """The cloud's engine component over ``stored`` (what its ``Records.load`` read; None: a fleet just
        deployed)."""
        ...
