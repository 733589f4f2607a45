"""What a clock move answers of its changes (``control/models.py``'s ``changes_out``): the first
``MAX_LISTED_CHANGES`` reported one by one, and a total that counts every change worth a line, the ones past the
listed counted by their kind and ``what`` (bookkeeping, such as a Compute Engine instance's metadata being read, is
not counted), the event loop answering others between turns (``app/turns.py``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import forewarn.app.turns as turns_module
import forewarn.control.models as control_models
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.control.models import change_out, changes_out, let_go
from forewarn.engine.engine import Engine
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml
from forewarn.gcp.changes import GceStateChanged
from forewarn.gcp.model import GceState, InstanceStatus, OnHostMaintenance
from helpers import T0


def a_step_of_changes() -> list:
    engine = Engine(parse_fleet(fleet_yaml(FleetShape(vms=120, seed="out"))), seed="test", now=T0)
    azure = engine.component(AzureComponent)
    scheduled = azure.schedule(ScheduleRequest(EventType.FREEZE, hosts=tuple(engine.fleet.hosts)))
    state = GceState("gce-1", InstanceStatus.RUNNING, "host-00000", OnHostMaintenance.MIGRATE, True, T0)
    watched = [GceStateChanged(state, "watched", "read"), GceStateChanged(state, "migrated", "maintenance")]
    return scheduled + watched * 3 + engine.advance(T0 + timedelta(hours=1))


def test_the_total_counts_every_change_worth_a_line_past_the_listed_ones(monkeypatch):
    changes = a_step_of_changes()
    reported = [out for out in map(change_out, changes) if out is not None]
    monkeypatch.setattr(control_models, "MAX_LISTED_CHANGES", 5)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0)  # a turn at every look at the clock
    listed, total = asyncio.run(changes_out(changes))
    assert listed == reported[:5]
    assert total == len(reported) > 100


def test_an_answer_lets_go_of_its_changes_a_slice_a_turn_the_loop_running_between_slices(monkeypatch):
    changes = a_step_of_changes()
    count = len(changes)
    monkeypatch.setattr(control_models, "LOOKED_EVERY", 7)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0)
    seen: list[int] = []  # how many changes were left at each turn of another task

    async def let_go_and_watch() -> None:
        async def watch() -> None:
            while True:
                seen.append(len(changes))
                await asyncio.sleep(0)

        watcher = asyncio.ensure_future(watch())
        await let_go(changes)
        watcher.cancel()

    asyncio.run(let_go_and_watch())
    assert changes == [] and count > 100
    assert all(0 <= left - after <= 7 for left, after in zip(seen, seen[1:]))  # never more than a slice a turn
    assert len([left for left in seen if 0 < left < count]) >= count // 7 - 1


def test_the_loop_runs_between_slices_of_reports_and_of_counted_changes(monkeypatch):
    changes = a_step_of_changes()
    monkeypatch.setattr(control_models, "MAX_LISTED_CHANGES", 30)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0)
    monkeypatch.setattr(control_models, "LOOKED_EVERY", 1_000_000)  # turns after reports only
    turns: list[int] = []  # the reports made by each turn of another task

    async def count_and_watch() -> tuple[list, int]:
        async def watch() -> None:
            while True:
                turns.append(1)
                await asyncio.sleep(0)

        watcher = asyncio.ensure_future(watch())
        counted = await changes_out(changes)
        watcher.cancel()
        return counted

    listed, _ = asyncio.run(count_and_watch())
    assert len(listed) == 30 and len(turns) >= 30
