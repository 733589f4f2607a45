"""An EC2 instance's Name tag, by the tag rules of the AWS page "Tag your Amazon EC2 resources" (Tag restrictions): a
value is up to 256 Unicode characters, of letters, numbers and spaces and ``+ - = . _ : / @`` (the pattern
``^([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)$`` of the EC2 API reference's Tag type). An instance is known by its id; the
Name tag is how people find it."""

from __future__ import annotations

import unicodedata

MAX_VALUE_LENGTH = 256
_ALSO_ALLOWED = frozenset("+-=._:/@")


def name_tag_problem(value: str) -> str | None:
    """Why ``value`` cannot be an instance's Name tag, or None when it can."""
    if not 1 <= len(value) <= MAX_VALUE_LENGTH:
        return f"a Name tag is 1-{MAX_VALUE_LENGTH} characters, not {len(value)}"
    for character in value:
        if character not in _ALSO_ALLOWED and unicodedata.category(character)[0] not in "LNZ":
            return (
                f"a Name tag is letters, numbers, spaces and + - = . _ : / @; {character!r} "
                f"(U+{ord(character):04X}) is none of these"
            )
    return None
