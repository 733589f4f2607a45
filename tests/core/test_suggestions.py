"""A "did you mean" costs the event loop milliseconds at any fleet size: it looks at a bounded number of the names
known and compares a bounded number of them (core/errors.py)."""

from __future__ import annotations

from collections.abc import Iterator

from forewarn.core.errors import SUGGESTION_POOL, SUGGESTION_SCAN, close_matches, did_you_mean


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
