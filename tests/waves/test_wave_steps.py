"""A wave's start over a large fleet does not hold the event loop: its first units are scheduled a bounded number of
machines a command (``MACHINES_PER_COMMAND``), each command committed on its own, and a whole-fleet wave by host
finds its hosts without reading every VM's state (bench/stalls.py measures both at up to a million VMs)."""

import json

from fastapi.testclient import TestClient

import forewarn.app.turns as turns_module
import forewarn.control.waves as wave_routes
from forewarn.app.runtime import Maintenance
from forewarn.azure.changes import EventChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventType
from forewarn.control.app import create_control_app
from forewarn.engine.engine import Engine
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml
from forewarn.waves.component import WaveChanged, WaveOrder, WaveRunner, WaveSpec
from helpers import T0, open_store

# 120 VMs on 12 hosts, 10 a host.
GENERATED = fleet_yaml(FleetShape(vms=120, seed="steps"))
WHOLE_FLEET = WaveSpec(EventType.FREEZE, WaveOrder.HOST, concurrency=8)


def engine(text: str = GENERATED) -> Engine:
    return Engine(parse_fleet(text), seed="test", now=T0)


def events_of(changes) -> list[tuple[str, tuple[str, ...]]]:
    return [(c.event.event_id, c.event.resources) for c in changes if isinstance(c, EventChanged)]


def test_a_budgeted_start_stops_after_the_unit_that_reaches_the_budget_and_fill_wave_schedules_the_rest():
    whole = engine()
    at_once = whole.component(WaveRunner).start_wave(WHOLE_FLEET)
    [wave_id] = {c.wave.wave_id for c in at_once if isinstance(c, WaveChanged)}
    expected = whole.component(WaveRunner).wave(wave_id)
    assert len(expected.in_flight) == 8

    stepped = engine()
    runner = stepped.component(WaveRunner)
    first = runner.start_wave(WHOLE_FLEET, budget=25)  # 10 VMs a host: the third host passes 25
    assert len(runner.wave(wave_id).in_flight) == 3 and runner.filling(runner.wave(wave_id))
    commands = [first]
    while more := runner.fill_wave(wave_id, budget=25):
        commands.append(more)
    scheduled = [
        [c for c in command if isinstance(c, WaveChanged) and c.what == "unit-scheduled"] for command in commands
    ]
    assert [len(units) for units in scheduled] == [3, 3, 2]
    assert not runner.filling(runner.wave(wave_id))
    assert runner.wave(wave_id) == expected
    assert [e for command in commands for e in events_of(command)] == events_of(at_once)
    assert runner.fill_wave(wave_id, budget=25) == []


def test_the_hosts_of_a_whole_fleet_wave_leave_out_hosts_whose_vms_are_all_deleted():
    e = engine()
    azure = e.component(AzureComponent)
    on_first = azure.names_on_host("host-00000")
    azure.delete(on_first[:-1])
    runner = e.component(WaveRunner)
    wave = runner.wave(runner.start_wave(WHOLE_FLEET)[0].subject())
    assert wave.units[0] == "host-00000"  # one VM left there
    azure.delete(on_first[-1:] + azure.names_on_host("host-00005"))
    wave = runner.wave(runner.start_wave(WHOLE_FLEET)[0].subject())
    assert "host-00000" not in wave.units and "host-00005" not in wave.units
    assert len(wave.units) == 10


def test_the_hosts_of_a_whole_fleet_wave_after_changes_that_leave_each_host_a_vm_are_the_fleets_in_order():
    e = engine()
    azure = e.component(AzureComponent)
    hosts = tuple(e.fleet.hosts)
    azure.delete(azure.names_on_host("host-00003")[:-1])  # one VM left there
    azure.delete(azure.names_on_host("host-00007")[:1])
    runner = e.component(WaveRunner)
    assert runner.wave(runner.start_wave(WHOLE_FLEET)[0].subject()).units == hosts
    azure.delete(azure.names_on_host("host-00003"))  # its last VM: the host leaves the wave
    assert runner.wave(runner.start_wave(WHOLE_FLEET)[0].subject()).units == tuple(
        host for host in hosts if host != "host-00003"
    )


