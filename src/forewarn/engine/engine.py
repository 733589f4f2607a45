"""The maintenance engine: commands in, changes out.

The engine never does I/O and never reads the wall clock; every command carries the simulated time it happens at.
Each command returns the list of changes it caused, which the service commits to the store before anyone is told.

The engine holds one component per registered cloud (``registry.py``), each with its own state, commands and
queries, reached by type: ``engine.component(AzureComponent)``. It also holds the waves, which roll maintenance
across a fleet through each cloud's wave units (``Cloud.wave_units()``) over its component. They share one simulated ``now``, one deadline heap and one numbering
(``core/scheduler.py``); the engine builds them, moves time, and replicates a leader's commits into them. It names
no cloud.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar, cast

from forewarn.core.bounds import check_time, clamped_time
from forewarn.core.changes import Change, TimeMoved
from forewarn.core.component import Component, Footing, StoredRows
from forewarn.core.errors import Conflict
from forewarn.core.scheduler import Heap, Scheduler, Sequence
from forewarn.engine.rules import Rules, check_rules
from forewarn.fleet.model import Fleet
from forewarn.registry import clouds
from forewarn.waves.component import StoredWaves, WaveRunner
from forewarn.waves.units import registered_clouds

__all__ = ["Change", "Engine"]

C = TypeVar("C")


class Engine:
    def __init__(
        self,
        fleet: Fleet,
        seed: str,
        now: datetime,
        rules: Rules | None = None,
        *,
        created_at: datetime | None = None,
        stored: Mapping[str, Any] | None = None,
        next_seq: int = 1,
        database: StoredRows | None = None,
    ) -> None:
        """``stored``: each component's stored state, by its records' owner (a cloud's name, ``waves``), as the
        store loads it (none: a fleet just deployed); ``created_at``: when the fleet was deployed (its machines'
        boot time); ``next_seq``: the stored numbering, which also names things that are not events (windows,
        replacement instances, waves); ``database``: the store ``stored`` came from, which the engine's commits go
        to (what has ended leaves memory once :meth:`release` is told it is durable, and is read from there; None:
        everything stays in memory)."""
        stored = stored or {}
        self.fleet = fleet
        self.seed = seed
        self.rules = check_rules(rules or Rules())
        self.scheduler = Scheduler(clamped_time(now))
        self._sequence = Sequence()
        footing = Footing(
            fleet, seed, self.rules, self.scheduler, self._sequence, clamped_time(created_at or now), database
        )
        # Built in the registry's order, as their deadlines at one instant fire in the order they were set.
        self.components: dict[str, Component] = {
            cloud.name: cloud.component(footing, stored.get(cloud.name)) for cloud in clouds()
        }
        self._by_type: dict[type, object] = {type(part): part for part in self.components.values()}
        waves = [
            (units, units.roller(self.components[cloud.name], footing))
            for cloud in registered_clouds()
            if (units := cloud.wave_units()) is not None
        ]
        self.wave_runner = WaveRunner(waves, self.scheduler, stored.get("waves") or StoredWaves())
        self._by_type[WaveRunner] = self.wave_runner
        self._sequence.past(next_seq - 1)
        self.repaired: list[Change] = [change for part in self.components.values() for change in part.repaired]

    def component(self, kind: type[C]) -> C:
        """The component of this type (a cloud's, or the waves): ``engine.component(AzureComponent)``."""
        found = self._by_type.get(kind)
        if found is None:
            raise LookupError(f"this engine has no {kind.__name__}: its cloud is not registered")
        return cast(C, found)

    # ------------------------------------------------------------------------------------------------- time
    @property
    def now(self) -> datetime:
        return self.scheduler.now

    @property
    def next_seq(self) -> int:
        return self._sequence.next_number

    def next_deadline(self) -> datetime | None:
        return self.scheduler.next_deadline()

    # ------------------------------------------------------------------------------------------ replication
    def replicate(self, now: datetime, next_seq: int, created_at: datetime, rows: Mapping[str, Any]) -> list[Change]:
        """A replica takes the rows the leader's commits touched (by their records' owner), read back at the
        leader's ``now`` and numbering (which the replica's own projection may have passed: it goes back to them).
        Each component updates its state, indexes and deadlines; the changes returned tell the read models what moved
        (a Rebuilt among them: drop what was derived)."""
        self.scheduler.now = clamped_time(now)
        self._sequence.next_number = next_seq
        changes: list[Change] = []
        for name, part in self.components.items():
            if name in rows:
                changes += part.replicate(rows[name], clamped_time(created_at))
        if rows:  # the waves count their units' open events again from the components' events
            changes += self.wave_runner.replicate(rows.get("waves"))
        changes.append(TimeMoved(self.now))
        return changes

    def release(self) -> None:
        """Every change made so far is committed: each component lets go of what it kept only until then."""
        for part in self.components.values():
            part.release()

    def close(self) -> None:
        """This engine is replaced (a reset, a rebuild): its deadlines forgotten, so that dropping it frees it at once.
        Its components and their scheduler refer to each other; left so, the whole engine would wait for the cyclic
        collector, which walks every object of it (half a second on the event loop at 100,000 events), or, frozen by
        then (``gc.freeze``), stay in memory for good."""
        self.scheduler.close()
        self.wave_runner.close()

    def deadlines_again(self) -> Heap:
        """Every deadline the state implies, as loading it sets them, in a heap apart from the scheduler's. It only
        reads the state, so a replica about to lead sets them in a thread of its own: a pass over every event and
        machine, seconds at a million, that would hold the event loop."""
        with self.scheduler.set_apart() as heap:
            for part in self.components.values():
                part.reschedule()
        return heap

    def reschedule(self, deadlines: Heap | None = None) -> Heap:
        """Every deadline again from the state (``deadlines``: ``deadlines_again``'s, taken since nothing changed the
        state), as loading it sets them: a replica taking over drops what it held from following. Returns the heap
        replaced, for the caller to free off the event loop."""
        return self.scheduler.adopt(self.deadlines_again() if deadlines is None else deadlines)

    def check_advance(self, to: datetime) -> None:
        """Refuse a move of time as :meth:`advance` would, changing nothing."""
        check_time(to, "the new time")
        if to < self.now:
            raise Conflict(f"time cannot go backwards: now is {self.now.isoformat()}, asked {to.isoformat()}")

    def advance(self, to: datetime) -> list[Change]:
        """Move simulated time to ``to``, applying every deadline due on the way, in order, one step per instant."""
        return self.advance_some(to, None)[0]

    def advance_some(self, to: datetime, budget: int | None) -> tuple[list[Change], bool]:
        """As :meth:`advance`, stopping once the deadlines applied made ``budget`` changes (None: no bound): the
        changes, and whether time reached ``to`` (otherwise it stands at the instant reached, and the rest of the
        move is another call). A move cut in parts makes a step of each part (``Scheduler.run_some``)."""
        self.check_advance(to)
        changes, done = self.scheduler.run_some(to, budget)
        changes.append(TimeMoved(self.now))
        return changes, done
