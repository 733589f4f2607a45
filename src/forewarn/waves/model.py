"""What a wave is: its spec (what to roll out, over what, in which order), its progress, and the change it makes.
The rolling itself is ``waves/component.py``; what it asks of the cloud it rolls over is ``waves/units.py``.

A wave rolls over one cloud's machines, the cloud its ``cloud`` names. The spec carries the fields a wave request
can give (the control API's, ``control/waves.py``): the ones every wave reads (order, concurrency, groups, notice,
name) and those that only some cloud reads, kept as the request gave them (an event type, a window); the cloud's
wave units check them, refusing another cloud's, and read them when they schedule.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from forewarn.core.changes import Change

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


class Orders(Mapping[str, tuple[WaveOrder, ...]]):
    """Each registered cloud's wave orders by its name in a wave request, the default first (read from the clouds'
    wave units when first asked)."""

    def __getitem__(self, cloud: str) -> tuple[WaveOrder, ...]:
        from forewarn.waves.units import wave_units

        return wave_units()[cloud].orders

    def __iter__(self) -> Iterator[str]:
        from forewarn.waves.units import wave_units

        return iter(wave_units())

    def __len__(self) -> int:
        from forewarn.waves.units import wave_units

        return len(wave_units())


ORDERS = Orders()


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
    in_flight: tuple[UnitRun, ...] = ()
    done: int = 0
    skipped: tuple[int, ...] = ()
    finished_at: datetime | None = None

    def label(self, unit: int) -> str:
        """``update domain 3``, ``host node-7``, ``zone us-central1-a``."""
        return f"{plain(self.spec.order).replace('-', ' ')} {self.units[unit]}"


@dataclass(frozen=True)
class WaveChanged(Change):
    """``what``: started, unit-scheduled, unit-completed, unit-skipped, completed, canceled."""

    wave: Wave
    what: str
    reason: str

    def subject(self) -> str:
        return self.wave.wave_id

    def describe(self) -> str:
        wave = self.wave
        done = wave.done + len(wave.skipped)
        return (
            f"{wave.wave_id} {self.what}: {self.reason} "
            f"({done} of {len(wave.units)} units done, {len(wave.in_flight)} in flight)"
        )
