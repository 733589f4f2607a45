"""EventIds made from numbers (core/ids.py's NumberedGuids): version 4 GUIDs that give their number back."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forewarn.core.ids import NumberedGuids

IDS = NumberedGuids("seed", "azure-event")
NUMBERS = st.integers(min_value=0, max_value=2**63 - 1)


@given(NUMBERS)
def test_a_guid_gives_its_number_back_in_either_case(number):
    guid = IDS.guid(number)
    assert guid == guid.upper() and uuid.UUID(guid).version == 4 and uuid.UUID(guid).variant == uuid.RFC_4122
    assert IDS.number(guid) == number
    assert IDS.number(guid.lower()) == number


@given(NUMBERS, NUMBERS)
def test_two_numbers_never_share_a_guid(first, second):
    assert (IDS.guid(first) == IDS.guid(second)) == (first == second)


def test_the_seed_and_the_purpose_choose_the_guids():
    assert IDS.guid(7) == NumberedGuids("seed", "azure-event").guid(7)  # the same run, the same ids
    assert IDS.guid(7) != NumberedGuids("other seed", "azure-event").guid(7)
    assert IDS.guid(7) != NumberedGuids("seed", "other").guid(7)
    assert NumberedGuids("other seed", "azure-event").number(IDS.guid(7)) != 7


def test_consecutive_numbers_look_random():
    """Events are numbered in order; their ids must not show it (a client sorting by EventId sees no creation
    order, as with Azure's). Every free bit is set in about half the ids of 5,000 consecutive numbers."""
    values = [uuid.UUID(IDS.guid(number)).int for number in range(5_000)]
    fixed = {62, 63, 76, 77, 78, 79}  # the variant's bits and the version's
    shares = [sum(value >> bit & 1 for value in values) / len(values) for bit in range(128) if bit not in fixed]
    assert 0.45 < min(shares) and max(shares) < 0.55
    assert len({value >> 112 for value in values}) > 4_000  # the first four hex digits: few shared


def test_text_that_no_number_makes_gives_none():
    guid = IDS.guid(12)
    for text in (
        "",
        "not a guid",
        guid[:-1],
        guid + "0",
        guid.replace("-", ""),
        "+" + guid[1:],  # int() would read a sign
        guid[:4] + "_" + guid[5:],  # or an underscore
        guid[:14] + "1" + guid[15:],  # version 1
        guid[:19] + "0" + guid[20:],  # not RFC 4122's variant
        "C7061BAC-AFDC-4513-B24B-AA5F13A16123",  # Microsoft's sample EventId: its number would be past 2**63
    ):
        assert IDS.number(text) is None, text


def test_numbers_outside_the_range_are_refused():
    for number in (-1, 2**63):
        with pytest.raises(ValueError, match="outside the numbers"):
            IDS.guid(number)
