"""What a command did: the changes the engine returns, which the store commits before anyone hears of them.

Each component defines its own kinds of change (``azure/changes.py``, ``aws/changes.py``, ``waves``); they all derive
from :class:`Change`, so a list of them is one typed thing. The kinds every component shares are here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# The ``what`` of the changes a replica tells its read models about: rows the leader committed, as it read them back
# (replication/), whatever the command that wrote them.
REPLICATED = "replicated"


class Change:
    """One thing a command changed. Subclasses are frozen dataclasses; the store has a writer for each."""

    __slots__ = ()

    def subject(self) -> str:
        """What the change is about, for log lines ("event 5A3C...", "instance i-0abc...")."""
        return type(self).__name__

    def describe(self) -> str | None:
        """The log line that tells what happened to what; None for changes not worth a line of their own."""
        return None


@dataclass(frozen=True)
class TimeMoved(Change):
    now: datetime


@dataclass(frozen=True)
class DeliveryMade(Change):
    """A delivery of the outbox that the command carrying this change made into forewarn's own state (a message put
    on one of its queues): recorded delivered in the same transaction, so that a crash can neither lose the message
    nor have the outbox send it again."""

    delivery_id: int
    attempts: int


@dataclass(frozen=True)
class Rebuilt(Change):
    """The engine was rebuilt from the database (after a failed commit, or a command refused after it may have
    changed part of the engine): whatever a listener derived from earlier changes may be wrong and is to be dropped.
    Announced alone, never committed (the store has no writer for it)."""

    cause: str


@dataclass(frozen=True)
class Reset(Rebuilt):
    """A Rebuilt after the server was brought back to its start (``POST /v1/reset``): what a listener keeps of its own
    beside the engine's state (a caller's query quota) starts afresh too, as on a fresh server."""
