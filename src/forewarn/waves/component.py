"""Waves: maintenance rolled across a fleet the way a region rolls a host update.

A wave cuts its targets into *units*, each a set of machines the platform takes at once: an update domain, a fault
domain, a zone or a host. Units go in order, at most ``concurrency`` at a time. As soon as every event of a unit is
completed (or canceled), the next unit's maintenance starts, at that very instant: units take their turns, and the
next follows at once when another completes (how long a cloud waits between domains is not documented: at once is
our choice, the hardest case).

The runner keeps the order, the concurrency and the count of each unit's open events; everything that touches a
cloud is the cloud's wave units (``waves/units.py``, from ``Cloud.wave_units()``): which machines a unit holds, how
their maintenance starts (Azure: Scheduled Events; Compute Engine: host maintenance, each instance's as its
onHostMaintenance says), and when an event ends. A live migration may move an instance onto a host of a later unit:
a cloud's units maintain a machine at most once per wave.

A unit's machines are chosen when the unit is scheduled, not when the wave is created: a machine deleted or moved
in the meantime is taken where it is then. A unit with nothing left to do is skipped, and said so.

Cost: a wave keeps a count of the open events of each unit in flight, so an event that ends costs O(1) and a unit
costs what its own machines cost; nothing scans the fleet while time moves (bench/wave.py: a 100,000-VM wave). The
cloud's units are asked once per unit, never once per machine. A wave's first units can be a good share of the fleet
(5% of a million VMs' hosts at a time is 45,000 VMs): a command that starts a wave may stop scheduling them after
``MACHINES_PER_COMMAND`` machines, and ``fill_wave`` schedules the rest, a command at a time, each committed on its
own, so that the server answers requests between them (bench/stalls.py). A process that stops between those
commands leaves the wave with fewer units in flight than its concurrency; the next unit to complete fills it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any

from forewarn.core.bounds import check_whole_number
from forewarn.core.changes import REPLICATED, Change, Rebuilt
from forewarn.core.errors import Conflict, Invalid, NotFound
from forewarn.core.frozen import evolve
from forewarn.core.scheduler import Scheduler
from forewarn.core.words import counted
from forewarn.waves.model import (
    MAX_CONCURRENCY,
    InFlight,
    UnitRun,
    Wave,
    WaveChanged,
    WaveCloud,
    WaveOrder,
    WaveSpec,
    WaveStatus,
    plain,
)
from forewarn.waves.units import UnitRoller, WaveUnits, units_named

# The names the rest of the code imports from here.
__all__ = [
    "MACHINES_PER_COMMAND",
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


# Machines a command that starts or fills a wave schedules before it stops (a unit is never split): 5 to 10 ms of the
# event loop's time, at 20 to 40 µs a machine, on top of the group commit's own share. Counted, not timed: where a
# command ends shows in the documents. At 500, a million VMs' wave start held the loop 25 ms. At 100, two and a half
# times the commits: metadata replicas on a shared 2-core machine fell behind the leader and took the backlog in
# one turn of 0.3 to 0.6 s (bench/stalls.py, the replicas' catch-up).
MACHINES_PER_COMMAND = 250


@dataclass(frozen=True)
class StoredWaves:
    waves: Iterable[Wave] = field(default_factory=tuple)


@dataclass(frozen=True)
class WaveRows:
    """Waves some commits touched, as they are now (None: gone): what a replica applies (WaveRunner.replicate)."""

    waves: dict[str, Wave | None] = field(default_factory=dict)


class WaveRunner:
    """The waves component. State: ``waves`` and, for the units in flight, how many of their events are still open
    and which unit each of their operations belongs to (one table per cloud: the clouds' operation ids are their
    own). It starts and cancels maintenance through each cloud's :class:`UnitRoller`, and hears of each event's end
    from it."""

    def __init__(
        self,
        clouds: Sequence[tuple[WaveUnits, UnitRoller]],
        scheduler: Scheduler,
        stored: StoredWaves,
    ) -> None:
        """``clouds``: each cloud's wave units and their roller over its engine component, in the registry's order
        (a wave that names no cloud rolls over the first)."""
        self._units = {units.cloud: units for units, _ in clouds}
        self._rollers = {units.cloud: roller for units, roller in clouds}
        self._scheduler = scheduler
        self.waves: dict[str, Wave] = {}
        # Per cloud: an operation of a unit in flight -> (wave id, unit).
        self._wave_of_operation: dict[str, dict[str, tuple[str, int]]] = {cloud: {} for cloud in self._rollers}
        self._open_in_unit: dict[tuple[str, int], int] = {}
        for cloud, roller in self._rollers.items():
            roller.when_ended(partial(self._member_ended, cloud))
        for wave in stored.waves:
            self.waves[wave.wave_id] = wave
            for run in wave.in_flight:
                self._track_unit(wave, run)

    def close(self) -> None:
        """Its engine is replaced (``Engine.close``): the rollers let go of, each of which reaches a component that
        tells this runner of the events that end, a cycle only the cyclic collector would free."""
        self._rollers.clear()

    @property
    def now(self) -> datetime:
        return self._scheduler.now

    def _next_wave_id(self) -> str:
        """``wave-1``, ``wave-2``, ...: one more than the highest wave number, so that a server's waves are numbered
        one after another as its users see them (the engine's shared sequence also numbers events and operations,
        and left gaps). Waves are never removed but by a reset, which starts again at ``wave-1``."""
        numbers = (int(wave_id[5:]) for wave_id in self.waves if wave_id.startswith("wave-") and wave_id[5:].isdigit())
        return f"wave-{max(numbers, default=0) + 1}"

    def units_of(self, cloud: str) -> WaveUnits:
        """The wave units a wave's ``cloud`` names (case-insensitive; empty: the first cloud's), or why none."""
        if not cloud and self._units:
            return next(iter(self._units.values()))
        asked = str(plain(cloud)).lower()
        for name, units in self._units.items():
            if str(plain(name)).lower() == asked:
                return units
        return units_named(cloud)  # refused, saying why: a registered cloud without waves, or no such cloud

    def _roller(self, spec: WaveSpec) -> UnitRoller:
        roller = self._rollers.get(spec.cloud)
        if roller is None:  # a stored wave of a cloud this server does not have
            raise NotFound(f"no cloud {plain(spec.cloud)!r} with waves in this engine", name=spec.cloud)
        return roller

    def _track_unit(self, wave: Wave, run: UnitRun) -> None:
        roller = self._rollers.get(wave.spec.cloud)
        if roller is None:  # a stored wave of a cloud this server no longer has: none of its events are here
            return
        operations = self._wave_of_operation[wave.spec.cloud]
        for operation_id in run.operations:
            operations[operation_id] = (wave.wave_id, run.unit)
        self._open_in_unit[(wave.wave_id, run.unit)] = roller.open_events(run.operations)

    # ------------------------------------------------------------------------------------------------ queries
    def wave(self, wave_id: str) -> Wave:
        found = self.waves.get(wave_id)
        if found is None:
            raise NotFound(f"no wave {wave_id!r}", name=wave_id, known=self.waves.keys())
        return found

    # ----------------------------------------------------------------------------------------------- commands
    def start_wave(self, spec: WaveSpec, budget: int | None = None) -> list[Change]:
        """Create a wave and schedule its first units (up to the concurrency limit; with a ``budget``, only until
        that many machines were scheduled: ``fill_wave`` schedules the rest)."""
        check_whole_number(spec.concurrency, "concurrency", 1, MAX_CONCURRENCY)
        units = self.units_of(spec.cloud)
        order = units.orders[0] if spec.order is None else WaveOrder(spec.order)
        if order not in units.orders:
            raise Invalid(
                f"a {plain(units.cloud)} wave goes by {' or '.join(order.value for order in units.orders)}, "
                f"not {order.value}"
            )
        spec = units.checked(replace(spec, cloud=units.cloud, order=order))
        roller = self._roller(spec)
        owners, unit_names = roller.targets(spec)
        wave_id = self._next_wave_id()
        wave = Wave(wave_id, spec, owners, unit_names, self.now)
        self.waves[wave_id] = wave
        target = ", ".join(spec.groups) or "the whole fleet"
        changes: list[Change] = [
            WaveChanged(
                wave,
                "started",
                f"{units.describe(spec)} over {target} in {counted(len(unit_names), 'unit')} by {order.value}, "
                f"{spec.concurrency} at a time",
            )
        ]
        step = roller.begin_step()
        changes += self._wave_fill(wave_id, step, budget)
        return changes + roller.end_step(step)

    def fill_wave(self, wave_id: str, budget: int | None = None) -> list[Change]:
        """Schedule more units of a running wave, up to its concurrency limit (with a ``budget``, only until that
        many machines were scheduled); nothing, and no change, when it is not running or has all it may have."""
        wave = self.wave(wave_id)
        if not self.filling(wave):
            return []
        roller = self._roller(wave.spec)
        step = roller.begin_step()
        changes = self._wave_fill(wave_id, step, budget)
        return changes + roller.end_step(step)

    @staticmethod
    def filling(wave: Wave) -> bool:
        """Whether ``wave`` runs with fewer units in flight than its concurrency and units left to schedule."""
        in_flight_room = len(wave.in_flight) < wave.spec.concurrency
        return wave.status is WaveStatus.RUNNING and in_flight_room and wave.next_unit < len(wave.units)

    def cancel_wave(
        self, wave_id: str, reason: str = "wave canceled by the operator", budget: int | None = None
    ) -> list[Change]:
        """Stop a wave: no further unit is scheduled, and the maintenance of the units in flight that has not
        started is canceled (started maintenance finishes: a Started event cannot be canceled). With a ``budget``,
        the units' maintenance is canceled only until that many changes were made: ``cancel_more`` cancels the
        rest, a command at a time."""
        wave = self.wave(wave_id)
        if wave.status is not WaveStatus.RUNNING:
            raise Conflict(f"{wave_id} is {wave.status.value}")
        roller = self._roller(wave.spec)
        step = roller.begin_step()
        return self._stop(wave, reason, step, budget) + roller.end_step(step)

    def cancel_more(self, wave_id: str, budget: int, reason: str = "wave canceled by the operator") -> list[Change]:
        """Cancel more of what a canceled wave's units in flight have not started, until ``budget`` changes were
        made: nothing, and no change, once none is left. The units whose maintenance is all canceled leave the
        wave's units in flight, so what is left to look at is the rest and the units whose maintenance started."""
        wave = self.wave(wave_id)
        if wave.status is not WaveStatus.CANCELED:
            return []
        roller = self._roller(wave.spec)
        step = roller.begin_step()
        changes = self._cancel_in_flight(wave, reason, step, budget)
        return changes + roller.end_step(step) if changes else []

    def _stop(self, wave: Wave, reason: str, step: Any, budget: int | None = None) -> list[Change]:
        """``wave`` canceled, within ``step``: the maintenance of its units in flight that has not started with it
        (with a ``budget``, only until that many changes were made)."""
        wave_id = wave.wave_id
        wave = evolve(wave, status=WaveStatus.CANCELED, finished_at=self.now)
        self.waves[wave_id] = wave
        return [WaveChanged(wave, "canceled", reason), *self._cancel_in_flight(wave, reason, step, budget)]

    def _cancel_in_flight(self, wave: Wave, reason: str, step: Any, budget: int | None) -> list[Change]:
        changes: list[Change] = []
        roller = self._roller(wave.spec)
        for run in wave.in_flight:  # as it was: a unit whose events all end leaves the wave's
            changes += roller.cancel(run.operations, f"{reason} ({wave.wave_id})", step)
            if budget is not None and len(changes) >= budget:
                break
        return changes

    # ------------------------------------------------------------------------------------------------ progress
    def _member_ended(self, cloud: str, operation_id: str, step: Any) -> list[Change]:
        """One of ``cloud``'s events was completed or canceled: the end of its unit, if it was the last open one.
        ``step``: the cloud's step it ended in (None: the runner takes one of its own for the next unit)."""
        unit_key = self._wave_of_operation[cloud].get(operation_id)
        if unit_key is None:
            return []
        self._open_in_unit[unit_key] -= 1
        if self._open_in_unit[unit_key] > 0:
            return []
        if step is not None:
            return self._unit_done(*unit_key, step)
        roller = self._rollers[cloud]
        own_step = roller.begin_step()
        return self._unit_done(*unit_key, own_step) + roller.end_step(own_step)

    def _unit_done(self, wave_id: str, unit: int, step: Any) -> list[Change]:
        del self._open_in_unit[(wave_id, unit)]
        wave = self.waves[wave_id]
        # Units mostly end in the order they went, so the search stops at once, and the next version of the units
        # in flight shares what it keeps with this one (InFlight): a step that ends thousands of units of a wave
        # with thousands in flight (5% of a million VMs' hosts) copies none of them.
        in_flight, run = InFlight.of(wave.in_flight).without(unit)
        operations = self._wave_of_operation[wave.spec.cloud]
        for operation_id in run.operations:
            operations.pop(operation_id, None)
        wave = evolve(wave, in_flight=in_flight, done=wave.done + 1)
        self.waves[wave_id] = wave
        changes: list[Change] = [WaveChanged(wave, "unit-completed", f"{wave.label(unit)} completed", run)]
        if wave.status is WaveStatus.RUNNING:
            changes += self._wave_fill(wave_id, step)
        return changes

    def _wave_fill(self, wave_id: str, step: Any, budget: int | None = None) -> list[Change]:
        """Schedule units until the concurrency limit is reached or none is left (or, with a ``budget``, that many
        machines were scheduled); finish the wave when all are."""
        changes: list[Change] = []
        wave = self.waves[wave_id]
        roller = self._roller(wave.spec)
        machines = 0
        while (
            len(wave.in_flight) < wave.spec.concurrency
            and wave.next_unit < len(wave.units)
            and (budget is None or machines < budget)
        ):
            unit = wave.next_unit
            reason = f"{wave_id}, {wave.label(unit)}"
            members = roller.members(wave, unit)
            refusal = roller.refusal(wave.spec, members, reason) if members else None
            if refusal is not None:
                # Time brought the wave here, and time cannot be refused: the wave stops, as an operator's cancel
                # would stop it, and says why.
                why = f"wave stopped: {wave.label(unit)} cannot be scheduled: {refusal}"
                return changes + self._stop(wave, why, step)
            wave = evolve(wave, next_unit=unit + 1)
            if not members:
                wave = evolve(wave, skipped=wave.skipped + (unit,))
                self.waves[wave_id] = wave
                nothing = self.units_of(wave.spec.cloud).nothing_left
                changes.append(WaveChanged(wave, "unit-skipped", f"{wave.label(unit)}: {nothing}"))
                continue
            scheduled = roller.schedule(wave.spec, members, reason, step)
            machines += len(members)
            run = UnitRun(unit, scheduled.operations)
            wave = evolve(wave, in_flight=InFlight.of(wave.in_flight).with_run(run))
            self.waves[wave_id] = wave
            self._track_unit(wave, run)
            changes.append(WaveChanged(wave, "unit-scheduled", f"{wave.label(unit)}: {scheduled.summary}", run))
            changes += scheduled.changes
            if self._open_in_unit[(wave_id, unit)] == 0:  # e.g. nothing to wait for
                changes += self._unit_done(wave_id, unit, step)
                return changes
        if not wave.in_flight and wave.next_unit >= len(wave.units) and wave.status is WaveStatus.RUNNING:
            wave = evolve(wave, status=WaveStatus.COMPLETED, finished_at=self.now)
            self.waves[wave_id] = wave
            changes.append(
                WaveChanged(wave, "completed", f"{counted(wave.done, 'unit')} completed, {len(wave.skipped)} skipped")
            )
        return changes

    # -------------------------------------------------------------------------------------------- replication
    def replicate(self, rows: WaveRows | None) -> list[Change]:
        """A replica takes waves the leader committed, and counts the open events of the units in flight again
        (after the clouds' components took their rows: the counts come from their events)."""
        changes: list[Change] = []
        removed = False
        for wave_id, wave in (rows.waves if rows is not None else {}).items():
            if wave is None:
                removed |= self.waves.pop(wave_id, None) is not None
            else:
                self.waves[wave_id] = wave
                changes.append(WaveChanged(wave, REPLICATED, "committed by the leader"))
        for operations in self._wave_of_operation.values():
            operations.clear()
        self._open_in_unit.clear()
        for wave in self.waves.values():
            for run in wave.in_flight:
                self._track_unit(wave, run)
        if removed:
            changes.append(Rebuilt("waves a replica projected were not committed"))
        return changes
