"""The Compute Engine metadata server of a real server process: Google's Python sample, hanging GETs woken by the
manual clock, headers, listings, recursive and alt, and the refusals."""

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from helpers import Server, forewarn

SAMPLE = Path(__file__).parent.parent / "samples" / "gce_maintenance_event_sample.py"

GCE_FLEET = """
hosts: [{name: host-a}, {name: host-b}]
defaults: {gcp_project: forewarn-demo, gce_zone: europe-west1-b}
gce_instances:
  - name: web-1
    host: host-a
    imds: {address: 127.0.0.40}
  - name: gpu-1
    host: host-b
    machine_type: g2-standard-4
    gpus: {count: 1, type: nvidia-l4}
    imds: {address: 127.0.0.41}
  - name: spot-1
    host: host-b
    scheduling: {provisioning_model: SPOT, instance_termination_action: DELETE}
    imds: {address: 127.0.0.42}
"""
FLAVOR = {"Metadata-Flavor": "Google"}
ADDRESSES = {"web-1": "127.0.0.40", "gpu-1": "127.0.0.41"}


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("gce"), fleet_text=GCE_FLEET) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


def base(server, address="127.0.0.40"):
    return f"http://{address}:{server.imds_port}/computeMetadata/v1/"


def get(server, path, address="127.0.0.40", headers=FLAVOR, **params):
    return requests.get(base(server, address) + path, headers=headers, params=params, timeout=10)


