"""Reads of what the database holds of ended events, at a cost that does not hold the event loop: a whole EventId is
read by the number it gives back, a prefix (which reads every row) only in a thread, and the listings with ended
events (Azure, EC2, Compute Engine) read the database in a thread while the loop answers others."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import forewarn.app.turns as turns_module
from forewarn.app.runtime import Maintenance
from forewarn.aws.component import Ec2Component, Ec2Request
from forewarn.aws.control import routes as ec2_routes
from forewarn.aws.model import Ec2Code
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import SUGGESTED_EVENT_IDS, AzureComponent
from forewarn.azure.control import events as azure_routes
from forewarn.azure.fleet import AzureFleet
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.control import models as control_models
from forewarn.core.errors import Ambiguous, NotFound
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml
from forewarn.gcp.component import GceRequest, GcpComponent
from forewarn.gcp.control import routes as gce_routes
from helpers import T0, open_store

FLEET = """
hosts: [{name: h1}, {name: h2}]
vms:
  - {name: vm-1, host: h1}
  - {name: vm-2, host: h2}
ec2_instances:
  - {id: i-0aaaaaaaaaaaaaaa1, name: db, availability_zone: eu-west-1b}
gce_instances:
  - {name: web-1, host: h1, zone: us-central1-a}
"""


def open_service(url: str) -> Maintenance:
    return Maintenance.open(open_store(url), parse_fleet(FLEET, "three.yaml"), "manual", 1.0, T0, "seed")


def ended_everywhere(service: Maintenance) -> None:
    """An event of each cloud, run to its end (and so out of memory)."""
    azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("vm-1",)))
    service.perform(
        lambda engine: engine.component(Ec2Component).schedule_ec2(
            Ec2Request(Ec2Code.SYSTEM_REBOOT, ("i-0aaaaaaaaaaaaaaa1",))
        )
    )
    service.perform(lambda engine: engine.component(GcpComponent).schedule_gce(GceRequest(("web-1",))))
    while service.settled_engine().next_deadline() is not None:
        service.step_clock()


class SpiedReads:
    """The store's ``read`` (or another of its reads), noting each call's first argument and the thread it ran in;
    ``hold`` keeps the calls waiting until ``release`` is set."""

    def __init__(self, service: Maintenance, hold: bool = False, method: str = "read"):
        self.real = getattr(service.store, method)
        self.queries: list[tuple[str, str]] = []
        self.reading, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()
        setattr(service.store, method, self)

    def __call__(self, first, *rest, **named):
        self.queries.append((first, threading.current_thread().name))
        self.reading.set()
        assert self.release.wait(10)
        return self.real(first, *rest, **named)


def test_a_whole_event_id_is_read_by_its_number_and_a_prefix_from_every_row(store_url):
    service = open_service(store_url)
    ended_everywhere(service)
    component = service.settled_engine().component(AzureComponent)
    [event] = component.all_events()
    assert event.status is EventStatus.COMPLETED and event.event_id not in component.events
    reads = SpiedReads(service)
    assert component.event(event.event_id.lower()) == event
    assert reads.queries and all("substr" not in sql for sql, _ in reads.queries)  # read by its number
    for length in (4, 8, 9, 13, 14, 20, 35):  # 9, 14: ending in a hyphen
        assert component.resolve_event_id(event.event_id[:length].lower()) == event.event_id

    [live] = azure_commands.schedule(service, ScheduleRequest(EventType.REBOOT, vms=("vm-2",), notice=None))
    assert component.resolve_event_id(live.event_id[:9]) == live.event_id  # a live one: the database has it too

    reads.queries.clear()
    with pytest.raises(NotFound, match="no event whose EventId is or starts with"):
        component.resolve_event_id("00000000-0000-4000-8000-000000000000")
    assert reads.queries and [sql for sql, _ in reads.queries if "substr" in sql] == []  # only the id itself
    reads.queries.clear()
    with pytest.raises(NotFound):
        component.resolve_event_id("ZZZZ")  # not an EventId's characters: no read at all
    assert reads.queries == []
    service.store.close()


def test_a_prefix_is_read_in_a_thread_while_the_loop_answers(tmp_path):
    """No index holds the EventIds (the events are keyed by number): a prefix reads every row, a third of a
    second at a million events, which the control API's routes read off the event loop."""
    service = open_service(str(tmp_path / "store.db"))
    ended_everywhere(service)
    [event] = service.settled_engine().component(AzureComponent).all_events()
    reads = SpiedReads(service, hold=True)

    async def answered() -> Any:
        answer = asyncio.ensure_future(azure_routes.get_event(service, event.event_id[:8]))
        assert await asyncio.to_thread(reads.reading.wait, 10)
        await asyncio.sleep(0.05)  # the loop runs others while the read is held
        assert not answer.done()
        reads.release.set()
        return await answer

    assert asyncio.run(answered()).event_id == event.event_id
    prefix_reads = [thread for sql, thread in reads.queries if "substr" in sql]
    assert prefix_reads and threading.main_thread().name not in prefix_reads
    service.store.close()


