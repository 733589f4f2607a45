"""Parsing of the duration spellings users type: ``30s``, ``15m``, ``1h30m``, ``2d``, ``PT15M``, ``P1DT2H``, ``90``."""

from __future__ import annotations

import re
from datetime import timedelta

from forewarn.core.errors import Invalid

_SHORT = re.compile(r"(?P<value>\d+(?:\.\d+)?)(?P<unit>ms|d|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_ISO = re.compile(
    r"P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)


# The longest duration anyone types (ten years): nothing in a maintenance schedule is longer, and the commands hold
# their own, shorter bounds (core/bounds.py).
MAX_DURATION = timedelta(days=3650)


def parse_duration(text: str) -> timedelta:
    """Parse a duration; a bare number means seconds. Raises :class:`Invalid` with the accepted forms, also for
    durations beyond ten years (nothing in a maintenance schedule is that long, and larger ones overflow)."""
    try:
        duration = _parse(text)
    except OverflowError:
        duration = None
    if duration is None or duration > MAX_DURATION:
        raise Invalid(f"duration {str(text).strip()!r} is too long; at most {format_duration(MAX_DURATION)}")
    return duration


def parse_optional_duration(text: str | None) -> timedelta | None:
    """:func:`parse_duration`, with ``None`` (no duration given) read as ``None``."""
    return None if text is None else parse_duration(text)


def format_duration(value: timedelta) -> str:
    """ISO 8601, the way forewarn writes durations back: ``PT20M``, ``P7D``, ``PT1H30M``, ``PT0.5S``, ``-PT5M``."""
    sign = "-" if value < timedelta(0) else ""
    value = abs(value)
    days, rest = value.days, value.seconds
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    fraction = f"{seconds}.{value.microseconds:06d}".rstrip("0") if value.microseconds else str(seconds)
    time = (
        (f"{hours}H" if hours else "")
        + (f"{minutes}M" if minutes else "")
        + (f"{fraction}S" if seconds or value.microseconds else "")
    )
    text = (f"{days}D" if days else "") + (f"T{time}" if time else "")
    return f"{sign}P{text}" if text else "PT0S"


def _parse(text: str) -> timedelta:
    raw = str(text).strip()
    if not raw:
        raise Invalid("empty duration; use forms like 30s, 15m, 1h30m, 2d or PT15M")
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        return timedelta(seconds=float(raw))
    upper = raw.upper()
    if upper.startswith("P"):
        match = _ISO.fullmatch(upper)
        if match and upper not in ("P", "PT") and not upper.endswith("T"):
            parts = {k: float(v) for k, v in match.groupdict().items() if v}
            return timedelta(
                days=parts.get("days", 0),
                hours=parts.get("hours", 0),
                minutes=parts.get("minutes", 0),
                seconds=parts.get("seconds", 0),
            )
        raise Invalid(f"invalid ISO 8601 duration {raw!r}; examples: PT15M, PT30S, P1DT2H")
    position = 0
    total = 0.0
    lowered = raw.lower()
    for match in _SHORT.finditer(lowered):
        if match.start() != position:
            break
        total += float(match.group("value")) * _UNIT_SECONDS[match.group("unit")]
        position = match.end()
    if position != len(lowered) or position == 0:
        raise Invalid(f"invalid duration {raw!r}; use forms like 30s, 15m, 1h30m, 2d or PT15M")
    return timedelta(seconds=total)