def test_the_control_api_starts_a_wave_in_several_commits_and_answers_with_all_of_them(store_url, monkeypatch):
    service = Maintenance.open(open_store(store_url), parse_fleet(GENERATED), "manual", 1.0, T0, "seed")
    commands = []
    perform_soon = service.perform_soon

    def counted(command, check=None):
        commands.append(command)
        return perform_soon(command, check)

    monkeypatch.setattr(service, "perform_soon", counted)
    monkeypatch.setattr(wave_routes, "MACHINES_PER_COMMAND", 25)
    try:
        client = TestClient(create_control_app(service))
        response = client.post("/v1/waves", json={"by": "host", "concurrency": 8, "notice": "15m"})
        assert response.status_code == 201, response.text
        body = response.json()
        assert body["scheduled"] == 56 and len(body["wave"]["in_flight"]) == 8  # 7 scopes a host
        assert len(commands) == 5  # the start (one unit), three fills, and the fill that found nothing left
        wave_entries = [entry.kind for entry in service.store.journal() if entry.kind.startswith("wave")]
        assert wave_entries.count("wave unit-scheduled") == 8
    finally:
        service.store.close()


def test_a_budgeted_cancel_cancels_the_rest_with_cancel_more_as_one_cancel_would():
    def started() -> tuple[Engine, str]:
        e = engine()
        changes = e.component(WaveRunner).start_wave(WHOLE_FLEET)
        return e, next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))

    whole, wave_id = started()
    at_once = whole.component(WaveRunner).cancel_wave(wave_id)
    stepped, _ = started()
    runner = stepped.component(WaveRunner)
    commands = [runner.cancel_wave(wave_id, budget=10)]
    while more := runner.cancel_more(wave_id, budget=10):
        commands.append(more)
    assert len(commands) > 2
    assert [e for command in commands for e in events_of(command)] == events_of(at_once)
    assert runner.wave(wave_id) == whole.component(WaveRunner).wave(wave_id)
    assert runner.cancel_more(wave_id, budget=10) == []


def test_the_control_api_cancels_a_wave_in_several_commits_and_answers_with_all_of_them(store_url, monkeypatch):
    service = Maintenance.open(open_store(store_url), parse_fleet(GENERATED), "manual", 1.0, T0, "seed")
    monkeypatch.setattr(wave_routes, "MACHINES_PER_COMMAND", 10)
    try:
        client = TestClient(create_control_app(service))
        wave = client.post("/v1/waves", json={"by": "host", "concurrency": 8, "notice": "15m"}).json()["wave"]
        commits = []
        commit = service.store.commit
        monkeypatch.setattr(service.store, "commit", lambda *a, **k: (commits.append(a[0]), commit(*a, **k)))
        response = client.post(f"/v1/waves/{wave['wave_id']}/cancel")
        assert response.status_code == 200, response.text
        assert response.json()["canceled"] == 56 and response.json()["wave"]["status"] == "canceled"
        assert len(commits) > 2
        azure = service.settled_engine().component(AzureComponent)
        assert not azure.events  # every one ended, so each left memory once its cancel was committed
        listed = client.get("/v1/events", params={"all": "true"}).json()
        assert len(listed) == 56 and {event["status"] for event in listed} == {"Canceled"}
    finally:
        service.store.close()


def test_a_waves_answers_show_its_units_in_flight_a_turn_at_a_time_as_fastapi_would_encode_them(store_url, monkeypatch):
    """A whole-fleet wave over a million VMs has 5,000 units in flight: shown at once, 25 ms of the event loop."""
    service = Maintenance.open(open_store(store_url), parse_fleet(GENERATED), "manual", 1.0, T0, "seed")
    shown_units: list[int] = []
    real_unit_out = wave_routes.unit_out

    def noted(wave, run):
        shown_units.append(run.unit)
        return real_unit_out(wave, run)

    monkeypatch.setattr(wave_routes, "unit_out", noted)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0)  # a turn a unit
    turned = []
    real_next = turns_module.Turns.next

    async def noted_next(self):
        turned.append(len(shown_units))
        await real_next(self)

    monkeypatch.setattr(turns_module.Turns, "next", noted_next)
    try:
        client = TestClient(create_control_app(service))
        started = client.post("/v1/waves", json={"by": "host", "concurrency": 8, "notice": "15m"})
        assert started.status_code == 201, started.text
        assert turned[:8] == list(range(1, 9))  # the loop turned after each unit shown
        wave_id = started.json()["wave"]["wave_id"]
        wave = service.settled_engine().component(WaveRunner).wave(wave_id)
        expected = wave_routes.WaveOut.of(wave)
        assert len(expected.in_flight) == 8
        fastapi_bytes = json.dumps(expected.model_dump(mode="json"), separators=(",", ":")).encode()
        assert client.get(f"/v1/waves/{wave_id}").content == fastapi_bytes
        assert client.get("/v1/waves").content == b"[" + fastapi_bytes + b"]"
        assert started.json()["wave"] == expected.model_dump(mode="json")
    finally:
        service.store.close()