def wait_until(predicate, what, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_googles_sample_waits_sees_the_migration_notice_and_the_end(server, tmp_path):
    """The sample of "Query metadata server for maintenance event notices", unmodified but its metadata host."""
    source = SAMPLE.read_text()
    assert source.count("http://metadata.google.internal") == 1
    script = tmp_path / "sample.py"
    script.write_text(source.replace("http://metadata.google.internal", f"http://127.0.0.40:{server.imds_port}"))
    sample = subprocess.Popen(
        [sys.executable, "-u", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(sample.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        # Its first GET (last_etag 0) returns NONE at once; the second hangs. Having asked, web-1 gets the notice.
        wait_until(lambda: server.get("/v1/gce/instances/web-1")["watched"], "the sample's first request")
        [event] = server.post("/v1/gce/maintenance", {"instances": ["web-1"]}, expect=201).json()
        assert event["kind"] == "MIGRATE_ON_HOST_MAINTENANCE" and event["state"] == "notified"
        wait_until(lambda: "Undergoing host maintenance: MIGRATE_ON_HOST_MAINTENANCE\n" in lines, "the notice")
        assert lines == ["Undergoing host maintenance: MIGRATE_ON_HOST_MAINTENANCE\n"]
        server.post("/v1/clock/next", expect=200)  # the migration starts (60 s later): the value stays
        server.post("/v1/clock/next", expect=200)  # and ends: NONE again
        wait_until(lambda: "Finished host maintenance\n" in lines, "the end of the maintenance")
        assert server.get("/v1/gce/instances/web-1")["host"] == "host-b"
    finally:
        sample.kill()
        sample.wait(10)
    assert sample.returncode is not None


def test_a_hanging_get_answers_on_a_clock_step_and_on_its_timeout(server):
    first = get(server, "instance/maintenance-event")
    assert first.status_code == 200 and first.text == "NONE"
    assert first.headers["Metadata-Flavor"] == "Google" and first.headers["Content-Type"] == "application/text"
    etag = first.headers["ETag"]
    # A stale etag answers at once; the current one hangs until the value changes.
    assert get(server, "instance/maintenance-event", wait_for_change="true", last_etag="0").text == "NONE"
    results = {}

    def wait():
        results["answer"] = get(server, "instance/maintenance-event", wait_for_change="true", last_etag=etag)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()
    server.post("/v1/gce/maintenance", {"instances": ["web-1"], "notice": "10m"}, expect=201)
    time.sleep(0.2)
    assert waiter.is_alive()  # announced ten minutes ahead: upcoming-maintenance changed, maintenance-event did not
    server.post("/v1/clock/next", expect=200)  # 60 s before the start
    waiter.join(10)
    answer = results["answer"]
    assert answer.text == "MIGRATE_ON_HOST_MAINTENANCE" and answer.headers["ETag"] != etag
    # timeout_sec counts on the engine's clock: a manual clock's step past it answers with the value as it is.
    results.clear()
    current = answer.headers["ETag"]

    def wait_with_timeout():
        results["answer"] = get(
            server, "instance/maintenance-event", wait_for_change="true", last_etag=current, timeout_sec="30"
        )

    waiter = threading.Thread(target=wait_with_timeout)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()
    server.advance("31s")  # the migration starts at 60 s: nothing changes for the key, the timeout passes
    waiter.join(10)
    assert results["answer"].text == "MIGRATE_ON_HOST_MAINTENANCE"
    assert results["answer"].headers["ETag"] == current


def test_upcoming_maintenance_then_perform_maintenance(server):
    assert get(server, "instance/upcoming-maintenance").status_code == 404
    server.post("/v1/gce/maintenance", {"instances": ["web-1"], "notice": "7d", "window": "2h"}, expect=201)
    upcoming = get(server, "instance/upcoming-maintenance")
    assert upcoming.status_code == 200
    assert json.loads(upcoming.text) == {
        "can_reschedule": True,
        "latest_window_start_time": "2026-04-27T22:11:58Z",
        "maintenance_status": "PENDING",
        "type": "SCHEDULED",
        "window_end_time": "2026-04-28T00:11:58Z",
        "window_start_time": "2026-04-27T22:11:58Z",
    }
    listing = get(server, "instance/")
    assert "upcoming-maintenance\n" in listing.text and "scheduling/\n" in listing.text
    get(server, "instance/maintenance-event")  # asks once, so the notice is given
    performed = server.post("/v1/gce/instances/web-1/perform-maintenance", expect=200).json()
    assert performed["events"][0]["state"] == "notified"
    assert get(server, "instance/maintenance-event").text == "MIGRATE_ON_HOST_MAINTENANCE"


def test_an_instance_that_never_asked_gets_no_notice(server):
    [event] = server.post("/v1/gce/maintenance", {"instances": ["web-1"]}, expect=201).json()
    assert event["state"] == "ongoing" and event["notice_at"] is None  # "initiates immediately"


def test_terminate_on_host_maintenance_of_a_gpu_instance_and_its_restart(server):
    get(server, "instance/maintenance-event", address="127.0.0.41")
    [event] = server.post("/v1/gce/maintenance", {"instances": ["gpu-1"]}, expect=201).json()
    # The default notice of a GPU instance is its hour: the key changes now, the stop comes an hour later.
    assert event["window_start"] == "2026-04-20T23:11:58Z" and event["announced"] is False
    assert server.get("/v1/gce/instances/gpu-1")["notice_seconds"] == 3600
    assert get(server, "instance/maintenance-event", address="127.0.0.41").text == "TERMINATE_ON_HOST_MAINTENANCE"
    assert server.post("/v1/clock/next", expect=200).json()["now"] == "2026-04-20T23:11:58Z"
    assert server.get("/v1/gce/instances/gpu-1")["status"] == "TERMINATED"
    server.post("/v1/clock/next", expect=200)
    instance = server.get("/v1/gce/instances/gpu-1")
    assert instance["status"] == "RUNNING" and instance["maintenance_event"] == "NONE"


def test_a_hanging_get_on_a_gpu_instance_wakes_an_hour_before_the_start(server):
    """GPU VMs get a 1-hour stopping notice, other VMs 60 seconds ("Handle GPU host maintenance events"). Both
    instances' watchers hang on maintenance-event; a manual clock step wakes each at its own notice."""
    keys = {name: get(server, "instance/maintenance-event", address=address) for name, address in ADDRESSES.items()}
    results = {}

    def wait(name):
        etag = keys[name].headers["ETag"]
        results[name] = get(
            server, "instance/maintenance-event", address=ADDRESSES[name], wait_for_change="true", last_etag=etag
        )

    waiters = {name: threading.Thread(target=wait, args=(name,)) for name in ADDRESSES}
    for waiter in waiters.values():
        waiter.start()
    events = server.post("/v1/gce/maintenance", {"instances": ["web-1", "gpu-1"], "notice": "3h"}, expect=201).json()
    assert {(event["window_start"], event["announced"]) for event in events} == {("2026-04-21T01:11:58Z", True)}
    time.sleep(0.3)
    assert all(waiter.is_alive() for waiter in waiters.values())  # announced: nothing for the key yet
    assert server.post("/v1/clock/next", expect=200).json()["now"] == "2026-04-21T00:11:58Z"  # T-1h
    waiters["gpu-1"].join(10)
    assert results["gpu-1"].text == "TERMINATE_ON_HOST_MAINTENANCE"
    assert results["gpu-1"].headers["ETag"] != keys["gpu-1"].headers["ETag"]
    time.sleep(0.2)
    assert waiters["web-1"].is_alive()  # web-1's notice is 60 s
    assert server.post("/v1/clock/next", expect=200).json()["now"] == "2026-04-21T01:10:58Z"  # T-60s
    waiters["web-1"].join(10)
    assert results["web-1"].text == "MIGRATE_ON_HOST_MAINTENANCE"
    assert server.get("/v1/gce/instances/gpu-1")["status"] == "RUNNING"  # still running: it stops at the start
    assert server.post("/v1/clock/next", expect=200).json()["now"] == "2026-04-21T01:11:58Z"
    assert server.get("/v1/gce/instances/gpu-1")["status"] == "TERMINATED"


def test_spot_preemption(server):
    assert get(server, "instance/preempted", address="127.0.0.42").text == "FALSE"
    server.post("/v1/gce/preempt", {"instances": ["spot-1"]}, expect=200)
    assert get(server, "instance/preempted", address="127.0.0.42").text == "TRUE"
    server.advance("30s")
    instance = server.get("/v1/gce/instances/spot-1")
    assert instance["status"] == "TERMINATED" and instance["deleted"] is True
    refused = server.post("/v1/gce/preempt", {"instances": ["web-1"]})
    assert refused.status_code == 400 and "not a Spot" in refused.text


def test_listings_recursive_alt_and_redirect(server):
    root = get(server, "")
    assert root.text == "instance/\nproject/\n"
    scheduling = get(server, "instance/scheduling/", recursive="true")
    assert scheduling.headers["Content-Type"] == "application/json"
    assert scheduling.json() == {
        "automaticRestart": "TRUE",
        "onHostMaintenance": "MIGRATE",
        "preemptible": "FALSE",
        "provisioningModel": "STANDARD",
    }
    assert get(server, "instance/scheduling/on-host-maintenance").text == "MIGRATE"
    assert get(server, "instance/scheduling/on-host-maintenance", alt="json").text == '"MIGRATE"'
    text = get(server, "instance/scheduling/", recursive="true", alt="text").text
    assert "on-host-maintenance MIGRATE\n" in text
    moved = get(server, "instance/scheduling")
    assert moved.history and moved.history[0].status_code == 301 and moved.url.endswith("/scheduling/")
    everything = get(server, "instance/", recursive="true").json()
    assert everything["maintenanceEvent"] == "NONE" and everything["name"] == "web-1"
    assert get(server, "project/project-id").text == "forewarn-demo"


def test_refusals(server):
    missing = get(server, "instance/maintenance-event", headers={})
    assert missing.status_code == 403 and "Missing Metadata-Flavor:Google header." in missing.text
    assert missing.headers["Metadata-Flavor"] == "Google"
    proxied = get(server, "instance/maintenance-event", headers={**FLAVOR, "X-Forwarded-For": "10.0.0.1"})
    assert proxied.status_code == 403
    assert get(server, "instance/no-such-key").status_code == 404
    assert get(server, "instance/maintenance-event", wait_for_change="true", timeout_sec="soon").status_code == 400
    legacy = requests.get(f"http://127.0.0.40:{server.imds_port}/computeMetadata/v1beta1/instance/id", timeout=10)
    assert legacy.status_code == 404


def test_rescheduling_wakes_a_hanging_get_on_upcoming_maintenance_with_a_new_etag(server):
    server.post(
        "/v1/gce/maintenance", {"instances": ["gpu-1"], "notice": "7d", "window": "2h", "latest": "7d"}, expect=201
    )
    first = get(server, "instance/upcoming-maintenance", address="127.0.0.41")
    assert json.loads(first.text)["latest_window_start_time"] == "2026-05-04T22:11:58Z"
    key = get(server, "instance/maintenance-event", address="127.0.0.41")
    results = {}

    def wait(name, path, etag):
        results[name] = get(server, path, address="127.0.0.41", wait_for_change="true", last_etag=etag)

    waiters = [
        threading.Thread(target=wait, args=("upcoming", "instance/upcoming-maintenance", first.headers["ETag"])),
        threading.Thread(target=wait, args=("key", "instance/maintenance-event", key.headers["ETag"])),
    ]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.3)
    assert all(waiter.is_alive() for waiter in waiters)
    # The user moves it three days later, with the CLI: the upcoming-maintenance watcher wakes, the key's does not.
    moved = forewarn(server, "gce", "reschedule", "gpu-1", "--start", "2026-04-30T22:11:58Z", "--json")
    assert json.loads(moved.stdout)["events"][0]["window_start"] == "2026-04-30T22:11:58Z"
    waiters[0].join(10)
    answer = results["upcoming"]
    assert answer.headers["ETag"] != first.headers["ETag"]
    assert json.loads(answer.text) == {
        "can_reschedule": True,
        "latest_window_start_time": "2026-05-04T22:11:58Z",
        "maintenance_status": "PENDING",
        "type": "SCHEDULED",
        "window_end_time": "2026-05-01T00:11:58Z",
        "window_start_time": "2026-04-30T22:11:58Z",
    }
    time.sleep(0.2)
    assert waiters[1].is_alive()  # maintenance-event is still NONE
    # Nothing happens at the old start; the notice comes an hour before the new one (gpu-1 has a GPU).
    assert server.post("/v1/clock/next", expect=200).json()["now"] == "2026-04-30T21:11:58Z"
    waiters[1].join(10)
    assert results["key"].text == "TERMINATE_ON_HOST_MAINTENANCE"
    late = forewarn(server, "gce", "reschedule", "gpu-1", "--notice", "1d", check=False)
    assert late.returncode == 1 and "no pending maintenance" in late.stderr
    refused = server.post("/v1/gce/instances/web-1/reschedule-maintenance", {"start": "soon"})
    assert refused.status_code == 400


def test_serve_options_set_the_compute_engine_timings(tmp_path):
    """--gce-timing: the notices (60 s, an hour for GPUs) and the other timings are documented values or our
    choices; a user whose instances see others sets them."""
    timings = ["--gce-timing", "notice=2m", "--gce-timing", "gpu-notice=10m", "--gce-timing", "migration=45s"]
    with Server(tmp_path, fleet_text=GCE_FLEET, extra=timings) as server:
        get(server, "instance/maintenance-event")
        [event] = server.post("/v1/gce/maintenance", {"instances": ["web-1"]}, expect=201).json()
        assert event["window_start"] == "2026-04-20T22:13:58Z"  # two minutes after T0
        assert server.get("/v1/gce/instances/gpu-1")["notice_seconds"] == 600
        assert server.post("/v1/clock/next", expect=200).json()["now"] == "2026-04-20T22:13:58Z"  # the migration
        assert server.post("/v1/clock/next", expect=200).json()["now"] == "2026-04-20T22:14:43Z"  # 45 s later, over
    refused = subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", "--gce-timing", "notise=2m"], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "did you mean 'notice'" in refused.stderr


def test_the_control_api_says_how_many_hanging_gets_the_server_holds(server):
    def held():
        return requests.get(f"{server.control}/v1/gce/hanging-gets", timeout=10).json()["held"]

    def hang(name):
        etag = get(server, "instance/maintenance-event", address=ADDRESSES[name]).headers["ETag"]
        sock = socket.create_connection((ADDRESSES[name], server.imds_port), timeout=10)
        path = f"/computeMetadata/v1/instance/maintenance-event?wait_for_change=true&last_etag={etag}"
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: metadata\r\nMetadata-Flavor: Google\r\n\r\n".encode())
        return sock

    assert held() == 0
    waiting = [hang("web-1"), hang("web-1"), hang("gpu-1")]
    try:
        wait_until(lambda: held() == 3, "three hanging GETs held")
        waiting.pop().close()  # a client that hangs up is no longer held
        wait_until(lambda: held() == 2, "the closed one let go")
        server.post("/v1/gce/maintenance", {"instances": ["web-1"], "notice": "60s"}, expect=201)
        for sock in waiting:
            assert b"MIGRATE_ON_HOST_MAINTENANCE" in sock.recv(4096)
        assert held() == 0
    finally:
        for sock in waiting:
            sock.close()


def test_the_first_read_of_maintenance_event_is_answered_once_its_watch_is_durable(tmp_path):
    """An instance's first read of maintenance-event starts its watch (it gets notices from then on), committed before
    the read is answered: a plain GET, and a hanging one, which then waits as any other."""
    with Server(tmp_path, fleet_text=GCE_FLEET) as server:
        instances = {i["name"]: i for i in server.get("/v1/gce/instances")}
        assert not instances["web-1"]["watched"] and not instances["gpu-1"]["watched"]
        sock = socket.create_connection((ADDRESSES["web-1"], server.imds_port), timeout=10)
        path = "/computeMetadata/v1/instance/maintenance-event?wait_for_change=true"
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: metadata\r\nMetadata-Flavor: Google\r\n\r\n".encode())
        with sock:
            wait_until(lambda: server.get("/v1/gce/hanging-gets")["held"] == 1, "the first read held")
            server.post("/v1/gce/maintenance", {"instances": ["web-1"], "notice": "60s"}, expect=201)
            assert b"MIGRATE_ON_HOST_MAINTENANCE" in sock.recv(4096)
        assert get(server, "instance/maintenance-event", address=ADDRESSES["gpu-1"]).text == "NONE"
        server.kill()  # kill -9 right after the answer: no shutdown, no flush
        server.start()
        assert server.get("/v1/gce/instances/gpu-1")["watched"]


def test_clock_moves_say_what_happened_to_compute_engine_instances(server):
    """``clock next`` lists Compute Engine's steps as it lists Azure's (it once said "nothing happened" for each)."""
    get(server, "instance/maintenance-event")  # web-1 has read the key: its maintenance gives a notice at once
    [event] = server.post("/v1/gce/maintenance", {"instances": ["web-1"]}, expect=201).json()
    started = forewarn(server, "clock", "next")
    assert started.returncode == 0, started.stderr
    assert any(
        line.split()[:4] == ["started", event["event_id"], "MIGRATE_ON_HOST_MAINTENANCE", "web-1"]
        for line in started.stdout.splitlines()
    ), started.stdout
    assert any(line.split()[:3] == ["migrated", "web-1", "instance"] for line in started.stdout.splitlines())
    moved = json.loads(forewarn(server, "clock", "next", "--json").stdout)
    kinds = {(change["kind"], change["what"]) for change in moved["changes"]}
    assert ("gce_event", "completed") in kinds, moved["changes"]
