"""Waves: maintenance rolled across a fleet the way a region rolls a host update.

A wave cuts its targets into *units*, each a set of VMs the platform takes at once: one update domain, one fault
domain, or one host. Units go in order, at most ``concurrency`` at a time. As soon as every event of a unit is
Completed (or Canceled), the next unit's events are Scheduled, at that very instant: domains take their turns, and a
new Scheduled follows at once when another domain completes (how long Azure waits between domains is not
documented: at once is our choice, the hardest case).

A Compute Engine wave does the same over instances, by zone or by host: each unit's instances get host maintenance
from the Compute Engine component (announced as upcoming maintenance if the notice is long enough, then the
``maintenance-event`` notice, then a live migration or a termination, per each instance's onHostMaintenance), and
the next unit goes when every instance's maintenance is completed or canceled. A live migration moves an instance to
another host, maybe one of a later unit: an instance is maintained at most once per wave.

A unit's VMs are chosen when the unit is scheduled, not when the wave is created: a VM deleted or redeployed in the
meantime is taken where it is then. A unit with nothing left to do is skipped, and said so.

Cost: a wave keeps a count of the open events of each unit in flight, so an event that ends costs O(1) and a unit
costs what its own VMs cost; nothing scans the fleet while time moves (bench/wave.py: a 100,000-VM wave).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from forewarn.azure.component import AzureComponent, DocumentStep
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import Event, EventSource, EventStatus, EventType, ScheduleRequest
from forewarn.azure.vms import VM
from forewarn.core.bounds import check_whole_number
from forewarn.core.changes import REPLICATED, Change, Rebuilt
from forewarn.core.errors import Conflict, CoreError, Invalid, NotFound
from forewarn.core.scheduler import Scheduler, Sequence
from forewarn.gcp.changes import GceEventChanged
from forewarn.gcp.component import GceRequest, GcpComponent
from forewarn.gcp.fleet import gce_fleet
from forewarn.gcp.model import EventState, GceMaintenance, InstanceStatus
from forewarn.waves.model import (
    MAX_CONCURRENCY,
    ORDERS,
    UnitRun,
    Wave,
    WaveChanged,
    WaveCloud,
    WaveOrder,
    WaveSpec,
    WaveStatus,
)

# The names the rest of the code imports from here.
__all__ = [
    "MAX_CONCURRENCY",
    "StoredWaves",
    "UnitRun",
    "Wave",
    "WaveChanged",
    "WaveCloud",
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
    and which unit each operation (Azure) or maintenance event (Compute Engine) belongs to. It creates and cancels
    events through the Azure and Compute Engine components, and hears of each event's end from them
    (:meth:`event_ended` and :meth:`gce_event_ended`)."""

    def __init__(
        self,
        component: Callable[[type[Any]], Any],
        scheduler: Scheduler,
        sequence: Sequence,
        stored: StoredWaves,
    ) -> None:
        """``component``: the engine's lookup of its components by type (the waves hear of the ends of the
        Azure and Compute Engine components' events, and schedule through them)."""
        self.azure: AzureComponent = component(AzureComponent)
        self.gcp: GcpComponent = component(GcpComponent)
        self.azure.on_event_ended(self.event_ended)
        self.gcp.on_event_ended(self.gce_event_ended)
        self.fleet = self.azure.fleet
        self._scheduler = scheduler
        self._sequence = sequence
        self.waves: dict[str, Wave] = {}
        # An Azure operation id or a Compute Engine maintenance id (a 19-digit number: never an operation's GUID).
        self._wave_of_operation: dict[str, tuple[str, int]] = {}
        self._open_in_unit: dict[tuple[str, int], int] = {}
        self._gce_by_zone: dict[str, list[str]] | None = None  # built by the first zone wave: zones never change
        for wave in stored.waves:
            self.waves[wave.wave_id] = wave
            for run in wave.in_flight:
                self._track_unit(wave, run)

    @property
    def now(self) -> datetime:
        return self._scheduler.now

    def _track_unit(self, wave: Wave, run: UnitRun) -> None:
        open_events = 0
        for operation_id in run.operations:
            self._wave_of_operation[operation_id] = (wave.wave_id, run.unit)
            if wave.spec.cloud is WaveCloud.GCE:
                open_events += self.gcp.gce_event(operation_id).live
            else:
                open_events += sum(1 for event in self.azure.operation_events(operation_id) if event.status.live)
        self._open_in_unit[(wave.wave_id, run.unit)] = open_events

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
        if spec.order not in ORDERS[spec.cloud]:
            raise Invalid(
                f"a {spec.cloud.value} wave goes by {' or '.join(order.value for order in ORDERS[spec.cloud])}, "
                f"not {spec.order.value}"
            )
        if spec.cloud is WaveCloud.GCE:
            azure_only = (
                spec.event_type is not EventType.FREEZE
                or spec.source is not EventSource.PLATFORM
                or spec.duration_seconds is not None
                or spec.impact_window is not None
                or spec.description is not None
            )
            if azure_only:
                raise Invalid(
                    "event type, source, duration, impact window and description are Azure's: a Compute Engine wave "
                    "gives each instance the maintenance its onHostMaintenance says"
                )
            owners = self._gce_owners(spec)
            units = self._gce_units(spec.order, owners)
            if not units:
                raise Invalid("the wave has nothing to do: no running instance in its targets")
            # Every instance the wave may maintain, as a unit will ask for it: a notice that announces maintenance
            # to most of them may not to a GPU instance, whose own notice is an hour (no latest start then).
            wanted = frozenset(owners)
            targeted = tuple(name for name in gce_fleet(self.gcp.fleet).instances if self._gce_targeted(wanted, name))
            self.gcp.check_request(self._gce_request(spec, targeted, "check"))
        else:
            if spec.event_type in (EventType.PREEMPT, EventType.TERMINATE):
                raise Invalid(
                    f"a wave rolls platform maintenance; {spec.event_type.value} is not one (Freeze, Reboot or Redeploy)"
                )
            if spec.window is not None or spec.latest is not None or not spec.can_reschedule:
                raise Invalid("window, latest and can-reschedule are Compute Engine's: an Azure wave has none")
            owners = tuple(dict.fromkeys(azure_fleet(self.fleet).owner(name) for name in spec.groups))
            units = self._wave_units(spec.order, owners)
            if not units:
                raise Invalid("the wave has nothing to do: no running VM in its targets")
            # Checked like any schedule request, before anything changes.
            self.azure.check_request(self._unit_request(spec, (), "check"))
        wave_id = f"wave-{self._sequence.take()}"
        wave = Wave(wave_id, spec, owners, units, self.now)
        self.waves[wave_id] = wave
        target = ", ".join(spec.groups) or "the whole fleet"
        what = "Compute Engine host maintenance" if spec.cloud is WaveCloud.GCE else spec.event_type.value
        changes: list[Change] = [
            WaveChanged(
                wave,
                "started",
                f"{what} over {target} in {len(units)} units by {spec.order.value}, {spec.concurrency} at a time",
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
        step = DocumentStep()
        return self._stop(wave, reason, step) + self.azure.end_step(step)

    def _stop(self, wave: Wave, reason: str, step: DocumentStep) -> list[Change]:
        """``wave`` canceled, within ``step``: the Scheduled events of its units in flight with it."""
        wave_id = wave.wave_id
        wave = replace(wave, status=WaveStatus.CANCELED, finished_at=self.now)
        self.waves[wave_id] = wave
        changes: list[Change] = [WaveChanged(wave, "canceled", reason)]
        for run in wave.in_flight:
            for operation_id in run.operations:
                if wave.spec.cloud is WaveCloud.GCE:
                    if self.gcp.gce_event(operation_id).state is EventState.PENDING:
                        changes += self.gcp.cancel_gce(operation_id, f"{reason} ({wave_id})")
                    continue
                for event in self.azure.operation_events(operation_id):
                    if event.status is EventStatus.SCHEDULED:
                        changes += self.azure.cancel_scheduled(event, f"{reason} ({wave_id})", step)
        return changes

    # ------------------------------------------------------------------------------------------------ progress
    def event_ended(self, event: Event, step: DocumentStep) -> list[Change]:
        """An event became Completed or Canceled: the end of its unit, if it was the last open one."""
        unit_key = self._unit_ended_by(event.operation_id)
        if unit_key is None:
            return []
        return self._unit_done(*unit_key, step)

    def gce_event_ended(self, event: GceMaintenance) -> list[Change]:
        """A Compute Engine maintenance event was completed or canceled: the end of its unit, if it was the last."""
        unit_key = self._unit_ended_by(event.event_id)
        if unit_key is None:
            return []
        step = DocumentStep()  # the next unit's events are Compute Engine's: no Azure document changes
        return self._unit_done(*unit_key, step) + self.azure.end_step(step)

    def _unit_ended_by(self, operation_id: str) -> tuple[str, int] | None:
        """The wave unit whose last open operation this one was, or None (not a wave's, or others still open)."""
        unit_key = self._wave_of_operation.get(operation_id)
        if unit_key is None:
            return None
        self._open_in_unit[unit_key] -= 1
        return None if self._open_in_unit[unit_key] > 0 else unit_key

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
            reason = f"{wave_id}, {wave.label(unit)}"
            gce = wave.spec.cloud is WaveCloud.GCE
            names = self._unit_instances(wave, unit) if gce else self._unit_vms(wave, unit)
            refusal = self._unit_refusal(wave.spec, names, reason) if names else None
            if refusal is not None:
                # Time brought the wave here, and time cannot be refused: the wave stops, as an operator's cancel
                # would stop it, and says why.
                why = f"wave stopped: {wave.label(unit)} cannot be scheduled: {refusal}"
                return changes + self._stop(wave, why, step)
            wave = replace(wave, next_unit=unit + 1)
            if not names:
                wave = replace(wave, skipped=wave.skipped + (unit,))
                self.waves[wave_id] = wave
                what = "no running instance left to maintain" if gce else "no running VM"
                changes.append(WaveChanged(wave, "unit-skipped", f"{wave.label(unit)}: {what}"))
                continue
            if gce:
                created = self.gcp.schedule_gce(self._gce_request(wave.spec, names, reason))
                operations = tuple(dict.fromkeys(c.event.event_id for c in created if isinstance(c, GceEventChanged)))
                scheduled = f"{len(names)} instances"
            else:
                first_seq = self._sequence.next_number
                created = self.azure.create_events(self._unit_request(wave.spec, names, reason), step)
                events = (self.azure.event_by_seq(seq) for seq in range(first_seq, self._sequence.next_number))
                operations = tuple(dict.fromkeys(event.operation_id for event in events if event is not None))
                scheduled = f"{len(names)} VMs, {len(operations)} operations"
            run = UnitRun(unit, operations)
            wave = replace(wave, in_flight=wave.in_flight + (run,))
            self.waves[wave_id] = wave
            self._track_unit(wave, run)
            changes.append(WaveChanged(wave, "unit-scheduled", f"{wave.label(unit)}: {scheduled}"))
            changes += created
            if self._open_in_unit[(wave_id, unit)] == 0:  # e.g. nothing to wait for
                changes += self._unit_done(wave_id, unit, step)
                return changes
        if not wave.in_flight and wave.next_unit >= len(wave.units) and wave.status is WaveStatus.RUNNING:
            wave = replace(wave, status=WaveStatus.COMPLETED, finished_at=self.now)
            self.waves[wave_id] = wave
            changes.append(WaveChanged(wave, "completed", f"{wave.done} units completed, {len(wave.skipped)} skipped"))
        return changes

    def _unit_refusal(self, spec: WaveSpec, names: tuple[str, ...], reason: str) -> CoreError | None:
        """Why a unit's maintenance cannot be scheduled now (its NotBefore past the end of simulated time), checked
        before anything changes; None when it can."""
        try:
            if spec.cloud is WaveCloud.GCE:
                self.gcp.check_request(self._gce_request(spec, names, reason))
            else:
                self.azure.check_request(self._unit_request(spec, names, reason))
        except CoreError as refusal:
            return refusal
        return None

    # -------------------------------------------------------------------------------------------- replication
    def replicate(self, rows: WaveRows | None) -> list[Change]:
        """A replica takes waves the leader committed, and counts the open events of the units in flight again
        (after the Azure and Compute Engine components took their rows: the counts come from their events)."""
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
                self._track_unit(wave, run)
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
            vms = (vm for owner in owners for vm in azure_fleet(self.fleet).vms_by_owner[owner])
        else:
            vms = iter(azure_fleet(self.fleet).vms.values())
        return [vm for vm in vms if not self.azure.vm_states[vm.name].deleted]

    def _unit_vms(self, wave: Wave, unit: int) -> tuple[str, ...]:
        value = wave.units[unit]
        if wave.spec.order is WaveOrder.HOST:
            names = self.azure.names_on_host(value)
            if wave.owners:
                owners = set(wave.owners)
                return tuple(name for name in names if azure_fleet(self.fleet).vms[name].policy_owner in owners)
            return tuple(names)
        attribute = "update_domain" if wave.spec.order is WaveOrder.UPDATE_DOMAIN else "fault_domain"
        domain = int(value)
        return tuple(vm.name for vm in self._wave_targets(wave.owners) if getattr(vm, attribute) == domain)

    # ------------------------------------------------------------------------------------ Compute Engine targets
    def _gce_owners(self, spec: WaveSpec) -> tuple[str, ...]:
        """The groups as ``zones/ZONE`` or ``instances/NAME`` (either form is accepted as given, or a bare name)."""
        zones = {instance.zone for instance in gce_fleet(self.gcp.fleet).instances.values()}
        owners: list[str] = []
        for name in spec.groups:
            kind, _, bare = name.rpartition("/")
            is_instance = bare in gce_fleet(self.gcp.fleet).instances and kind in ("", "instances")
            is_zone = bare in zones and kind in ("", "zones")
            if is_instance and is_zone:
                raise Invalid(f"{name!r} is both an instance and a zone: say instances/{bare} or zones/{bare}")
            if not (is_instance or is_zone):
                raise NotFound(
                    f"no Compute Engine instance or zone named {name!r} in the fleet",
                    name=name,
                    known=[*zones, *gce_fleet(self.gcp.fleet).instances],
                )
            owners.append(f"instances/{bare}" if is_instance else f"zones/{bare}")
        return tuple(dict.fromkeys(owners))

    def _gce_targeted(self, owners: frozenset[str], name: str) -> bool:
        return (
            not owners
            or f"instances/{name}" in owners
            or f"zones/{gce_fleet(self.gcp.fleet).instances[name].zone}" in owners
        )

    def _gce_units(self, order: WaveOrder, owners: tuple[str, ...]) -> tuple[str, ...]:
        """Zones in the fleet file's order, or hosts (in the fleet's host order, then spare hosts) with a running
        target instance on them now."""
        wanted = frozenset(owners)
        running = [
            name
            for name, state in self.gcp.gce_states.items()
            if self._gce_targeted(wanted, name) and state.status is InstanceStatus.RUNNING and not state.deleted
        ]
        if order is WaveOrder.ZONE:
            return tuple(dict.fromkeys(gce_fleet(self.gcp.fleet).instances[name].zone for name in running))
        hosts = {self.gcp.gce_states[name].host for name in running}
        ordered = [host for host in self.fleet.hosts if host in hosts]
        spare = [host for host in self.gcp.host_names() if host in hosts and host not in self.fleet.hosts]
        return tuple(ordered + spare)

    def _unit_instances(self, wave: Wave, unit: int) -> tuple[str, ...]:
        """The unit's instances that can be maintained now: targeted, running, not in maintenance already, and not
        maintained by this wave before (a live migration may have brought it to this unit's host)."""
        value = wave.units[unit]
        if wave.spec.order is WaveOrder.ZONE:
            if self._gce_by_zone is None:
                self._gce_by_zone = {}
                for instance in gce_fleet(self.gcp.fleet).instances.values():
                    self._gce_by_zone.setdefault(instance.zone, []).append(instance.name)
            names: Iterable[str] = self._gce_by_zone.get(value, ())
        else:
            names = self.gcp.names_on_host(value)
        wanted = frozenset(wave.owners)
        mark = f"{wave.wave_id},"
        found = []
        for name in names:
            state = self.gcp.gce_states[name]
            if (
                state.status is not InstanceStatus.RUNNING
                or state.deleted
                or not self._gce_targeted(wanted, name)
                or self.gcp.in_maintenance(name)
                or any(event.reason.startswith(mark) for event in self.gcp.gce_events_of(name))
            ):
                continue
            found.append(name)
        return tuple(found)

    @staticmethod
    def _gce_request(spec: WaveSpec, instances: tuple[str, ...], reason: str) -> GceRequest:
        return GceRequest(
            instances,
            notice=spec.notice,
            window=spec.window,
            can_reschedule=spec.can_reschedule,
            maintenance_type=spec.maintenance_type,
            latest=spec.latest,
            reason=reason,
        )

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
