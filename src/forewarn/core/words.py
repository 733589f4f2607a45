"""Counts in words, as every message forewarn prints writes them: ``1 event``, ``2 events``, ``1,000 VMs``."""

from __future__ import annotations


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` and ``noun``, plural unless it is one (``plural`` for a noun that does not take an s)."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"
