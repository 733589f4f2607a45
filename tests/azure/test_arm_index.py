"""ARM's index of the fleet (``azure/arm/resources.py``) is built on the first ARM request a slice of VMs at a time, the
event loop answering others between slices, and is the same index as one built at once; a listing reads its
resource group's entries only."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import TypeVar

import forewarn.app.turns as turns_module
import forewarn.azure.arm.resources as arm_resources
from forewarn.app.runtime import Maintenance
from forewarn.azure.arm.resources import ComputeFleet, ComputeResources
from forewarn.azure.fleet import azure_fleet
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml
from helpers import T0, open_store

GENERATED = fleet_yaml(FleetShape(vms=300, seed="arm"))
T = TypeVar("T")


def counting_turns(work: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """What ``work()`` gave, and how many turns another task of the event loop had while it ran."""
    turns = 0

    async def run() -> T:
        async def count() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        counter = asyncio.ensure_future(count())
        try:
            return await work()
        finally:
            counter.cancel()

    return asyncio.run(run()), turns


def test_the_index_built_in_slices_is_the_index_built_at_once_and_the_loop_runs_between_slices(tmp_path, monkeypatch):
    service = Maintenance.open(open_store(str(tmp_path / "a.db")), parse_fleet(GENERATED), "manual", 1.0, T0, "seed")
    monkeypatch.setattr(arm_resources, "INDEXED_PER_LOOK", 7)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0)  # a turn at every look at the clock
    resources = ComputeResources(service)
    _, turns = counting_turns(lambda: asyncio.gather(resources.ready(), resources.ready()))  # one build for two
    whole = ComputeFleet(azure_fleet(service.settled_engine().fleet).vms.values())
    built = resources.fleet
    for name in ("subscriptions", "groups", "vms", "avsets", "scale_sets"):
        assert getattr(built, name) == getattr(whole, name), name
        assert list(getattr(built, name)) == list(getattr(whole, name)), name  # in the same order
    assert turns > 10  # the loop ran while the index was being built
    vms = azure_fleet(service.settled_engine().fleet).vms.values()
    for (sub, group), named in whole.vms.items():  # a group's VMs by lowered name, in fleet order
        in_group = [vm for vm in vms if (vm.subscription_id.lower(), vm.resource_group.lower()) == (sub, group)]
        assert list(named.values()) == [vm for vm in in_group if vm.scale_set is None]
        assert all(whole.vm((sub, group), vm.name.upper()) is vm for vm in named.values())
    assert sum(map(len, whole.vms.values())) == sum(vm.scale_set is None for vm in vms)
    service.store.close()


def test_the_index_built_is_frozen_so_that_the_collector_does_not_walk_it_again(tmp_path, monkeypatch):
    """What is indexed lives as long as the process: the cyclic collector's generations do not hold it (a million
    VMs' index half built, walked by the collections its own building set off, held the loop for 40 ms)."""
    service = Maintenance.open(open_store(str(tmp_path / "a.db")), parse_fleet(GENERATED), "manual", 1.0, T0, "seed")
    monkeypatch.setattr(arm_resources, "INDEXED_PER_LOOK", 7)
    resources = ComputeResources(service)
    try:
        asyncio.run(resources.ready())
        built = resources.fleet
        walked = {id(found) for found in gc.get_objects()}  # every generation's objects; the frozen ones are in none
        some_group = next(iter(built.vms.values()))
        assert gc.is_tracked(built.vms) and gc.is_tracked(some_group)
        assert id(built.vms) not in walked and id(some_group) not in walked
    finally:
        gc.unfreeze()  # this test process's objects back in the collector's generations
        service.store.close()


def test_a_listing_is_built_a_turn_at_a_time_leaving_out_what_is_not_there(monkeypatch):
    """A resource group of a million-VM fleet lists hundreds of VMs, tens of microseconds each (``listed``)."""
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0)  # a turn an item
    bodies, turns = counting_turns(lambda: arm_resources.listed(range(10), lambda n: None if n % 3 else {"n": n}))
    assert bodies == [{"n": n} for n in (0, 3, 6, 9)]
    assert turns >= 10
