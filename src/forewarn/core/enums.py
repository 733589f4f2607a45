"""An enum's value as a person or a client types it: any case, with an error that lists the accepted spellings and
suggests the nearest."""

from __future__ import annotations

import enum
from typing import TypeVar

from forewarn.core.errors import Invalid, did_you_mean

AnyEnum = TypeVar("AnyEnum", bound=enum.Enum)


def parse_enum(enum_type: type[AnyEnum], text: str, what: str) -> AnyEnum:
    """Case-insensitive lookup of an enum value, with an error that lists the accepted spellings and suggests the
    nearest (``Frezee``: ``did you mean 'Freeze'?``)."""
    for member in enum_type:
        if member.value.lower() == str(text).lower():
            return member
    values = [member.value for member in enum_type]
    raise Invalid(f"unknown {what} {text!r}; expected one of {', '.join(values)}{did_you_mean(str(text), values)}")
