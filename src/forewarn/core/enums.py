"""An enum's value as a person or a client types it: any case, with an error that lists the accepted spellings."""

from __future__ import annotations

import enum
from typing import TypeVar

from forewarn.core.errors import Invalid

AnyEnum = TypeVar("AnyEnum", bound=enum.Enum)


def parse_enum(enum_type: type[AnyEnum], text: str, what: str) -> AnyEnum:
    """Case-insensitive lookup of an enum value, with an error that lists the accepted spellings."""
    for member in enum_type:
        if member.value.lower() == str(text).lower():
            return member
    accepted = ", ".join(member.value for member in enum_type)
    raise Invalid(f"unknown {what} {text!r}; expected one of {accepted}")
