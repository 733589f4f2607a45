"""A schedule over many hosts is made a bounded number of machines a command (``azure_commands.MACHINES_PER_COMMAND``),
each committed on its own, the whole request checked first; the answer lists every event, encoded and sent a turn of the event
loop at a time (``control/models.py``'s ``json_array``), byte for byte as FastAPI encodes the list."""

from __future__ import annotations

import requests
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

import forewarn.app.turns as turns_module
import forewarn.azure.commands as azure_commands
from forewarn.app.runtime import Maintenance
from forewarn.azure.component import AzureComponent
from forewarn.azure.views import EventOut
from forewarn.control.app import create_control_app
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml
from helpers import T0, Server, open_store

# 120 VMs on 12 hosts, 10 a host.
GENERATED = fleet_yaml(FleetShape(vms=120, seed="schedule"))


def served(store_url) -> tuple[Maintenance, TestClient]:
    service = Maintenance.open(open_store(store_url), parse_fleet(GENERATED), "manual", 1.0, T0, "seed")
    return service, TestClient(create_control_app(service))


def test_a_schedule_over_many_hosts_is_committed_in_parts_and_answered_with_every_event(store_url, monkeypatch):
    service, client = served(store_url)
    monkeypatch.setattr(azure_commands, "MACHINES_PER_COMMAND", 25)
    monkeypatch.setattr(turns_module, "TURN_SECONDS", 0)  # an event a turn, and a part
    commits = []
    commit = service.store.commit
    monkeypatch.setattr(service.store, "commit", lambda *a, **k: (commits.append(a[0]), commit(*a, **k)))
    try:
        hosts = list(service.settled_engine().fleet.hosts)
        response = client.post("/v1/events", json={"type": "Freeze", "hosts": hosts, "notice": "15m"})
        assert response.status_code == 201, response.text
        azure = service.settled_engine().component(AzureComponent)
        events = sorted(azure.events.values(), key=lambda event: event.seq)
        # What FastAPI's own encoding of the route's response_model gives:
        assert response.content == TypeAdapter(list[EventOut]).dump_json([EventOut.of(e) for e in events])
        # sent part by part, with the whole answer's length (not chunked)
        assert response.headers["content-length"] == str(len(response.content))
        assert "transfer-encoding" not in response.headers
        assert len(commits) == 4  # 12 hosts of 10 VMs, a command as soon as 25 are reached
        assert len(azure.operations) == 12  # a host is one operation, whichever command scheduled it
        assert len({event.not_before for event in events}) == 1
        assert sum(len(event.resources) for event in events) == 120
    finally:
        service.store.close()


def test_a_schedule_naming_an_unknown_host_is_refused_before_any_part_is_made(store_url, monkeypatch):
    service, client = served(store_url)
    monkeypatch.setattr(azure_commands, "MACHINES_PER_COMMAND", 25)
    try:
        hosts = [*service.settled_engine().fleet.hosts, "no-such-host"]
        response = client.post("/v1/events", json={"type": "Freeze", "hosts": hosts})
        assert response.status_code == 404, response.text
        assert service.settled_engine().component(AzureComponent).events == {}
    finally:
        service.store.close()


def test_a_long_answer_reaches_a_real_client_whole_with_its_length(tmp_path):
    """800 VMs' events, tens of milliseconds of encoding: several turns of the loop, sent as parts by the server's own
    HTTP stack."""
    fleet = fleet_yaml(FleetShape(vms=800, seed="long-answer"))
    with Server(tmp_path, fleet_text=fleet) as server:
        hosts = sorted({machine["host"] for machine in server.get("/v1/fleet/machines")})
        response = requests.post(f"{server.control}/v1/events", json={"type": "Freeze", "hosts": hosts}, timeout=30)
        assert response.status_code == 201, response.text
        assert response.headers["content-length"] == str(len(response.content))
        assert "transfer-encoding" not in response.headers
        events = response.json()
        assert sum(len(event["resources"]) for event in events) == 800
