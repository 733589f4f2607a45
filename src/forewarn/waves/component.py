"""Waves: maintenance rolled across a fleet the way a region rolls a host update.

A wave cuts its targets into *units*, each a set of VMs the platform takes at once: one update domain, one fault
domain, or one host. Units go in order, at most ``concurrency`` at a time. As soon as every event of a unit is
Completed (or Canceled), the next unit's events are Scheduled, at that very instant: domains take their turns, and a
new Scheduled follows at once when another domain completes (how long Azure waits between domains is not
documented: at once is our choice, the hardest case).

A unit's VMs are chosen when the unit is scheduled, not when the wave is created: a VM deleted or redeployed in the
meantime is taken where it is then. A unit with nothing left to do is skipped, and said so.

Cost: a wave keeps a count of the open events of each unit in flight, so an event that ends costs O(1) and a unit
costs what its own VMs cost; nothing scans the fleet while time moves (bench/wave.py: a 100,000-VM wave).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from forewarn.azure.model import Event, EventSource, EventStatus, EventType, ScheduleRequest
from forewarn.core.bounds import check_whole_number
from forewarn.core.changes import Change
from forewarn.core.errors import Conflict, Invalid, NotFound

if TYPE_CHECKING:
    from forewarn.engine.engine import Change, Engine

MAX_CONCURRENCY = 10_000


class WaveOrder(str, enum.Enum):
    UPDATE_DOMAIN = "update-domain"
    FAULT_DOMAIN = "fault-domain"
    HOST = "host"


class WaveStatus(str, enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELED = "canceled"


@dataclass(frozen=True)
class WaveSpec:
    """What to roll out, over what, in which order. Empty ``groups`` means the whole fleet (every Azure VM)."""

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


@dataclass(frozen=True)
class UnitRun:
    """A unit in flight: the operations its events belong to."""

    unit: int
    operations: tuple[str, ...]


@dataclass(frozen=True)
class Wave:
    wave_id: str
    spec: WaveSpec
    owners: tuple[str, ...]  # the resolved groups (policy owners); empty: the whole fleet
    units: tuple[str, ...]  # "3" (a domain number) or a host name, in the order they go
    created_at: datetime
    status: WaveStatus = WaveStatus.RUNNING
    next_unit: int = 0
    in_flight: tuple[UnitRun, ...] = ()
    done: int = 0
    skipped: tuple[int, ...] = ()
    finished_at: datetime | None = None

    def label(self, unit: int) -> str:
        value = self.units[unit]
        if self.spec.order is WaveOrder.HOST:
            return f"host {value}"
        return f"{self.spec.order.value.replace('-', ' ')} {value}"


@dataclass(frozen=True)
class WaveChanged(Change):
    """``what``: started, unit-scheduled, unit-completed, unit-skipped, completed, canceled."""

    wave: Wave
    what: str
    reason: str


class WaveCommands:
    """Methods of :class:`Engine` for waves. State: ``waves`` and, for the units in flight, how many of their events
    are still open and which unit each operation belongs to."""

    def _init_waves(self: Engine, waves: Iterable[Wave]) -> None:
        self.waves: dict[str, Wave] = {}
        self._wave_of_operation: dict[str, tuple[str, int]] = {}
        self._open_in_unit: dict[tuple[str, int], int] = {}
        for wave in waves:
            self.waves[wave.wave_id] = wave
            for run in wave.in_flight:
                self._track_unit(wave.wave_id, run)

    def _track_unit(self: Engine, wave_id: str, run: UnitRun) -> None:
        open_events = 0
        for operation_id in run.operations:
            self._wave_of_operation[operation_id] = (wave_id, run.unit)
            open_events += sum(1 for event in self.operation_events(operation_id) if event.status.live)
        self._open_in_unit[(wave_id, run.unit)] = open_events

    # ------------------------------------------------------------------------------------------------ queries
    def wave(self: Engine, wave_id: str) -> Wave:
        found = self.waves.get(wave_id)
        if found is None:
            raise NotFound(f"no wave {wave_id!r}", name=wave_id, known=self.waves.keys())
        return found

    # ----------------------------------------------------------------------------------------------- commands
    def start_wave(self: Engine, spec: WaveSpec) -> list[Change]:
        """Create a wave and schedule its first units (up to the concurrency limit)."""
        check_whole_number(spec.concurrency, "concurrency", 1, MAX_CONCURRENCY)
        if spec.event_type in (EventType.PREEMPT, EventType.TERMINATE):
            raise Invalid(
                f"a wave rolls platform maintenance; {spec.event_type.value} is not one (Freeze, Reboot or Redeploy)"
            )
        owners = tuple(dict.fromkeys(self.fleet.owner(name) for name in spec.groups))
        units = self._wave_units(spec.order, owners)
        if not units:
            raise Invalid("the wave has nothing to do: no running VM in its targets")
        # Checked like any schedule request, before anything changes.
        self._checked(self._unit_request(spec, (), "check"))
        wave_id = f"wave-{self.next_seq}"
        self.next_seq += 1
        wave = Wave(wave_id, spec, owners, units, self.now)
        self.waves[wave_id] = wave
        target = ", ".join(spec.groups) or "the whole fleet"
        changes: list[Change] = [
            WaveChanged(
                wave,
                "started",
                f"{spec.event_type.value} over {target} in {len(units)} units by {spec.order.value}, "
                f"{spec.concurrency} at a time",
            )
        ]
        touched: set[str] = set()
        changes += self._wave_fill(wave_id, touched)
        return changes + self._bump(touched)

    def cancel_wave(self: Engine, wave_id: str, reason: str = "wave canceled by the operator") -> list[Change]:
        """Stop a wave: no further unit is scheduled, and the Scheduled events of the units in flight are canceled.
        Started events finish their impact window (a Started event cannot be canceled)."""
        wave = self.wave(wave_id)
        if wave.status is not WaveStatus.RUNNING:
            raise Conflict(f"{wave_id} is {wave.status.value}")
        changes: list[Change] = []
        touched: set[str] = set()
        wave = replace(wave, status=WaveStatus.CANCELED, finished_at=self.now)
        self.waves[wave_id] = wave
        changes.append(WaveChanged(wave, "canceled", reason))
        for run in wave.in_flight:
            for operation_id in run.operations:
                for event in self.operation_events(operation_id):
                    if event.status is EventStatus.SCHEDULED:
                        changes += self._cancel_one(event, f"{reason} ({wave_id})", touched)
        return changes + self._bump(touched)

    # ------------------------------------------------------------------------------------------------ progress
    def _wave_event_ended(self: Engine, event: Event, touched: set[str]) -> list[Change]:
        """Called when an event becomes Completed or Canceled: the end of its unit, if it was the last open one."""
        unit_key = self._wave_of_operation.get(event.operation_id)
        if unit_key is None:
            return []
        self._open_in_unit[unit_key] -= 1
        if self._open_in_unit[unit_key] > 0:
            return []
        return self._unit_done(*unit_key, touched)

    def _unit_done(self: Engine, wave_id: str, unit: int, touched: set[str]) -> list[Change]:
        del self._open_in_unit[(wave_id, unit)]
        wave = self.waves[wave_id]
        run = next(run for run in wave.in_flight if run.unit == unit)
        for operation_id in run.operations:
            self._wave_of_operation.pop(operation_id, None)
        wave = replace(
            wave,
            in_flight=tuple(r for r in wave.in_flight if r.unit != unit),
            done=wave.done + 1,
        )
        self.waves[wave_id] = wave
        changes: list[Change] = [WaveChanged(wave, "unit-completed", f"{wave.label(unit)} completed")]
        if wave.status is WaveStatus.RUNNING:
            changes += self._wave_fill(wave_id, touched)
        return changes

    def _wave_fill(self: Engine, wave_id: str, touched: set[str]) -> list[Change]:
        """Schedule units until the concurrency limit is reached or none is left; finish the wave when all are."""
        changes: list[Change] = []
        wave = self.waves[wave_id]
        while len(wave.in_flight) < wave.spec.concurrency and wave.next_unit < len(wave.units):
            unit = wave.next_unit
            wave = replace(wave, next_unit=unit + 1)
            vms = self._unit_vms(wave, unit)
            if not vms:
                wave = replace(wave, skipped=wave.skipped + (unit,))
                self.waves[wave_id] = wave
                changes.append(WaveChanged(wave, "unit-skipped", f"{wave.label(unit)}: no running VM"))
                continue
            request = self._unit_request(wave.spec, vms, f"{wave_id}, {wave.label(unit)}")
            first_seq = self.next_seq
            created = self._create(request, touched)
            operations = tuple(
                dict.fromkeys(
                    self.event_by_seq(seq).operation_id
                    for seq in range(first_seq, self.next_seq)
                    if self.event_by_seq(seq) is not None
                )
            )
            run = UnitRun(unit, operations)
            wave = replace(wave, in_flight=wave.in_flight + (run,))
            self.waves[wave_id] = wave
            self._track_unit(wave_id, run)
            changes.append(
                WaveChanged(wave, "unit-scheduled", f"{wave.label(unit)}: {len(vms)} VMs, {len(operations)} operations")
            )
            changes += created
            if self._open_in_unit[(wave_id, unit)] == 0:  # e.g. nothing to wait for
                changes += self._unit_done(wave_id, unit, touched)
                return changes
        if not wave.in_flight and wave.next_unit >= len(wave.units) and wave.status is WaveStatus.RUNNING:
            wave = replace(wave, status=WaveStatus.COMPLETED, finished_at=self.now)
            self.waves[wave_id] = wave
            changes.append(WaveChanged(wave, "completed", f"{wave.done} units completed, {len(wave.skipped)} skipped"))
        return changes

    # ------------------------------------------------------------------------------------------------ targets
    def _wave_units(self: Engine, order: WaveOrder, owners: tuple[str, ...]) -> tuple[str, ...]:
        if order is WaveOrder.HOST:
            hosts = {self.vm_states[vm.name].host: None for vm in self._wave_targets(owners)}
            ordered = [host for host in self._host_members if host in hosts]
            return tuple(ordered)
        attribute = "update_domain" if order is WaveOrder.UPDATE_DOMAIN else "fault_domain"
        return tuple(str(d) for d in sorted({getattr(vm, attribute) for vm in self._wave_targets(owners)}))

    def _wave_targets(self: Engine, owners: tuple[str, ...]):
        """The running VMs a wave covers."""
        if owners:
            vms = (vm for owner in owners for vm in self.fleet.vms_by_owner[owner])
        else:
            vms = iter(self.fleet.vms.values())
        return [vm for vm in vms if not self.vm_states[vm.name].deleted]

    def _unit_vms(self: Engine, wave: Wave, unit: int) -> tuple[str, ...]:
        value = wave.units[unit]
        if wave.spec.order is WaveOrder.HOST:
            names = self.names_on_host(value)
            if wave.owners:
                owners = set(wave.owners)
                return tuple(name for name in names if self.fleet.vms[name].policy_owner in owners)
            return tuple(names)
        attribute = "update_domain" if wave.spec.order is WaveOrder.UPDATE_DOMAIN else "fault_domain"
        domain = int(value)
        return tuple(vm.name for vm in self._wave_targets(wave.owners) if getattr(vm, attribute) == domain)

    def _unit_request(self: Engine, spec: WaveSpec, vms: tuple[str, ...], reason: str) -> ScheduleRequest:
        return ScheduleRequest(
            spec.event_type,
            vms=vms,
            source=spec.source,
            notice=spec.notice,
            duration_seconds=spec.duration_seconds,
            impact_window=spec.impact_window,
            description=spec.description,
            reason=reason,
        )
