"""The range of simulated time and the longest duration each command may carry.

Every datetime the engine derives is a bounded time plus a few bounded durations (NotBefore = now + notice; the end
of the impact window = start + impact window; a VM's recovery = start + DurationInSeconds; an EC2 deadline =
NotBefore + deadline; a delivery's expiry = now + its time to live; Resource Graph's cutoff = now - retention). With
simulated time kept inside [EARLIEST_TIME, LATEST_TIME] and each duration below its bound, all of them stay
centuries away from ``datetime.min`` and ``datetime.max``: no command can overflow a datetime, and no database
written under these bounds can make the engine overflow when it loads.

The bounds are far wider than the clouds': they refuse only values that are mistakes (a notice of a million years),
never a scenario a user could mean. docs/engine.md lists them with the clouds' own limits.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from forewarn.core.durations import format_duration
from forewarn.core.errors import Invalid

# The Unix epoch: a real clock is computed from epoch seconds, and nothing simulated happens earlier.
EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)
# About a thousand years short of datetime.max (9999-12-31), the margin every derived time needs.
LATEST_TIME = datetime(9000, 1, 1, tzinfo=UTC)

# Time from now until NotBefore (a notice, or an explicit NotBefore), for Azure and EC2 events alike. Azure gives
# minutes (15 for Freeze, Reboot and Redeploy, 30 s for Preempt, 5 to 15 for Terminate) and "tries to give seven
# days" before a predicted hardware failure; EC2 schedules events about two weeks ahead. A year is ample.
MAX_NOTICE = timedelta(days=365)
# How long an event lasts: an Azure event's impact window (Started until Completed), its DurationInSeconds, and an
# EC2 event's NotAfter - NotBefore. Real ones last seconds to a few hours.
MAX_EVENT_LENGTH = timedelta(days=7)
MAX_DURATION_SECONDS = int(MAX_EVENT_LENGTH.total_seconds())
# An EC2 event's NotBeforeDeadline - NotBefore (how late ModifyInstanceEventStartTime may move it; AWS's are weeks).
MAX_EC2_DEADLINE = timedelta(days=365)
# One `clock advance`: the longest duration the parser accepts (a longer jump is a few commands, or `clock set`).
MAX_CLOCK_STEP = timedelta(days=3650)
# A real clock's rate: from a simulated millisecond to about eleven simulated days per wall second.
MIN_CLOCK_SPEED = 0.001
MAX_CLOCK_SPEED = 1_000_000.0


def iso_time(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def check_time(moment: datetime, what: str) -> datetime:
    """``moment`` if it is a UTC-aware time inside the simulated range, else :class:`Invalid` naming ``what``."""
    if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
        raise Invalid(f"{what} must be a time with a UTC offset, e.g. 2026-04-20T22:26:58Z")
    if not EARLIEST_TIME <= moment <= LATEST_TIME:
        raise Invalid(
            f"{what} {_shown(moment)} is outside the simulated time range "
            f"{iso_time(EARLIEST_TIME)} to {iso_time(LATEST_TIME)}"
        )
    return moment


def check_duration(value: timedelta, what: str, maximum: timedelta, minimum: timedelta = timedelta(0)) -> timedelta:
    """``value`` if ``minimum <= value <= maximum``, else :class:`Invalid` with the bounds in ISO 8601."""
    if not isinstance(value, timedelta):
        raise Invalid(f"{what} must be a duration such as PT15M")
    if value < minimum:
        if minimum == timedelta(0):
            raise Invalid(f"{what} cannot be negative (got {format_duration(value)})")
        raise Invalid(f"{what} must be at least {format_duration(minimum)} (got {format_duration(value)})")
    if value > maximum:
        raise Invalid(f"{what} {format_duration(value)} is too long; at most {format_duration(maximum)}")
    return value


def check_whole_number(value: object, what: str, low: int, high: int) -> int:
    """An integer (not a boolean, not a float) between ``low`` and ``high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{what} must be an integer from {low} to {high}, got {value!r}")
    if not low <= value <= high:
        raise Invalid(f"{what} must be from {low} to {high}, got {value}")
    return value


def clamped_time(moment: datetime) -> datetime:
    """``moment`` brought inside the simulated range (for values read from an older database)."""
    return min(max(moment, EARLIEST_TIME), LATEST_TIME)


def _shown(moment: datetime) -> str:
    try:
        return iso_time(moment.astimezone(UTC))
    except (OverflowError, ValueError):  # e.g. 0001-01-01T00:00+01:00 has no UTC form
        return moment.isoformat()


def whole_second_ceiling(moment: datetime) -> datetime:
    """NotBefore is shown to the second; rounding up keeps the promise that nothing starts before the shown time."""
    if moment.microsecond == 0:
        return moment
    return moment.replace(microsecond=0) + timedelta(seconds=1)


def checked_not_before(
    not_before: datetime | None, notice: timedelta | None, default_notice: timedelta, now: datetime
) -> datetime:
    """The NotBefore a request asks for, Azure's or EC2's: an explicit time (in the future, within the longest
    notice) or ``now`` plus a notice (the request's, else the default), to the next whole second."""
    if not_before is not None and notice is not None:
        raise Invalid("give either a notice or a NotBefore time, not both")
    if not_before is None:
        chosen = default_notice if notice is None else notice
        return check_time(whole_second_ceiling(now + check_duration(chosen, "notice", MAX_NOTICE)), "NotBefore")
    explicit = check_time(whole_second_ceiling(check_time(not_before, "NotBefore")), "NotBefore")
    if explicit < now:
        raise Invalid(f"NotBefore {iso_time(explicit)} is in the past (now {iso_time(now)})")
    if explicit - now > MAX_NOTICE:
        raise Invalid(
            f"NotBefore {iso_time(explicit)} is too far ahead; at most {format_duration(MAX_NOTICE)} after now "
            f"({iso_time(now)})"
        )
    return explicit


# What follows from an instant inside the range (an event's end, an impact's end, an EC2 deadline) may pass the end of
# the range by up to the longest notice: an event that starts at the last instant still has its whole window.
LATEST_DERIVED_TIME = LATEST_TIME + MAX_NOTICE


def clamped_end(moment: datetime) -> datetime:
    """An end or deadline brought inside what commands can produce (for values read from an older database)."""
    return min(max(moment, EARLIEST_TIME), LATEST_DERIVED_TIME)
