"""Compute Engine's wave units (``waves/units.py``): a wave's units are zones or hosts of Compute Engine instances,
and a unit's maintenance is host maintenance for each of its instances (announced as upcoming maintenance if the
notice is long enough, then the ``maintenance-event`` notice, then a live migration or a termination, as each
instance's onHostMaintenance says). A unit waits for each instance's maintenance event. A live migration moves an
instance to another host, maybe one of a later unit: an instance is maintained at most once per wave.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from forewarn.core.changes import Change
from forewarn.core.component import Footing
from forewarn.core.enums import parse_enum
from forewarn.core.errors import CoreError, Invalid, NotFound
from forewarn.core.words import counted
from forewarn.gcp.changes import GceEventChanged
from forewarn.gcp.component import GceRequest, GcpComponent
from forewarn.gcp.fleet import gce_fleet
from forewarn.gcp.model import InstanceStatus, MaintenanceType
from forewarn.waves.model import Wave, WaveCloud, WaveOrder, WaveRequest, WaveSpec, plain
from forewarn.waves.units import MemberEnded, ScheduledUnit


@dataclass(frozen=True)
class GceWaveUnits:
    cloud: str = WaveCloud.GCE
    # Compute Engine maintains hosts, zone by zone in a region (zones are its failure domains).
    orders: tuple[WaveOrder, ...] = (WaveOrder.ZONE, WaveOrder.HOST)
    nothing_left: str = "no running instance left to maintain"

    def spec(self, request: WaveRequest, order: WaveOrder) -> WaveSpec:
        return WaveSpec(
            order=order,
            concurrency=request.concurrency,
            groups=request.groups,
            source=request.source,
            notice=request.notice,
            duration_seconds=request.duration_seconds,
            impact_window=request.impact_window,
            description=request.description,
            name=request.name,
            cloud=self.cloud,
            window=request.window,
            can_reschedule=request.can_reschedule,
            latest=request.latest,
            maintenance_type=(
                MaintenanceType.SCHEDULED
                if request.type is None
                else parse_enum(MaintenanceType, request.type, "maintenance type")
            ),
        )

    def checked(self, spec: WaveSpec) -> WaveSpec:
        azures = (
            spec.event_type is not None
            or spec.source is not None
            or spec.duration_seconds is not None
            or spec.impact_window is not None
            or spec.description is not None
        )
        if azures:
            raise Invalid(
                "event type, source, duration, impact window and description are Azure's: a Compute Engine wave "
                "gives each instance the maintenance its onHostMaintenance says"
            )
        maintenance_type = (
            MaintenanceType.SCHEDULED
            if spec.maintenance_type is None
            else MaintenanceType(plain(spec.maintenance_type))
        )
        return replace(spec, maintenance_type=maintenance_type)

    def kind(self, spec: WaveSpec) -> str:
        return str(plain(spec.maintenance_type))

    def describe(self, spec: WaveSpec) -> str:
        return "Compute Engine host maintenance"

    def scheduled_and_canceled(self, changes: Iterable[Change]) -> tuple[int, int]:
        whats = [change.what for change in changes if isinstance(change, GceEventChanged)]
        return whats.count("scheduled"), whats.count("canceled")

    def roller(self, component: GcpComponent, footing: Footing) -> GceUnitRoller:
        return GceUnitRoller(component, footing.fleet)


class GceUnitRoller:
    """A unit's operations are its instances' maintenance events (ids of 19 digits), one per instance."""

    def __init__(self, gcp: GcpComponent, fleet: Any) -> None:
        """``fleet``: the server's whole fleet, whose host order a wave by host follows."""
        self.gcp = gcp
        self._fleet_hosts = fleet.hosts
        self._by_zone: dict[str, list[str]] | None = None  # built by the first zone wave: zones never change

    def when_ended(self, ended: MemberEnded) -> None:
        self.gcp.on_event_ended(lambda event: ended(event.event_id, None))

    def targets(self, spec: WaveSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
        owners = self._owners(spec)
        units = self._units(WaveOrder(spec.order), owners)
        if not units:
            raise Invalid("the wave has nothing to do: no running instance in its targets")
        # Every instance the wave may maintain, as a unit will ask for it: a notice that announces maintenance
        # to most of them may not to a GPU instance, whose own notice is an hour (no latest start then).
        wanted = frozenset(owners)
        targeted = tuple(name for name in gce_fleet(self.gcp.fleet).instances if self._targeted(wanted, name))
        self.gcp.check_request(self._request(spec, targeted, "check"))
        return owners, units

    def members(self, wave: Wave, unit: int) -> tuple[str, ...]:
        """The unit's instances that can be maintained now: targeted, running, not in maintenance already, and not
        maintained by this wave before (a live migration may have brought it to this unit's host)."""
        value = wave.units[unit]
        names: Iterable[str]
        if wave.spec.order is WaveOrder.ZONE:
            names = self._zone_instances().get(value, ())
        else:
            names = self.gcp.names_on_host(value)
        wanted = frozenset(wave.owners)
        found = []
        for name in names:
            state = self.gcp.gce_states[name]
            if (
                state.status is not InstanceStatus.RUNNING
                or state.deleted
                or not self._targeted(wanted, name)
                or self.gcp.in_maintenance(name)
            ):
                continue
            found.append(name)
        maintained = self.gcp.maintained_by(found, f"{wave.wave_id},") if found else set()
        return tuple(name for name in found if name not in maintained)

    def refusal(self, spec: WaveSpec, members: tuple[str, ...], reason: str) -> Exception | None:
        try:
            self.gcp.check_request(self._request(spec, members, reason))
        except CoreError as refusal:
            return refusal
        return None

    def schedule(self, spec: WaveSpec, members: tuple[str, ...], reason: str, step: None) -> ScheduledUnit:
        created = self.gcp.schedule_gce(self._request(spec, members, reason))
        operations = tuple(dict.fromkeys(c.event.event_id for c in created if isinstance(c, GceEventChanged)))
        return ScheduledUnit(created, operations, counted(len(members), "instance"))

    def open_events(self, operations: Sequence[str]) -> int:
        return sum(1 for event_id in operations if self.gcp.is_live(event_id))

    def cancel(self, operations: Sequence[str], reason: str, step: None) -> list[Change]:
        changes: list[Change] = []
        for event_id in operations:
            if self.gcp.is_pending(event_id):
                changes += self.gcp.cancel_gce(event_id, reason)
        return changes

    def begin_step(self) -> None:
        """Compute Engine batches nothing until a step ends."""
        return None

    def end_step(self, step: None) -> list[Change]:
        return []

    def _owners(self, spec: WaveSpec) -> tuple[str, ...]:
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

    def _targeted(self, owners: frozenset[str], name: str) -> bool:
        return (
            not owners
            or f"instances/{name}" in owners
            or f"zones/{gce_fleet(self.gcp.fleet).instances[name].zone}" in owners
        )

    def _units(self, order: WaveOrder, owners: tuple[str, ...]) -> tuple[str, ...]:
        """Zones in the fleet file's order, or hosts (in the fleet's host order, then spare hosts) with a running
        target instance on them now."""
        wanted = frozenset(owners)
        running = [
            name
            for name, state in self.gcp.gce_states.items()
            if self._targeted(wanted, name) and state.status is InstanceStatus.RUNNING and not state.deleted
        ]
        if order is WaveOrder.ZONE:
            return tuple(dict.fromkeys(gce_fleet(self.gcp.fleet).instances[name].zone for name in running))
        hosts = {self.gcp.gce_states[name].host for name in running}
        ordered = [host for host in self._fleet_hosts if host in hosts]
        spare = [host for host in self.gcp.host_names() if host in hosts and host not in self._fleet_hosts]
        return tuple(ordered + spare)

    def _zone_instances(self) -> dict[str, list[str]]:
        if self._by_zone is None:
            self._by_zone = {}
            for instance in gce_fleet(self.gcp.fleet).instances.values():
                self._by_zone.setdefault(instance.zone, []).append(instance.name)
        return self._by_zone

    @staticmethod
    def _request(spec: WaveSpec, instances: tuple[str, ...], reason: str) -> GceRequest:
        return GceRequest(
            instances,
            notice=spec.notice,
            window=spec.window,
            can_reschedule=spec.can_reschedule,
            maintenance_type=MaintenanceType(plain(spec.maintenance_type)),
            latest=spec.latest,
            reason=reason,
        )
