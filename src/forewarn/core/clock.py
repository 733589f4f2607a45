"""The one clock that drives all simulated time.

The clock is pure: it is told the wall time and answers the simulated time. ``manual`` time moves only when told;
``real`` time follows the wall clock, optionally sped up (``speed=60``: a wall second is a simulated minute). The
setting is persisted, so simulated time keeps running across restarts and never goes backwards.

Simulated time stays inside [EARLIEST_TIME, LATEST_TIME] (``bounds.py``): moves beyond it are refused, and a real
clock that runs past the end stops there rather than overflow.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from forewarn.core.bounds import (
    EARLIEST_TIME,
    LATEST_TIME,
    MAX_CLOCK_SPEED,
    MAX_CLOCK_STEP,
    MIN_CLOCK_SPEED,
    check_duration,
    check_time,
    clamped_time,
    iso_time,
)
from forewarn.core.errors import Conflict, Invalid

MANUAL = "manual"
REAL = "real"
MODES = (MANUAL, REAL)


def utc_from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


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
        check_time(sim_start, "the start time")
        return cls(mode, float(speed), wall, sim_start)

    @staticmethod
    def _check(mode: str, speed: float) -> None:
        if mode not in MODES:
            raise Invalid(f"unknown clock mode {mode!r}; expected one of {', '.join(MODES)}")
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not speed > 0:
            raise Invalid(f"clock speed must be a positive number, got {speed!r}")
        if not MIN_CLOCK_SPEED <= speed <= MAX_CLOCK_SPEED:
            raise Invalid(f"clock speed must be from {MIN_CLOCK_SPEED:g} to {MAX_CLOCK_SPEED:g}, got {speed:g}")

    def now(self, wall: float) -> datetime:
        if self.mode == MANUAL:
            return self.anchor_sim
        elapsed = (wall - self.anchor_wall) * self.speed
        # Past the end of the simulated range a real clock stands still (at its top speed that is centuries of wall
        # time away); clamping the seconds first keeps timedelta itself from overflowing.
        ahead = (LATEST_TIME - self.anchor_sim).total_seconds()
        behind = (EARLIEST_TIME - self.anchor_sim).total_seconds()
        return clamped_time(self.anchor_sim + timedelta(seconds=min(max(elapsed, behind), ahead)))

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

    def within_bounds(self) -> tuple[Clock, str | None]:
        """This clock, or (for a database written before the bounds) one moved inside the simulated range, with a
        sentence saying so."""
        inside = clamped_time(self.anchor_sim)
        speed = min(max(self.speed, MIN_CLOCK_SPEED), MAX_CLOCK_SPEED) if self.speed > 0 else 1.0
        if inside == self.anchor_sim and speed == self.speed:
            return self, None
        return replace(self, anchor_sim=inside, speed=speed), (
            f"the stored clock ({self.anchor_sim.isoformat()}, speed {self.speed:g}) is outside forewarn's bounds; "
            f"continuing from {iso_time(inside)} at speed {speed:g}"
        )

    def advanced_by(self, delta: timedelta, wall: float) -> Clock:
        """Manual clocks only: move forward by ``delta`` (at most MAX_CLOCK_STEP)."""
        if isinstance(delta, timedelta) and delta < timedelta(0):
            raise Conflict("time cannot go backwards; advance by a positive duration")
        check_duration(delta, "a clock advance", MAX_CLOCK_STEP)
        return self.moved_to(self.anchor_sim + delta, wall)

    def moved_to(self, sim: datetime, wall: float) -> Clock:
        """Manual clocks only: jump to ``sim``, inside the simulated range. Time never goes backwards."""
        if self.mode != MANUAL:
            raise Conflict("the clock is real; only a manual clock (serve --clock manual) can be moved by hand")
        check_time(sim, "the new time")
        if sim < self.anchor_sim:
            raise Conflict(f"time cannot go backwards: now is {self.anchor_sim.isoformat()}, asked {sim.isoformat()}")
        return replace(self, anchor_wall=wall, anchor_sim=sim)
