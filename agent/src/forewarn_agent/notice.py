"""A maintenance notice as the agent acts on it, whatever cloud gave it."""

from __future__ import annotations

import calendar
import email.utils
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, Optional, Tuple


@dataclass(frozen=True)
class Notice:
    """One event that concerns this machine or its neighbours.

    ``key`` is unique on this machine for the event's whole life (the cloud's event id, or one the agent gave an
    occurrence that has none, as Compute Engine's ``maintenance-event``). ``own``: the event names this machine
    (events of an availability set or placement group reach every VM of it, also those they do not name).
    ``approvable``: the cloud takes an early approval for it (Azure's StartRequests)."""

    key: str
    cloud: str
    event_id: str
    kind: str
    status: str
    not_before: Optional[float]  # seconds since the epoch; None: at once, or unknown
    resources: Tuple[str, ...] = ()
    own: bool = True
    approvable: bool = False
    description: str = ""
    finished: Optional[str] = None  # "ended" or "canceled": the cloud says the event is over (EC2's State)
    advance: bool = False  # announced days ahead (Compute Engine's upcoming-maintenance): told, not drained for
    raw: Dict[str, Any] = field(default_factory=dict, compare=False)

    def seconds_left(self, now: float) -> Optional[float]:
        return None if self.not_before is None else self.not_before - now

    def as_json(self) -> Dict[str, Any]:
        data = asdict(self)
        data["resources"] = list(self.resources)
        return data


def rfc1123_seconds(text: str) -> Optional[float]:
    """Azure's ``NotBefore`` (``Mon, 19 Sep 2016 18:29:47 GMT``); ``""`` (Started) is None."""
    if not text:
        return None
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def ec2_time_seconds(text: str) -> Optional[float]:
    """EC2's scheduled-event times (``21 Jan 2019 09:00:43 GMT``, the day not zero-padded)."""
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%d %b %Y %H:%M:%S GMT")))
    except ValueError:
        return None


def iso_seconds(text: str) -> Optional[float]:
    """``2017-09-18T08:22:00Z`` (EC2's Spot and rebalance notices)."""
    if not text:
        return None
    for pattern in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return None
