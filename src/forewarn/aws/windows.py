"""EC2 event windows: weekly UTC periods in which new stop, reboot and retirement events of associated instances are
placed (the AWS page "Define event windows for scheduled events"). Validation follows the documented constraints."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from forewarn.aws.model import Ec2Code
from forewarn.core.errors import Invalid

WEEKDAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_CRON_DAYS = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
WEEK_HOURS = 7 * 24
MAX_WINDOWS = 200
TARGET_LIMITS = {"instance_ids": 100, "dedicated_host_ids": 50, "instance_tags": 50}
# Windows apply only to scheduled events that stop, reboot or terminate instances, not to network maintenance.
PLACED_CODES = {Ec2Code.INSTANCE_REBOOT, Ec2Code.SYSTEM_REBOOT, Ec2Code.INSTANCE_RETIREMENT, Ec2Code.INSTANCE_STOP}


@dataclass(frozen=True)
class TimeRange:
    start_weekday: str
    start_hour: int
    end_weekday: str
    end_hour: int

    @property
    def start(self) -> int:
        """Hours since Sunday 00:00 UTC."""
        return WEEKDAYS.index(self.start_weekday) * 24 + self.start_hour

    @property
    def hours(self) -> int:
        end = WEEKDAYS.index(self.end_weekday) * 24 + self.end_hour
        return (end - self.start + WEEK_HOURS) % WEEK_HOURS


@dataclass(frozen=True)
class EventWindow:
    window_id: str  # iew- and 17 hex digits
    name: str
    time_ranges: tuple[TimeRange, ...] = ()
    cron: str | None = None
    instance_ids: tuple[str, ...] = ()
    instance_tags: tuple[tuple[str, str], ...] = ()
    dedicated_host_ids: tuple[str, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()
    state: str = "active"

    def intervals(self) -> list[tuple[int, int]]:
        """(start hour of the week, length in hours) of every period of the window."""
        if self.cron is not None:
            return cron_intervals(self.cron)
        return [(r.start, r.hours) for r in self.time_ranges]

    @property
    def target_kind(self) -> str | None:
        for kind in ("instance_ids", "instance_tags", "dedicated_host_ids"):
            if getattr(self, kind):
                return kind
        return None

    def place(self, earliest: datetime, length: timedelta | None) -> tuple[datetime, datetime]:
        """The first period of the window that ends after ``earliest``: NotBefore is the later of the period's start
        and ``earliest``; NotAfter is the earlier of NotBefore + ``length`` and the period's end."""
        week_start = (earliest - timedelta(days=(earliest.weekday() + 1) % 7)).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        best: tuple[datetime, datetime] | None = None
        for week in (0, 1, 2):
            for start, hours in self.intervals():
                begin = week_start + timedelta(days=7 * week, hours=start)
                end = begin + timedelta(hours=hours)
                if end > earliest and (best is None or begin < best[0]):
                    best = (begin, end)
            if best is not None:
                break
        if best is None:
            raise ValueError(f"event window {self.window_id} has no time in it")
        begin, end = best
        not_before = max(begin, earliest)
        not_after = end if length is None else min(not_before + length, end)
        return not_before, not_after


def check_time_ranges(ranges: tuple[TimeRange, ...]) -> None:
    for r in ranges:
        for day in (r.start_weekday, r.end_weekday):
            if day not in WEEKDAYS:
                raise Invalid(f"Invalid value '{day}' for weekday; expected one of {', '.join(WEEKDAYS)}")
        for hour in (r.start_hour, r.end_hour):
            if not 0 <= hour <= 23:
                raise Invalid(f"Invalid value '{hour}' for hour; expected 0 to 23")
        if r.hours < 2:
            raise Invalid("each time range of an event window must be at least 2 hours")
    if sum(r.hours for r in ranges) < 4:
        raise Invalid("the time ranges of an event window must add up to at least 4 hours")


_HOUR_RANGE = re.compile(r"^(\d{1,2})-(\d{1,2})$")


def cron_intervals(expression: str) -> list[tuple[int, int]]:
    """The periods of a cron expression: only hour ranges and days of the week may be set (``* 0-4,20-23 * * 1,5``)."""
    fields = expression.split()
    if len(fields) != 5:
        raise Invalid(f"Invalid cron expression '{expression}': it has 5 fields")
    minute, hours, day_of_month, month, days = fields
    if minute != "*" or day_of_month != "*" or month != "*":
        raise Invalid(f"Invalid cron expression '{expression}': only the hour and the day of the week may be set")
    ranges = []
    for part in hours.split(","):
        match = _HOUR_RANGE.match(part)
        if not match or not 0 <= int(match.group(1)) < int(match.group(2)) <= 23:
            raise Invalid(f"Invalid cron expression '{expression}': hours are ranges like 0-4 or 20-23")
        start, end = int(match.group(1)), int(match.group(2))
        if end - start < 2:
            raise Invalid(f"Invalid cron expression '{expression}': each hour range must be at least 2 hours")
        ranges.append((start, end - start))
    if days == "*":
        weekdays = list(range(7))
    else:
        weekdays = []
        for part in days.split(","):
            if part.isdigit() and 0 <= int(part) <= 6:
                weekdays.append(int(part))
            elif part.upper() in _CRON_DAYS:
                weekdays.append(_CRON_DAYS[part.upper()])
            else:
                raise Invalid(f"Invalid cron expression '{expression}': days of the week are 0-6 or SUN-SAT")
    intervals = [(day * 24 + start, length) for day in weekdays for start, length in ranges]
    if sum(length for _, length in intervals) < 4:
        raise Invalid(f"Invalid cron expression '{expression}': the window must add up to at least 4 hours")
    return intervals
