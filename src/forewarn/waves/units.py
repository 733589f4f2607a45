"""What a wave needs of a cloud: its wave units (``Cloud.wave_units()``), the one way the waves reach a cloud.

Two parts. :class:`WaveUnits` is the cloud's knowledge of waves, with no engine behind it: the name a wave request
gives the cloud, the orders its waves go by, how the request's cloud-specific fields become a :class:`WaveSpec`
(parsed and checked), and what kind of maintenance a wave shows. :meth:`WaveUnits.roller` binds it to the cloud's
engine component, giving a :class:`UnitRoller`: which machines a wave over its targets covers and in which units,
which of a unit's machines can be maintained now, how to start their maintenance and cancel what has not started,
and which of its events are still open. The runner (``waves/component.py``) keeps the order, the concurrency and
the counts; the roller does everything that touches the cloud.

A cloud whose ``wave_units()`` is None has no waves: a wave request that names it is refused, saying so.

The roller is asked once per unit (its machines, their maintenance) and once per wave (its targets), never once per
machine: a wave over 100,000 VMs calls it as often as it has units.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from forewarn.core.changes import Change
from forewarn.core.component import Footing
from forewarn.core.errors import Invalid, did_you_mean
from forewarn.registry import clouds
from forewarn.waves.model import Wave, WaveOrder, WaveRequest, WaveSpec, plain

# ``ended(operation, step)``: one of the cloud's events ended. ``operation`` is what the roller put in the unit's
# run (ScheduledUnit.operations); ``step`` is the cloud's step the end happened in, or None when the cloud has none
# (the runner then opens one of the roller's own for what it does next).
MemberEnded = Callable[[str, Any], list[Change]]


@dataclass(frozen=True)
class ScheduledUnit:
    """What starting a unit's maintenance did: the changes, the operations whose events the unit waits for (in the
    order they were created), and what a person reads of it ("12 VMs, 3 operations")."""

    changes: list[Change]
    operations: tuple[str, ...]
    summary: str


class UnitRoller(Protocol):
    """A cloud's wave units over its engine component."""

    def when_ended(self, ended: MemberEnded) -> None:
        """Call ``ended`` whenever one of the cloud's events is completed or canceled, within that step."""
        ...

    def targets(self, spec: WaveSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The wave's resolved groups (its ``owners``, empty: the cloud's whole fleet) and its units in the order
        they go, each as it is shown ("3", a host, a zone). Refuses a wave with nothing to do, or one the cloud
        would refuse to schedule, before anything changes."""
        ...

    def members(self, wave: Wave, unit: int) -> tuple[str, ...]:
        """The machines of ``unit`` that can be maintained now (chosen when the unit goes, not when the wave began)."""
        ...

    def refusal(self, spec: WaveSpec, members: tuple[str, ...], reason: str) -> Exception | None:
        """Why the cloud would refuse the unit's maintenance now, changing nothing; None when it would not."""
        ...

    def schedule(self, spec: WaveSpec, members: tuple[str, ...], reason: str, step: Any) -> ScheduledUnit:
        """Start the maintenance of ``members`` within ``step``; ``reason`` ("wave-12, zone us-central1-a") goes
        on every event, as the scenario runner tells a wave's events by it."""
        ...

    def open_events(self, operations: Sequence[str]) -> int:
        """How many events of these operations are still to end (to complete or be canceled)."""
        ...

    def cancel(self, operations: Sequence[str], reason: str, step: Any) -> list[Change]:
        """Cancel those events of these operations that have not started (started ones finish)."""
        ...

    def begin_step(self) -> Any:
        """A step for one command of the runner's (what the cloud batches until the step ends, or None)."""
        ...

    def end_step(self, step: Any) -> list[Change]:
        """The changes that end ``step`` (Azure: one DocumentIncarnation per scope touched)."""
        ...


