"""What a wave is: its spec (what to roll out, over what, in which order), its progress, and the change it makes.
The rolling itself is ``waves/component.py``; what it asks of the cloud it rolls over is ``waves/units.py``.

A wave rolls over one cloud's machines, the cloud its ``cloud`` names. The spec carries the fields a wave request
can give (the control API's, ``control/waves.py``): the ones every wave reads (order, concurrency, groups, notice,
name) and those that only some cloud reads, kept as the request gave them (an event type, a window); the cloud's
wave units check them, refusing another cloud's, and read them when they schedule.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, overload

from forewarn.core.changes import Change
from forewarn.core.words import counted

MAX_CONCURRENCY = 10_000


class WaveCloud(str, enum.Enum):
    """The names a wave request gives the built-in clouds that have waves (each cloud's wave units answer to one:
    ``WaveUnits.cloud``). A cloud of one's own answers to a name of its own, a plain string."""

    AZURE = "azure"
    GCE = "gce"


class WaveOrder(str, enum.Enum):
    """What one unit of a wave is; each cloud's waves go by some of them (``WaveUnits.orders``)."""

    UPDATE_DOMAIN = "update-domain"
    FAULT_DOMAIN = "fault-domain"
    HOST = "host"
    ZONE = "zone"


def plain(value: Any) -> Any:
    """An enum's value, anything else as it is: what a spec's field is on the wire and in the store."""
    return value.value if isinstance(value, enum.Enum) else value


