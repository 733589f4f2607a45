"""The one clock that drives all simulated time.

The clock is pure: it is told the wall time and answers the simulated time. ``manual`` time moves only when told;
``real`` time follows the wall clock, optionally sped up (``speed=60``: a wall second is a simulated minute). The
setting is persisted, so simulated time keeps running across restarts and never goes backwards.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from forewarn.core.errors import Conflict, Invalid

MANUAL = "manual"
REAL = "real"
MODES = (MANUAL, REAL)


def utc_from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


@dataclass(frozen=True)
class Clock:
    mode: str
    speed: float
    anchor_wall: float  # wall time (epoch seconds) at which simulated time was anchor_sim
    anchor_sim: datetime

    @classmethod
    def start(cls, mode: str, speed: float, wall: float, sim_start: datetime | None = None) -> Clock:
        cls._check(mode, speed)
        if sim_start is None:
            sim_start = utc_from_epoch(wall)
            if mode == MANUAL:  # a hand-moved clock reads better on whole seconds; a real one must match the wall
                sim_start = sim_start.replace(microsecond=0)
        return cls(mode, float(speed), wall, sim_start)

    @staticmethod
    def _check(mode: str, speed: float) -> None:
        if mode not in MODES:
            raise Invalid(f"unknown clock mode {mode!r}; expected one of {', '.join(MODES)}")
        if not speed > 0:
            raise Invalid(f"clock speed must be positive, got {speed}")

    def now(self, wall: float) -> datetime:
        if self.mode == MANUAL:
            return self.anchor_sim
        return self.anchor_sim + timedelta(seconds=(wall - self.anchor_wall) * self.speed)

    def wall_when(self, sim: datetime) -> float | None:
        """Wall time at which simulated time reaches ``sim``; None for a manual clock (only a command moves it)."""
        if self.mode == MANUAL:
            return None
        return self.anchor_wall + (sim - self.anchor_sim).total_seconds() / self.speed

    def reconfigured(self, mode: str, speed: float, wall: float) -> Clock:
        """The same simulated time, continuing under a new mode or speed (used when ``serve`` flags change)."""
        self._check(mode, speed)
        if mode == self.mode and float(speed) == self.speed:
            return self
        return Clock(mode, float(speed), wall, self.now(wall))

    def moved_to(self, sim: datetime, wall: float) -> Clock:
        """Manual clocks only: jump to ``sim``. Time never goes backwards."""
        if self.mode != MANUAL:
            raise Conflict("the clock is real; only a manual clock (serve --clock manual) can be moved by hand")
        if sim < self.anchor_sim:
            raise Conflict(f"time cannot go backwards: now is {self.anchor_sim.isoformat()}, asked {sim.isoformat()}")
        return replace(self, anchor_wall=wall, anchor_sim=sim)
