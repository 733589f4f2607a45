"""Errors the core raises for commands it refuses. Surfaces translate them into their own wire style."""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Iterable

# "Did you mean" compares the unknown name with at most this many known ones (those sharing its first character
# first), found among at most SUGGESTION_SCAN of them: difflib takes 10 to 25 µs a comparison, and a typo on a
# million-VM fleet must cost the shared event loop milliseconds (a pool of 20,000 held it 100 to 470 ms).
SUGGESTION_POOL = 500
SUGGESTION_SCAN = 20 * SUGGESTION_POOL


class CoreError(Exception):
    """A command was refused; nothing was changed."""


class NotFound(CoreError):
    """A command named something (VM, host, event) that does not exist.

    ``name`` and ``known`` (the names that do exist, often a dict's live key view) let a surface that speaks to people
    suggest the nearest ones; surfaces that mimic a cloud's exact message ignore them."""

    def __init__(self, message: str, *, name: str | None = None, known: Iterable[str] = ()):
        super().__init__(message)
        self.name = name
        self.known = known


class Conflict(CoreError):
    """A command is valid in itself but not in the current state (e.g. cancel a Started event)."""


class Invalid(CoreError):
    """A command's arguments are malformed or out of range."""


class Ambiguous(Invalid):
    """A short name (an EventId prefix) matches more than one thing."""


def close_matches(name: str, known: Iterable[str], limit: int = 3) -> list[str]:
    """The known names nearest to ``name`` (difflib), best first; comparison is case-insensitive."""
    wanted = name.lower()
    pool: list[str] = []
    others: list[str] = []
    for candidate in itertools.islice(known, SUGGESTION_SCAN):
        if candidate[:1].lower() == wanted[:1]:
            pool.append(candidate)
            if len(pool) >= SUGGESTION_POOL:
                break
        elif len(others) < SUGGESTION_POOL:
            others.append(candidate)
    pool += others[: SUGGESTION_POOL - len(pool)]
    by_lower: dict[str, str] = {}
    for candidate in pool:
        by_lower.setdefault(candidate.lower(), candidate)
    return [by_lower[match] for match in difflib.get_close_matches(wanted, list(by_lower), n=limit, cutoff=0.6)]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'a' or 'b'?"``, or ``""`` when nothing is close."""
    matches = close_matches(name, known)
    if not matches:
        return ""
    quoted = [repr(match) for match in matches]
    return "; did you mean " + (quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]) + "?"
