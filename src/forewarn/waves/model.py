"""What a wave is: its spec (what to roll out, over what, in which order), its progress, and the change it makes.
The rolling itself is ``waves/component.py``. A wave rolls over one cloud's machines: Azure VMs (Scheduled Events)
or Compute Engine instances (host maintenance)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from forewarn.azure.model import EventSource, EventType
from forewarn.core.changes import Change
from forewarn.gcp.model import MaintenanceType

MAX_CONCURRENCY = 10_000


class WaveCloud(str, enum.Enum):
    AZURE = "azure"
    GCE = "gce"


class WaveOrder(str, enum.Enum):
    UPDATE_DOMAIN = "update-domain"
    FAULT_DOMAIN = "fault-domain"
    HOST = "host"
    ZONE = "zone"  # Compute Engine


# The units each cloud's waves take, the default first: Azure rolls updates by domain; Compute Engine maintains
# hosts, zone by zone in a region (zones are its failure domains).
ORDERS = {
    WaveCloud.AZURE: (WaveOrder.UPDATE_DOMAIN, WaveOrder.FAULT_DOMAIN, WaveOrder.HOST),
    WaveCloud.GCE: (WaveOrder.ZONE, WaveOrder.HOST),
}


class WaveStatus(str, enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELED = "canceled"


@dataclass(frozen=True)
class WaveSpec:
    """What to roll out, over what, in which order. Empty ``groups`` means the whole fleet (every Azure VM, or
    every Compute Engine instance). ``event_type``, ``source``, ``duration_seconds``, ``impact_window`` and
    ``description`` are Azure's; ``window``, ``can_reschedule``, ``latest`` and ``maintenance_type`` are Compute
    Engine's (what each instance's maintenance shows, as ``forewarn gce maintain`` gives it); ``notice`` is both."""

    event_type: EventType = EventType.FREEZE
    order: WaveOrder = WaveOrder.UPDATE_DOMAIN
    concurrency: int = 1
    groups: tuple[str, ...] = ()  # scale sets, availability sets or standalone VMs, by name or owner key
    source: EventSource = EventSource.PLATFORM
    notice: timedelta | None = None  # None: the type's notice rule
    duration_seconds: int | None = None
    impact_window: timedelta | None = None
    description: str | None = None
    name: str = ""
    cloud: WaveCloud = WaveCloud.AZURE
    window: timedelta | None = None
    can_reschedule: bool = True
    latest: timedelta | None = None
    maintenance_type: MaintenanceType = MaintenanceType.SCHEDULED


@dataclass(frozen=True)
class UnitRun:
    """A unit in flight: the operations its events belong to (an Azure wave), or its maintenance events (a Compute
    Engine wave: one per instance)."""

    unit: int
    operations: tuple[str, ...]


@dataclass(frozen=True)
class Wave:
    wave_id: str
    spec: WaveSpec
    # The resolved groups: Azure policy owners, or Compute Engine "zones/ZONE" and "instances/NAME"; empty: the whole
    # fleet.
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
        value = self.units[unit]
        if self.spec.order in (WaveOrder.HOST, WaveOrder.ZONE):
            return f"{self.spec.order.value} {value}"
        return f"{self.spec.order.value.replace('-', ' ')} {value}"


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
