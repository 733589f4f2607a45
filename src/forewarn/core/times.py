"""The one reader and writer of ISO 8601 times that users type and the control API exchanges.

A time is read with ``Z`` or ``z`` for UTC, or any offset; a time without an offset is UTC (a simulator runs on
UTC, and people paste ``2026-04-20T22:26:58`` meaning just that). Times are written in UTC with a ``Z``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from forewarn.core.errors import Invalid


def parse_time(text: str) -> datetime:
    """``2026-04-20T22:26:58Z`` (or any ISO 8601 form) as an aware datetime; :class:`Invalid` if it is none."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise Invalid(f"invalid time {text!r}; use ISO 8601, e.g. 2026-04-20T22:26:58Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_optional_time(text: str | None) -> datetime | None:
    """:func:`parse_time`, with ``None`` (no time given) read as ``None``."""
    return None if text is None else parse_time(text)


def format_time(moment: datetime) -> str:
    """``moment`` in UTC as ISO 8601 with a ``Z``: ``2026-04-20T22:26:58Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def format_optional_time(moment: datetime | None) -> str | None:
    return None if moment is None else format_time(moment)


def formatted_times(record: object, *names: str) -> dict[str, Any]:
    """The moments ``names`` of ``record`` (its attributes), each formatted as ``format_time`` does (None kept): what a
    view shows of a record's times, under the record's names for them."""
    return {name: format_optional_time(getattr(record, name)) for name in names}
