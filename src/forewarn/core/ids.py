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


_HALF = 61  # a version 4 GUID leaves 122 bits free: two halves of a Feistel network
_HALF_MASK = (1 << _HALF) - 1
_LOW_BITS = 62  # below the variant's two bits
_LARGEST_NUMBER = (1 << 63) - 1  # numbers are the store's BIGINT sequence
_ROUNDS = 4
_WORD = (1 << 64) - 1


class NumberedGuids:
    """Numbers as GUIDs and back: a keyed permutation (a Feistel network over the 122 bits a version 4 GUID leaves
    free) of the number, so that the GUID looks as random as ``derived_guid``'s and the same seed and number always
    give the same one, but, unlike a hash, it gives its number back. The store keeps events by number and finds one
    by its GUID without an index of GUIDs: new keys of such an index land at random pages, and at a million events
    writing them was most of what made each event dearer than at ten thousand."""

    def __init__(self, seed: str, purpose: str) -> None:
        digest = hashlib.blake2b(f"{seed}\x1f{purpose}".encode(), digest_size=8 * _ROUNDS).digest()
        self._keys = [int.from_bytes(digest[8 * round_ : 8 * round_ + 8], "big") for round_ in range(_ROUNDS)]

    def guid(self, number: int) -> str:
        """The GUID of ``number`` (0 to 2**63 - 1), upper case as Azure writes EventIds."""
        if not 0 <= number <= _LARGEST_NUMBER:
            raise ValueError(f"{number} is outside the numbers a GUID is made from")
        left, right = number >> _HALF, number & _HALF_MASK
        for key in self._keys:
            left, right = right, left ^ self._scramble(key, right)
        value = (left << _HALF) | right
        high, low = value >> _LOW_BITS, value & ((1 << _LOW_BITS) - 1)
        bits = ((high >> 12) << 80) | (0x4 << 76) | ((high & 0xFFF) << 64) | (0b10 << 62) | low
        text = f"{bits:032X}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"

    def number(self, guid: str) -> int | None:
        """The number ``guid`` was made from (any case); None for a text that no number gives."""
        bits = _guid_bits(guid)
        if bits is None or (bits >> 76) & 0xF != 0x4 or (bits >> 62) & 0b11 != 0b10:
            return None
        high = ((bits >> 80) << 12) | ((bits >> 64) & 0xFFF)
        value = (high << _LOW_BITS) | (bits & ((1 << _LOW_BITS) - 1))
        left, right = value >> _HALF, value & _HALF_MASK
        for key in reversed(self._keys):
            left, right = right ^ self._scramble(key, left), left
        number = (left << _HALF) | right
        return number if number <= _LARGEST_NUMBER else None

    @staticmethod
    def _scramble(key: int, half: int) -> int:
        """A round's function: SplitMix64's finalizer of the half offset by the round's key. A permutation needs no
        more than a mixing function; nothing here is secret."""
        mixed = (half + key) & _WORD
        mixed = ((mixed ^ (mixed >> 30)) * 0xBF58476D1CE4E5B9) & _WORD
        mixed = ((mixed ^ (mixed >> 27)) * 0x94D049BB133111EB) & _WORD
        return (mixed ^ (mixed >> 31)) & _HALF_MASK


_HYPHENS = (8, 13, 18, 23)
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def _guid_bits(text: str) -> int | None:
    """A GUID's 128 bits; None for text of another form (``int`` alone would take a sign or underscores)."""
    if len(text) != 36 or any(text[position] != "-" for position in _HYPHENS):
        return None
    digits = text.replace("-", "")
    if len(digits) != 32 or not set(digits) <= _HEX_DIGITS:
        return None
    return int(digits, 16)
