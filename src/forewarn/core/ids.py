"""Deterministic identifiers: the same seed and sequence number always give the same EventId.

Real EventIds are uppercase GUIDs (``C7061BAC-AFDC-4513-B24B-AA5F13A16123``); ours have the same shape (version 4
bits set) but are derived from a seed, so a replayed command sequence produces identical documents.
"""

from __future__ import annotations

import hashlib
import uuid


def derived_guid(seed: str, *parts: object) -> str:
    digest = hashlib.blake2b("\x1f".join([seed, *map(str, parts)]).encode(), digest_size=16).digest()
    return str(uuid.UUID(bytes=digest, version=4)).upper()