def azure_journal(service: Maintenance, all: bool) -> Awaitable[Any]:
    [event] = service.settled_engine().component(AzureComponent).all_events()
    return azure_routes.event_journal(service, event.event_id)


# Each a route's function, called with (service, all=True), and the store's read it makes
READS: dict[str, tuple[Callable[..., Awaitable[Any]], str]] = {
    "azure": (azure_routes.list_events, "read"),
    "ec2": (ec2_routes.events, "read"),
    "gce": (gce_routes.events, "read"),
    "azure journal": (azure_journal, "journal"),
}


@pytest.mark.parametrize("route", list(READS))
def test_a_read_of_ended_events_runs_in_a_thread_while_the_loop_answers(tmp_path, route):
    service = open_service(str(tmp_path / "store.db"))
    ended_everywhere(service)
    call, method = READS[route]
    reads = SpiedReads(service, hold=True, method=method)

    async def answered() -> Any:
        answer = asyncio.ensure_future(call(service, all=True))
        assert await asyncio.to_thread(reads.reading.wait, 10)
        await asyncio.sleep(0.05)  # the loop runs others while the read is held
        assert not answer.done()
        reads.release.set()
        return await answer

    answer = asyncio.run(answered())
    if route == "azure journal":
        assert [entry["what"] for entry in answer][-1] == "completed"
    else:
        [listed] = json.loads(answer.body)
        assert listed["status" if route == "azure" else "state"].lower() == "completed"
    assert reads.queries and all(thread != threading.main_thread().name for _, thread in reads.queries)
    service.store.close()


def test_a_mistyped_event_id_is_compared_with_memorys_only_while_they_are_few():
    """A "did you mean" compares the name with each known one (difflib): over 20,000 EventIds that held the event
    loop 30 ms and more at 100,000 VMs, 160 ms at a million."""
    fleet = parse_fleet(fleet_yaml(FleetShape(vms=SUGGESTED_EVENT_IDS + 1, seed="few")), "generated.yaml")
    service = Maintenance.open(open_store(":memory:"), fleet, "manual", 1.0, T0, "seed")
    names = sorted(fleet.part("azure", AzureFleet).vms)
    [first] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=(names[0],)))
    component = service.settled_engine().component(AzureComponent)
    typo = first.event_id[:-1] + ("0" if first.event_id[-1] != "0" else "1")
    with pytest.raises(NotFound) as few:
        component.resolve_event_id(typo)
    assert first.event_id in few.value.known

    azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=tuple(names[1:])))
    with pytest.raises(NotFound) as many:
        service.settled_engine().component(AzureComponent).event(typo)
    assert list(many.value.known) == []
    service.store.close()


def test_an_ambiguous_prefix_is_found_in_the_database_live_and_ended_events_alike():
    service = open_service(":memory:")
    seen: dict[str, str] = {}
    for _ in range(3000):  # 4 hex digits: a clash is expected after a few hundred ids (the birthday bound)
        [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("vm-1",), notice=None))
        if event.event_id[:4] in seen:
            break
        seen[event.event_id[:4]] = event.event_id
    else:
        pytest.fail("no two EventIds share 4 characters")
    first = seen[event.event_id[:4]]
    azure_commands.cancel(service, first)  # ended: only the database holds it now
    component = service.settled_engine().component(AzureComponent)
    assert first not in component.events
    with pytest.raises(Ambiguous) as raised:
        component.resolve_event_id(event.event_id[:4])
    assert first in str(raised.value) and event.event_id in str(raised.value)
    service.store.close()


LISTINGS = {"azure": azure_routes, "ec2": ec2_routes, "gce": gce_routes}


@pytest.mark.parametrize("route", list(LISTINGS))
def test_the_events_a_listing_decoded_are_let_go_of_a_slice_a_turn_of_the_loop(tmp_path, monkeypatch, route):
    # Dropped at once, 300,000 decoded events hold the loop 74 ms where the answer's list loses its last reference.
    service = open_service(str(tmp_path / "store.db"))
    ended_everywhere(service)
    ended_everywhere(service)
    module = LISTINGS[route]
    given: list[list] = []
    real_json_array = module.json_array

    async def noted(items, *rest, **named):
        given.append(items)
        return await real_json_array(items, *rest, **named)

    monkeypatch.setattr(module, "json_array", noted)
    monkeypatch.setattr(control_models, "LOOKED_EVERY", 1)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0)
    seen: list[int] = []

    async def listed() -> bytes:
        answer = asyncio.ensure_future(READS[route][0](service, all=True))
        while not answer.done():
            seen.append(len(given[0]) if given else -1)
            await asyncio.sleep(0)
        return b"".join([part async for part in answer.result().body_iterator])  # an event a part, a turn each

    body = asyncio.run(listed())
    assert [event["status" if route == "azure" else "state"].lower() for event in json.loads(body)] == [
        "completed",
        "completed",
    ]
    assert given[0] == []  # emptied by the route, not left whole to go when the answer does
    assert 1 in seen  # one of the two events gone, the other not yet: the loop turned between them
    service.store.close()
