"""``POST /v1/reset``: a server brought back to its start answers as a fresh server on the same fleet does, on every
surface a test reads (IMDS documents, events, journal, clock, incarnations, VM and EC2 states, waves, deliveries,
Resource Graph rows), and the reset is committed: a restart on the same database serves the same."""

from __future__ import annotations

import requests

from helpers import Server, free_port

SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
CENTRAL = "{scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}"
FLEET = f"""
default_vm: solo
defaults: {{subscription: {SUB}, resource_group: contoso-rg, location: westeurope}}
hosts: [{{name: host-01}}, {{name: host-02}}, {{name: host-03}}]
availability_sets: [{{name: ha}}]
vms:
  - {{name: ha-0, host: host-01, availability_set: ha}}
  - {{name: ha-1, host: host-02, availability_set: ha}}
  - {{name: solo, host: host-02, scheduled_events_policy: {CENTRAL}}}
  - {{name: spotty, host: host-03, spot: true}}
scale_sets:
  - {{name: web, instances: 2, hosts: [host-03]}}
ec2_instances:
  - {{id: i-0aaaaaaaaaaaaaaa1, name: db, availability_zone: eu-west-1b}}
  - {{id: i-0aaaaaaaaaaaaaaa2, name: cache, availability_zone: eu-west-1a}}
"""
ARG = "/providers/Microsoft.ResourceGraph/resources"


def snapshot(server: Server) -> dict:
    """What a client can read of the server's state."""
    fleet = server.get("/v1/fleet")
    vm_names = [vm["name"] for vm in fleet["vms"]]
    rows = requests.post(
        f"{server.arm}{ARG}",
        params={"api-version": "2022-10-01"},
        json={"query": "maintenanceresources"},
        timeout=30,
    )
    assert rows.status_code == 200, rows.text
    return {
        "clock": server.get("/v1/clock"),
        "events": server.get("/v1/events", all="true"),
        "journal": server.get("/v1/journal", limit=10_000),
        "scopes": fleet["scopes"],
        "vms": server.get("/v1/vms"),
        "policies": {owner: server.get(f"/v1/policies/{owner}") for owner in ("ha", "solo", "spotty", "web")},
        "documents": {
            name: requests.get(
                f"{server.control}/v1/vms/{name}/scheduledevents", params={"api-version": "2020-07-01"}, timeout=10
            ).content
            for name in vm_names
        },
        "imds": server.scheduled_events().content,
        "ec2_events": server.get("/v1/ec2/events", all="true"),
        "ec2_instances": server.get("/v1/ec2/instances"),
        "waves": server.get("/v1/waves"),
        "deliveries": server.get("/v1/deliveries"),
        "resource_graph": rows.json()["data"],
    }


def change_everything(server: Server) -> None:
    """Events of every source, approvals, a wave, VM moves and deletes, EC2 events and their deliveries, a policy,
    and time."""
    [freeze] = server.schedule(type="Freeze", vms=["ha-0"])
    server.schedule(type="Reboot", vms=["solo"])
    server.post(f"/v1/events/{freeze['event_id']}/approve", expect=200)
    server.post("/v1/waves", {"by": "update-domain", "type": "Reboot"}, expect=201)
    server.post("/v1/platform/hardware-failure", {"hosts": ["host-03"]}, expect=200)
    server.post("/v1/vms/delete", {"vms": ["ha-1"]}, expect=200)
    server.post("/v1/platform/evict", {"vms": ["spotty"]}, expect=200)
    server.post("/v1/ec2/events", {"code": "system-reboot", "instances": ["i-0aaaaaaaaaaaaaaa1"]}, expect=201)
    server.post("/v1/ec2/spot/rebalance", {"instances": ["i-0aaaaaaaaaaaaaaa2"]})
    patched = requests.patch(f"{server.control}/v1/policies/ha", json={"auto_approve_reboot": True}, timeout=10)
    assert patched.status_code == 200, patched.text
    server.advance("20m")
    server.schedule(type="Redeploy", vms=["solo"])


def test_reset_brings_back_what_a_fresh_server_serves_and_is_committed(tmp_path, store_url):
    dead_webhook = f"http://127.0.0.1:{free_port()}/health"  # deliveries wait in the outbox
    server = Server(tmp_path, FLEET, db=store_url, extra=["--health-webhook", dead_webhook]).start()
    try:
        fresh = snapshot(server)
        first_ids = [event["event_id"] for event in server.schedule(type="Freeze", vms=["solo"])]
        server.post("/v1/reset", expect=200)
        assert snapshot(server) == fresh  # even a single event is gone, its incarnation too

        change_everything(server)
        changed = snapshot(server)
        for surface in ("clock", "events", "journal", "scopes", "vms", "policies", "documents", "ec2_events", "waves"):
            assert changed[surface] != fresh[surface], surface
        assert changed["deliveries"] and changed["resource_graph"]

        answer = server.post("/v1/reset", expect=200).json()
        assert answer == fresh["clock"]
        assert snapshot(server) == fresh
        # The same commands give the same events as on the fresh server (same seed, same sequence).
        assert [event["event_id"] for event in server.schedule(type="Freeze", vms=["solo"])] == first_ids
        server.post("/v1/reset", expect=200)
        server.stop()

        again = Server(tmp_path, None, db=server.db, extra=["--health-webhook", dead_webhook]).start()
        try:
            assert snapshot(again) == fresh
        finally:
            again.stop()
    finally:
        server.stop()