class WaveStatus(str, enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELED = "canceled"


@dataclass(frozen=True)
class WaveSpec:
    """What to roll out, over what, in which order. Empty ``groups`` means the cloud's whole fleet. ``cloud``: the
    name of the cloud's wave units (empty: the first registered cloud that has waves).

    Read by one cloud only, None where the request gave none (the cloud's wave units fill in their defaults when the
    wave starts): ``event_type``, ``source``, ``duration_seconds``, ``impact_window`` and ``description`` are
    Azure's; ``window``, ``can_reschedule``, ``latest`` and ``maintenance_type`` are Compute Engine's (what each
    instance's maintenance shows, as ``forewarn gce maintain`` gives it). The enumerated ones hold the cloud's enum,
    or its value (a string) as a stored plan gives it back."""

    event_type: Any = None
    order: WaveOrder | None = None  # None: the cloud's default
    concurrency: int = 1
    groups: tuple[str, ...] = ()  # scale sets, availability sets or standalone VMs, zones or instances, by name
    source: Any = None
    notice: timedelta | None = None  # None: the cloud's notice rule
    duration_seconds: int | None = None
    impact_window: timedelta | None = None
    description: str | None = None
    name: str = ""
    cloud: str = ""
    window: timedelta | None = None
    can_reschedule: bool = True
    latest: timedelta | None = None
    maintenance_type: Any = None


@dataclass(frozen=True)
class WaveRequest:
    """A wave as a request gives it, before its cloud reads its own fields: durations parsed, the rest as sent."""

    cloud: str
    type: str | None
    by: str | None
    concurrency: int
    groups: tuple[str, ...]
    source: str | None
    notice: timedelta | None
    duration_seconds: int | None
    impact_window: timedelta | None
    description: str | None
    window: timedelta | None
    can_reschedule: bool
    latest: timedelta | None
    name: str


@dataclass(frozen=True)
class UnitRun:
    """A unit in flight: what its cloud's events are grouped by (Azure: operations; Compute Engine: maintenance
    events, one per instance), as its wave units returned them (``ScheduledUnit.operations``)."""

    unit: int
    operations: tuple[str, ...]


class InFlight(Sequence[UnitRun]):
    """A wave's units in flight, in the order they went: an immutable sequence (equal to the tuple of the same
    units) whose next version, one unit more or one fewer, costs O(1) rather than a copy of them all.

    Every unit that starts or ends makes a new ``Wave``, held by its ``WaveChanged`` until the command is committed
    and answered: with a copy of thousands of units in flight each (5% of a million VMs' hosts), one clock step held
    some 400 MB of copies. Versions share one list that only the newest appends to; units leave from the front in
    the common case (they end mostly in the order they went) and are otherwise marked gone. A version that would
    append to a list another version has extended, or whose list is mostly units that left, copies what it holds
    into a list of its own (amortized O(1) per change)."""

    __slots__ = ("_runs", "_start", "_stop", "_gone", "_length")

    def __init__(self, runs: Iterable[UnitRun] = ()) -> None:
        self._runs: list[UnitRun] = list(runs)
        self._start = 0
        self._stop = len(self._runs)
        self._gone: frozenset[int] = frozenset()  # positions in ``_runs`` between start and stop that left
        self._length = self._stop

    @classmethod
    def of(cls, runs: Sequence[UnitRun]) -> InFlight:
        return runs if isinstance(runs, InFlight) else cls(runs)

    def _version(self, runs: list[UnitRun], start: int, stop: int, gone: frozenset[int]) -> InFlight:
        made = object.__new__(InFlight)
        made._runs, made._start, made._stop, made._gone = runs, start, stop, gone
        made._length = stop - start - len(gone)
        return made

    def _positions(self) -> Iterator[int]:
        gone = self._gone
        return (at for at in range(self._start, self._stop) if at not in gone)

    def with_run(self, run: UnitRun) -> InFlight:
        """These units and ``run`` after them."""
        if self._stop != len(self._runs) or self._start > self._length:
            return InFlight([*self, run])
        self._runs.append(run)
        return self._version(self._runs, self._start, self._stop + 1, self._gone)

    def without(self, unit: int) -> tuple[InFlight, UnitRun]:
        """These units but ``unit`` (KeyError: not in flight), and its run."""
        at = next((at for at in self._positions() if self._runs[at].unit == unit), None)
        if at is None:
            raise KeyError(unit)
        run = self._runs[at]
        if at == self._start:
            start, gone = at + 1, self._gone
            while start in gone:
                start += 1
            gone = frozenset(position for position in gone if position >= start) if gone else gone
        else:
            start, gone = self._start, self._gone | {at}
        if len(gone) > self._length // 2:
            return InFlight(self._runs[position] for position in self._positions() if position != at), run
        return self._version(self._runs, start, self._stop, gone), run

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[UnitRun]:
        runs = self._runs
        if not self._gone:
            return iter(runs[self._start : self._stop])
        return (runs[at] for at in self._positions())

    @overload
    def __getitem__(self, index: int) -> UnitRun: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[UnitRun, ...]: ...

    def __getitem__(self, index: int | slice) -> UnitRun | tuple[UnitRun, ...]:
        return tuple(self)[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, InFlight | tuple):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


@dataclass(frozen=True)
class Wave:
    wave_id: str
    spec: WaveSpec
    # The resolved groups, as the cloud's wave units gave them (Azure policy owners, Compute Engine "zones/ZONE" and
    # "instances/NAME"); empty: the cloud's whole fleet.
    owners: tuple[str, ...]
    units: tuple[str, ...]  # "3" (a domain number), a host name or a zone, in the order they go
    created_at: datetime
    status: WaveStatus = WaveStatus.RUNNING
    next_unit: int = 0
    in_flight: Sequence[UnitRun] = ()  # a tuple, or the runner's InFlight (equal to the tuple)
    done: int = 0
    skipped: tuple[int, ...] = ()
    finished_at: datetime | None = None

    def label(self, unit: int) -> str:
        """``update domain 3``, ``host node-7``, ``zone us-central1-a``."""
        return f"{plain(self.spec.order).replace('-', ' ')} {self.units[unit]}"


@dataclass(frozen=True)
class WaveChanged(Change):
    """``what``: started, unit-scheduled, unit-completed, unit-skipped, completed, canceled. ``run``: the unit that
    went in flight (unit-scheduled) or left it (unit-completed), so that the store writes that unit alone rather
    than every unit in flight (thousands, at a million VMs) at each commit."""

    wave: Wave
    what: str
    reason: str
    run: UnitRun | None = None

    def subject(self) -> str:
        return self.wave.wave_id

    def describe(self) -> str:
        wave = self.wave
        done = wave.done + len(wave.skipped)
        return (
            f"{wave.wave_id} {self.what}: {self.reason} "
            f"({done} of {counted(len(wave.units), 'unit')} done, {len(wave.in_flight)} in flight)"
        )
