"""The clouds' control routes are declared once, at module level, and shared by every control app of a process: each
request is answered from the service of the app it reached (control/service.py), and Azure's document route exists
only in an app that serves Azure's IMDS."""

from __future__ import annotations

import sys
import threading

from fastapi.testclient import TestClient

from forewarn.app.runtime import Maintenance
from forewarn.control.app import build_routes, create_control_app
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


class SchemaBuilding:
    """Counts the calls of pydantic's schema-generating functions in every thread started, and this one, while it is
    entered (the test client's thread is started when the client is entered)."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, frame, event, _) -> None:
        if event == "call" and frame.f_code.co_filename.endswith("_generate_schema.py"):
            self.calls += 1

    def __enter__(self) -> SchemaBuilding:
        threading.setprofile(self.count)
        sys.setprofile(self.count)
        return self

    def __exit__(self, *_) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def test_a_server_builds_its_routes_before_the_first_request_so_that_none_holds_the_loop_for_it(tmp_path):
    """A first request that reached a router FastAPI had not built built it, in one turn of the event loop: 14 ms for
    the largest, 50 ms for all (``build_routes``, called by the composition root before the server serves). The
    first app is asked first: the routes' own state, shared by the apps of a process, is built once."""
    service = service_of(tmp_path, "first", "vm-a", "i-0a1b2c3d4e5f60718", "gce-a")
    try:
        unbuilt, built = create_control_app(service), create_control_app(service)
        paths = ("/v1/waves", "/v1/vms", "/v1/clock", "/v1/ec2/instances", "/v1/gce/instances")
        for app in (unbuilt, built):
            if app is built:
                build_routes(built.router.routes)
            with SchemaBuilding() as building, TestClient(app) as client:
                calls = []
                for path in paths:  # the waves' router is the last: its request passes every other router
                    building.calls = 0
                    answer = client.get(path)
                    assert answer.status_code == 200, answer.text
                    calls.append(building.calls)
            if app is unbuilt:
                assert calls[0] > 0, calls
            else:
                assert calls == [0] * len(paths)
    finally:
        service.store.close()
