"""A "did you mean" costs the event loop milliseconds at any fleet size: it looks at a bounded number of the names
known and compares a bounded number of them (core/errors.py). A mistyped enum value gets one too (core/enums.py)."""

from __future__ import annotations

import enum
from collections.abc import Iterator

import pytest

from forewarn.core.enums import parse_enum
from forewarn.core.errors import SUGGESTION_POOL, SUGGESTION_SCAN, Invalid, close_matches, did_you_mean


class Counted:
    """A million names, counting how many were taken."""

    def __init__(self, count: int):
        self.count = count
        self.taken = 0

    def __iter__(self) -> Iterator[str]:
        for index in range(self.count):
            self.taken += 1
            yield f"vm-{index:07d}"


def test_a_million_names_are_looked_at_a_bounded_number_at_a_time():
    names = Counted(1_000_000)
    assert close_matches("vm-0000123x", names)[0] == "vm-0000123"
    assert names.taken <= SUGGESTION_SCAN
    unlike = Counted(1_000_000)
    assert close_matches("zz-1", unlike) == []  # no name shares its first character: the scan still ends
    assert unlike.taken <= SUGGESTION_SCAN


def test_names_sharing_the_first_character_are_compared_first():
    names = [f"other-{index}" for index in range(SUGGESTION_POOL * 2)] + ["web-1"]
    assert did_you_mean("web-l", names) == "; did you mean 'web-1'?"


class Kind(enum.Enum):
    FREEZE = "Freeze"
    REBOOT = "Reboot"
    REDEPLOY = "Redeploy"


def test_an_enum_value_mistyped_is_refused_with_the_spellings_and_the_nearest():
    assert parse_enum(Kind, "freeze", "event type") is Kind.FREEZE
    expected = "unknown event type 'Frezee'; expected one of Freeze, Reboot, Redeploy; did you mean 'Freeze'?"
    with pytest.raises(Invalid) as refused:
        parse_enum(Kind, "Frezee", "event type")
    assert str(refused.value) == expected
    with pytest.raises(Invalid, match=r"^unknown event type 'xyz'; expected one of Freeze, Reboot, Redeploy$"):
        parse_enum(Kind, "xyz", "event type")