class WaveUnits(Protocol):
    """A cloud's waves, as ``Cloud.wave_units()`` gives them."""

    @property
    def cloud(self) -> str:
        """The cloud's name in a wave request and its stored plan ("azure", "gce")."""
        ...

    @property
    def orders(self) -> tuple[WaveOrder, ...]:
        """What one unit of its waves can be, the default first."""
        ...

    @property
    def nothing_left(self) -> str:
        """What a unit skipped for want of machines says ("no running VM")."""
        ...

    def spec(self, request: WaveRequest, order: WaveOrder) -> WaveSpec:
        """The wave a request asks for, its cloud-specific fields parsed (``order``: the request's, or the default)."""
        ...

    def checked(self, spec: WaveSpec) -> WaveSpec:
        """``spec`` with the cloud's defaults filled in, or refused if it holds another cloud's fields or values
        this cloud's waves do not take."""
        ...

    def kind(self, spec: WaveSpec) -> str:
        """The maintenance a wave rolls, as the control API shows it in its ``type`` (an event type)."""
        ...

    def describe(self, spec: WaveSpec) -> str:
        """The maintenance a wave rolls, as its "started" change says it ("Freeze")."""
        ...

    def scheduled_and_canceled(self, changes: Iterable[Change]) -> tuple[int, int]:
        """How many of the cloud's events these changes scheduled, and how many they canceled."""
        ...

    def roller(self, component: Any, footing: Footing) -> UnitRoller:
        """The units over the cloud's engine component (built on ``footing``)."""
        ...


class CloudWithWaves(Protocol):
    """The part of a registered cloud (``forewarn/cloud.py``'s ``Cloud``) the waves read."""

    @property
    def name(self) -> str: ...

    @property
    def title(self) -> str: ...

    def wave_units(self) -> WaveUnits | None: ...


def registered_clouds() -> tuple[CloudWithWaves, ...]:
    """Every registered cloud, as the waves see it (each cloud's module holds it to the whole ``Cloud`` protocol)."""
    return cast("tuple[CloudWithWaves, ...]", clouds())


@dataclass
class KnownUnits:
    """The wave units read from one loading of the registry's clouds."""

    clouds: tuple[CloudWithWaves, ...] | None = None
    units: Mapping[str, WaveUnits] = field(default_factory=dict)


KNOWN = KnownUnits()


def wave_units() -> Mapping[str, WaveUnits]:
    """The registered clouds' wave units by their name in a wave request, in the registry's order (the first is
    the cloud a request that names none rolls over); read again only when the registry loads its clouds again."""
    registered = registered_clouds()
    if KNOWN.clouds is not registered:
        found: dict[str, WaveUnits] = {}
        for cloud in registered:
            units = cloud.wave_units()
            if units is not None:
                found[units.cloud] = units
        KNOWN.clouds, KNOWN.units = registered, found
    return KNOWN.units


class Orders(Mapping[str, tuple[WaveOrder, ...]]):
    """Each registered cloud's wave orders by its name in a wave request, the default first (read from the clouds'
    wave units when first asked)."""

    def __getitem__(self, cloud: str) -> tuple[WaveOrder, ...]:
        return wave_units()[cloud].orders

    def __iter__(self) -> Iterator[str]:
        return iter(wave_units())

    def __len__(self) -> int:
        return len(wave_units())


ORDERS = Orders()


def units_named(cloud: str) -> WaveUnits:
    """The wave units a request's ``cloud`` names (case-insensitive), or why there are none."""
    known, asked = wave_units(), str(plain(cloud)).lower()
    for name, units in known.items():
        if str(plain(name)).lower() == asked:
            return units
    for registered in registered_clouds():
        if registered.name.lower() == asked:
            raise Invalid(f"{registered.title} has no waves: a wave rolls over {' or '.join(map(plain, known))}")
    names = [str(plain(name)) for name in known]
    raise Invalid(f"unknown cloud {plain(cloud)!r}; expected one of {', '.join(names)}{did_you_mean(asked, names)}")
