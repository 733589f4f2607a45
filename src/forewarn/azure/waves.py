"""Azure's wave units (``waves/units.py``): a wave's units are update domains, fault domains or hosts of Azure VMs,
and a unit's maintenance is one Scheduled Events request for its VMs (an event per scope on each host, an operation
per host). A unit waits for the events of its operations; every command of a wave is one DocumentStep.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from forewarn.azure.changes import EventChanged
from forewarn.azure.component import AzureComponent, DocumentStep
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventSource, EventStatus, EventType, ScheduleRequest
from forewarn.azure.vms import VM, Power
from forewarn.core import scheduler
from forewarn.core.changes import Change
from forewarn.core.component import Footing
from forewarn.core.enums import parse_enum
from forewarn.core.errors import CoreError, Invalid
from forewarn.core.words import counted
from forewarn.waves.model import Wave, WaveCloud, WaveOrder, WaveRequest, WaveSpec, plain
from forewarn.waves.units import MemberEnded, ScheduledUnit


@dataclass(frozen=True)
class AzureWaveUnits:
    cloud: str = WaveCloud.AZURE
    orders: tuple[WaveOrder, ...] = (WaveOrder.UPDATE_DOMAIN, WaveOrder.FAULT_DOMAIN, WaveOrder.HOST)
    nothing_left: str = "no running VM"

    def spec(self, request: WaveRequest, order: WaveOrder) -> WaveSpec:
        return WaveSpec(
            event_type=EventType.FREEZE if request.type is None else parse_enum(EventType, request.type, "event type"),
            order=order,
            concurrency=request.concurrency,
            groups=request.groups,
            source=EventSource.PLATFORM
            if request.source is None
            else parse_enum(EventSource, request.source, "source"),
            notice=request.notice,
            duration_seconds=request.duration_seconds,
            impact_window=request.impact_window,
            description=request.description,
            name=request.name,
            cloud=self.cloud,
            window=request.window,
            can_reschedule=request.can_reschedule,
            latest=request.latest,
        )

    def checked(self, spec: WaveSpec) -> WaveSpec:
        event_type = EventType.FREEZE if spec.event_type is None else EventType(plain(spec.event_type))
        if event_type in (EventType.PREEMPT, EventType.TERMINATE):
            raise Invalid(
                f"a wave rolls platform maintenance; {event_type.value} is not one (Freeze, Reboot or Redeploy)"
            )
        compute_engines = (
            spec.window is not None
            or spec.latest is not None
            or not spec.can_reschedule
            or spec.maintenance_type is not None
        )
        if compute_engines:
            raise Invalid(
                "window, latest, can-reschedule and maintenance type are Compute Engine's: an Azure wave has none"
            )
        source = EventSource.PLATFORM if spec.source is None else EventSource(plain(spec.source))
        return replace(spec, event_type=event_type, source=source)

    def kind(self, spec: WaveSpec) -> str:
        return str(plain(spec.event_type))

    def describe(self, spec: WaveSpec) -> str:
        return self.kind(spec)

    def scheduled_and_canceled(self, changes: Iterable[Change]) -> tuple[int, int]:
        whats = [change.what for change in changes if isinstance(change, EventChanged)]
        return whats.count("scheduled"), whats.count("canceled")

    def roller(self, component: AzureComponent, footing: Footing) -> AzureUnitRoller:
        return AzureUnitRoller(component, footing.sequence)


class AzureUnitRoller:
    """A unit's operations are the Azure operations its request created (one per host)."""

    def __init__(self, azure: AzureComponent, sequence: scheduler.Sequence) -> None:
        self.azure = azure
        self.fleet = azure.fleet
        self._sequence = sequence
        # The hosts the fleet file puts a VM on, in the fleet's order: a whole-fleet wave's units while no host has
        # lost its last VM and none outside them gained one (the fleet never changes: read once, with the engine).
        deployed = azure_fleet(self.fleet).vms_by_host
        self._deployed_hosts = tuple(host for host in self.fleet.hosts if host in deployed)

    def when_ended(self, ended: MemberEnded) -> None:
        self.azure.on_event_ended(lambda event, step: ended(event.operation_id, step))

    def targets(self, spec: WaveSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
        owners = tuple(dict.fromkeys(azure_fleet(self.fleet).owner(name) for name in spec.groups))
        units = self._units(WaveOrder(spec.order), owners)
        if not units:
            raise Invalid("the wave has nothing to do: no running VM in its targets")
        # Checked like any schedule request, before anything changes.
        self.azure.check_request(self._request(spec, (), "check"))
        return owners, units

    def members(self, wave: Wave, unit: int) -> tuple[str, ...]:
        value = wave.units[unit]
        if wave.spec.order is WaveOrder.HOST:
            names = self.azure.names_on_host(value)
            if wave.owners:
                owners = set(wave.owners)
                return tuple(name for name in names if azure_fleet(self.fleet).vms[name].policy_owner in owners)
            return tuple(names)
        attribute = "update_domain" if wave.spec.order is WaveOrder.UPDATE_DOMAIN else "fault_domain"
        domain = int(value)
        return tuple(vm.name for vm in self._targets(wave.owners) if getattr(vm, attribute) == domain)

    def refusal(self, spec: WaveSpec, members: tuple[str, ...], reason: str) -> Exception | None:
        try:
            self.azure.check_request(self._request(spec, members, reason))
        except CoreError as refusal:
            return refusal
        return None

    def schedule(self, spec: WaveSpec, members: tuple[str, ...], reason: str, step: DocumentStep) -> ScheduledUnit:
        first_seq = self._sequence.next_number
        created = self.azure.create_events(self._request(spec, members, reason), step)
        # the events this unit made (numbered from first_seq), from their changes: one made started appears twice
        events = (c.event for c in created if isinstance(c, EventChanged) and c.event.seq >= first_seq)
        operations = tuple(dict.fromkeys(event.operation_id for event in events))
        return ScheduledUnit(
            created, operations, f"{counted(len(members), 'VM')}, {counted(len(operations), 'operation')}"
        )

    def open_events(self, operations: Sequence[str]) -> int:
        return sum(
            1 for operation_id in operations for event in self.azure.operation_events(operation_id) if event.status.live
        )

    def cancel(self, operations: Sequence[str], reason: str, step: DocumentStep) -> list[Change]:
        changes: list[Change] = []
        for operation_id in operations:
            for event in self.azure.operation_events(operation_id):
                if event.status is EventStatus.SCHEDULED:
                    changes += self.azure.cancel_scheduled(event, reason, step)
        return changes

    def begin_step(self) -> DocumentStep:
        return DocumentStep()

    def end_step(self, step: DocumentStep) -> list[Change]:
        return self.azure.end_step(step)

    def _units(self, order: WaveOrder, owners: tuple[str, ...]) -> tuple[str, ...]:
        if order is WaveOrder.HOST:
            if not owners:
                return self._fleet_hosts()
            vm_states = self.azure.vm_states
            hosts = {vm_states.host(vm.name): None for vm in self._targets(owners)}
            return tuple(host for host in self.azure.host_names() if host in hosts)
        attribute = "update_domain" if order is WaveOrder.UPDATE_DOMAIN else "fault_domain"
        return tuple(str(d) for d in sorted({getattr(vm, attribute) for vm in self._targets(owners)}))

    def _fleet_hosts(self) -> tuple[str, ...]:
        """The hosts that run a VM that is not deleted, in the order of ``host_names``. A VM nothing changed runs on
        the host the fleet put it on, so only the hosts of the VMs that changed are looked at VM by VM: this costs
        the changed VMs while every deployed host still runs one and no other host does (the deployed hosts, kept),
        else the fleet's hosts too, not all its VMs (a wave's start runs on the event loop)."""
        fleet, vm_states = azure_fleet(self.fleet), self.azure.vm_states
        changed: set[str] = set()
        left_by_changed: set[str] = set()  # hosts where a VM that changed was deployed
        running_changed: set[str] = set()  # hosts where a VM that changed runs now
        for state in vm_states.changed():
            changed.add(state.name)
            left_by_changed.add(fleet.vms[state.name].host)
            if state.power is not Power.DELETED:
                running_changed.add(state.host)

        def runs_a_vm(host: str) -> bool:
            return host in running_changed or any(vm.name not in changed for vm in fleet.vms_by_host.get(host, ()))

        looked_at = left_by_changed | running_changed
        emptied = {host for host in looked_at if not runs_a_vm(host)}
        if not emptied and running_changed <= fleet.vms_by_host.keys():
            return self._deployed_hosts  # the changed VMs left every host of the fleet a VM, and took none beyond
        # Otherwise most hosts are decided by one look-up (a hundred thousand at a million VMs), made by C code: the
        # hosts of the deployed fleet that no VM that changed touched, and those it touched that still run a VM.
        running = (fleet.vms_by_host.keys() - looked_at) | (looked_at - emptied)
        return tuple(filter(running.__contains__, self.azure.host_names()))

    def _targets(self, owners: tuple[str, ...]) -> list[VM]:
        """The running VMs a wave covers."""
        vms: Iterable[VM]
        if owners:
            vms = (vm for owner in owners for vm in azure_fleet(self.fleet).vms_by_owner[owner])
        else:
            vms = iter(azure_fleet(self.fleet).vms.values())
        power = self.azure.vm_states.power  # no state built for the VMs nothing changed
        return [vm for vm in vms if power(vm.name) is not Power.DELETED]

    @staticmethod
    def _request(spec: WaveSpec, vms: tuple[str, ...], reason: str) -> ScheduleRequest:
        return ScheduleRequest(
            EventType(plain(spec.event_type)),
            vms=vms,
            source=EventSource(plain(spec.source)),
            notice=spec.notice,
            duration_seconds=spec.duration_seconds,
            impact_window=spec.impact_window,
            description=spec.description,
            reason=reason,
        )
