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

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from forewarn.azure.component import AzureComponent, DocumentStep
from forewarn.azure.model import Event, EventStatus, EventType, ScheduleRequest
from forewarn.azure.vms import VM
from forewarn.core.bounds import check_whole_number
from forewarn.core.changes import REPLICATED, Change, Rebuilt
from forewarn.core.errors import Conflict, Invalid, NotFound
from forewarn.core.scheduler import Scheduler, Sequence
from forewarn.waves.model import MAX_CONCURRENCY, UnitRun, Wave, WaveChanged, WaveOrder, WaveSpec, WaveStatus

# The names the rest of the code imports from here.
__all__ = [
    "MAX_CONCURRENCY",
    "StoredWaves",
    "UnitRun",
    "Wave",
    "WaveChanged",
    "WaveOrder",
    "WaveRows",
    "WaveRunner",
    "WaveSpec",
    "WaveStatus",
]


@dataclass(frozen=True)
class StoredWaves:
    waves: Iterable[Wave] = field(default_factory=tuple)


@dataclass(frozen=True)
class WaveRows:
    """Waves some commits touched, as they are now (None: gone): what a replica applies (WaveRunner.replicate)."""

    waves: dict[str, Wave | None] = field(default_factory=dict)


class WaveRunner:
    """The waves component. State: ``waves`` and, for the units in flight, how many of their events are still open
    and which unit each operation belongs to. It creates and cancels events through the Azure component, and hears
    of each event's end from it (:meth:`event_ended`, which the engine subscribes)."""

    def __init__(self, azure: AzureComponent, scheduler: Scheduler, sequence: Sequence, stored: StoredWaves) -> None:
        self.azure = azure
        self.fleet = azure.fleet
        self._scheduler = scheduler
        self._sequence = sequence
        self.waves: dict[str, Wave] = {}
        self._wave_of_operation: dict[str, tuple[str, int]] = {}
        self._open_in_unit: dict[tuple[str, int], int] = {}
        for wave in stored.waves:
            self.waves[wave.wave_id] = wave
            for run in wave.in_flight:
                self._track_unit(wave.wave_id, run)

    @property
    def now(self) -> datetime:
        return self._scheduler.now

    def _track_unit(self, wave_id: str, run: UnitRun) -> None:
        open_events = 0
        for operation_id in run.operations:
            self._wave_of_operation[operation_id] = (wave_id, run.unit)
            open_events += sum(1 for event in self.azure.operation_events(operation_id) if event.status.live)
        self._open_in_unit[(wave_id, run.unit)] = open_events

    # ------------------------------------------------------------------------------------------------ queries
    def wave(self, wave_id: str) -> Wave:
        found = self.waves.get(wave_id)
        if found is None:
            raise NotFound(f"no wave {wave_id!r}", name=wave_id, known=self.waves.keys())
        return found

    # ----------------------------------------------------------------------------------------------- commands
    def start_wave(self, spec: WaveSpec) -> list[Change]:
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
        self.azure.check_request(self._unit_request(spec, (), "check"))
        wave_id = f"wave-{self._sequence.take()}"
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
        step = DocumentStep()
        changes += self._wave_fill(wave_id, step)
        return changes + self.azure.end_step(step)

    def cancel_wave(self, wave_id: str, reason: str = "wave canceled by the operator") -> list[Change]:
        """Stop a wave: no further unit is scheduled, and the Scheduled events of the units in flight are canceled.
        Started events finish their impact window (a Started event cannot be canceled)."""
        wave = self.wave(wave_id)
        if wave.status is not WaveStatus.RUNNING:
            raise Conflict(f"{wave_id} is {wave.status.value}")
        changes: list[Change] = []
        step = DocumentStep()
        wave = replace(wave, status=WaveStatus.CANCELED, finished_at=self.now)
        self.waves[wave_id] = wave
        changes.append(WaveChanged(wave, "canceled", reason))
        for run in wave.in_flight:
            for operation_id in run.operations:
                for event in self.azure.operation_events(operation_id):
                    if event.status is EventStatus.SCHEDULED:
                        changes += self.azure.cancel_scheduled(event, f"{reason} ({wave_id})", step)
        return changes + self.azure.end_step(step)

    # ------------------------------------------------------------------------------------------------ progress
    def event_ended(self, event: Event, step: DocumentStep) -> list[Change]:
        """An event became Completed or Canceled: the end of its unit, if it was the last open one."""
        unit_key = self._wave_of_operation.get(event.operation_id)
        if unit_key is None:
            return []
        self._open_in_unit[unit_key] -= 1
        if self._open_in_unit[unit_key] > 0:
            return []
        return self._unit_done(*unit_key, step)

    def _unit_done(self, wave_id: str, unit: int, step: DocumentStep) -> list[Change]:
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
            changes += self._wave_fill(wave_id, step)
        return changes

    def _wave_fill(self, wave_id: str, step: DocumentStep) -> list[Change]:
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
            first_seq = self._sequence.next_number
            created = self.azure.create_events(request, step)
            events = (self.azure.event_by_seq(seq) for seq in range(first_seq, self._sequence.next_number))
            operations = tuple(dict.fromkeys(event.operation_id for event in events if event is not None))
            run = UnitRun(unit, operations)
            wave = replace(wave, in_flight=wave.in_flight + (run,))
            self.waves[wave_id] = wave
            self._track_unit(wave_id, run)
            changes.append(
                WaveChanged(wave, "unit-scheduled", f"{wave.label(unit)}: {len(vms)} VMs, {len(operations)} operations")
            )
            changes += created
            if self._open_in_unit[(wave_id, unit)] == 0:  # e.g. nothing to wait for
                changes += self._unit_done(wave_id, unit, step)
                return changes
        if not wave.in_flight and wave.next_unit >= len(wave.units) and wave.status is WaveStatus.RUNNING:
            wave = replace(wave, status=WaveStatus.COMPLETED, finished_at=self.now)
            self.waves[wave_id] = wave
            changes.append(WaveChanged(wave, "completed", f"{wave.done} units completed, {len(wave.skipped)} skipped"))
        return changes

    # -------------------------------------------------------------------------------------------- replication
    def replicate(self, rows: WaveRows | None) -> list[Change]:
        """A replica takes waves the leader committed, and counts the open events of the units in flight again
        (after the Azure component took its rows: the counts come from its events)."""
        changes: list[Change] = []
        removed = False
        for wave_id, wave in (rows.waves if rows is not None else {}).items():
            if wave is None:
                removed |= self.waves.pop(wave_id, None) is not None
            else:
                self.waves[wave_id] = wave
                changes.append(WaveChanged(wave, REPLICATED, "committed by the leader"))
        self._wave_of_operation.clear()
        self._open_in_unit.clear()
        for wave in self.waves.values():
            for run in wave.in_flight:
                self._track_unit(wave.wave_id, run)
        if removed:
            changes.append(Rebuilt("waves a replica projected were not committed"))
        return changes

    # ------------------------------------------------------------------------------------------------ targets
    def _wave_units(self, order: WaveOrder, owners: tuple[str, ...]) -> tuple[str, ...]:
        if order is WaveOrder.HOST:
            hosts = {self.azure.vm_states[vm.name].host: None for vm in self._wave_targets(owners)}
            ordered = [host for host in self.azure.host_names() if host in hosts]
            return tuple(ordered)
        attribute = "update_domain" if order is WaveOrder.UPDATE_DOMAIN else "fault_domain"
        return tuple(str(d) for d in sorted({getattr(vm, attribute) for vm in self._wave_targets(owners)}))

    def _wave_targets(self, owners: tuple[str, ...]) -> list[VM]:
        """The running VMs a wave covers."""
        vms: Iterable[VM]
        if owners:
            vms = (vm for owner in owners for vm in self.fleet.vms_by_owner[owner])
        else:
            vms = iter(self.fleet.vms.values())
        return [vm for vm in vms if not self.azure.vm_states[vm.name].deleted]

    def _unit_vms(self, wave: Wave, unit: int) -> tuple[str, ...]:
        value = wave.units[unit]
        if wave.spec.order is WaveOrder.HOST:
            names = self.azure.names_on_host(value)
            if wave.owners:
                owners = set(wave.owners)
                return tuple(name for name in names if self.fleet.vms[name].policy_owner in owners)
            return tuple(names)
        attribute = "update_domain" if wave.spec.order is WaveOrder.UPDATE_DOMAIN else "fault_domain"
        domain = int(value)
        return tuple(vm.name for vm in self._wave_targets(wave.owners) if getattr(vm, attribute) == domain)

    @staticmethod
    def _unit_request(spec: WaveSpec, vms: tuple[str, ...], reason: str) -> ScheduleRequest:
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
