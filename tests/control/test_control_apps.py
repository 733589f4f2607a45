"""The clouds' control routes are declared once, at module level, and shared by every control app of a process: each
request is answered from the service of the app it reached (control/service.py), and Azure's document route exists
only in an app that serves Azure's IMDS."""

from __future__ import annotations

from fastapi.testclient import TestClient

from forewarn.app.runtime import Maintenance
from forewarn.control.app import create_control_app
from forewarn.fleet.file import parse_fleet
from helpers import T0, open_store

FLEET = """
hosts: [{{name: h1}}]
vms:
  - {{name: {vm}, host: h1}}
ec2_instances:
  - {{id: {ec2}, instance_type: m5.large, availability_zone: us-east-1a, host: h1}}
gce_instances:
  - {{name: {gce}, zone: us-central1-a, host: h1}}
"""


def service_of(tmp_path, name: str, vm: str, ec2: str, gce: str) -> Maintenance:
    fleet = parse_fleet(FLEET.format(vm=vm, ec2=ec2, gce=gce))
    return Maintenance.open(open_store(str(tmp_path / f"{name}.db")), fleet, "manual", 1.0, T0, "seed")


def test_two_apps_in_one_process_answer_each_from_its_own_service(tmp_path):
    first = service_of(tmp_path, "first", "vm-a", "i-0a1b2c3d4e5f60718", "gce-a")
    second = service_of(tmp_path, "second", "vm-b", "i-0f1e2d3c4b5a69788", "gce-b")
    try:
        one, two = TestClient(create_control_app(first)), TestClient(create_control_app(second))
        for client, vm, ec2, gce in (
            (one, "vm-a", "i-0a1b2c3d4e5f60718", "gce-a"),
            (two, "vm-b", "i-0f1e2d3c4b5a69788", "gce-b"),
        ):
            assert [state["name"] for state in client.get("/v1/vms").json()] == [vm]
            assert [instance["instance_id"] for instance in client.get("/v1/ec2/instances").json()] == [ec2]
            assert [instance["name"] for instance in client.get("/v1/gce/instances").json()] == [gce]
            scheduled = client.post("/v1/events", json={"type": "Freeze", "vms": [vm]})
            assert scheduled.status_code == 201 and scheduled.json()[0]["resources"] == [vm], scheduled.text
        assert len(one.get("/v1/events").json()) == len(two.get("/v1/events").json()) == 1
        # No metadata surface given: neither Azure's document route nor its IMDS settings.
        assert one.get("/v1/vms/vm-a/scheduledevents").status_code == 404
        assert one.get("/v1/imds/settings").status_code == 404
    finally:
        first.store.close()
        second.store.close()
