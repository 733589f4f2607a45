"""Deterministic identifiers: the same seed and sequence number always give the same EventId.

Real EventIds are uppercase GUIDs (``C7061BAC-AFDC-4513-B24B-AA5F13A16123``); ours have the same shape (version 4
bits set) but are derived from a seed, so a replayed command sequence produces identical documents.
"""

from __future__ import annotations

import hashlib


def derived_guid(seed: str, *parts: object) -> str:
    """What ``str(uuid.UUID(bytes=digest, version=4)).upper()`` gives, formatted directly: a fleet derives one per
    VM, a million at a first start."""
    digest = bytearray(hashlib.blake2b("\x1f".join([seed, *map(str, parts)]).encode(), digest_size=16).digest())
    digest[6] = (digest[6] & 0x0F) | 0x40  # version 4
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    text = digest.hex().upper()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
