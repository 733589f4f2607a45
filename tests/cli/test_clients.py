"""Real clients against a real server: the Python sample of Microsoft's "Azure Metadata Service: Scheduled Events for
Linux VMs", and the forewarn CLI."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import ROOT, Server, forewarn

SAMPLE = Path(__file__).parent.parent / "samples" / "azure_scheduled_events_sample.py"


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("clients")) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


def test_seed_python_sample_unmodified_but_its_url(server, tmp_path):
    """001's sample approves User events and short Freezes, then logs them once Started."""
    source = SAMPLE.read_text()
    assert source.count("http://169.254.169.254/metadata/scheduledevents") == 1
    script = tmp_path / "sample.py"
    script.write_text(source.replace("http://169.254.169.254", server.imds))
    [reboot] = server.schedule(type="Reboot", vms=["solo"], source="User")
    [freeze] = server.schedule(type="Freeze", vms=["solo"], duration_seconds=5)
    [redeploy] = server.schedule(type="Redeploy", vms=["solo"])
    run = subprocess.run([sys.executable, str(script)], input="1\n1\n2\n", capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "Processed events from document: 4" in run.stdout
    # Two approvals, one POST each: each started its event, 4 -> 5 -> 6; the second poll sees 6.
    assert "Processed events from document: 6" in run.stdout
    # The platform Redeploy needs custom handling: logged while Scheduled, not approved.
    assert run.stdout.count("Host server is undergoing maintenance.") == 2
    assert "Virtual machine is going to be restarted as requested by authorized user." in run.stdout
    assert "memory-preserving Live Migration" in run.stdout
    status = {e["event_id"]: (e["status"], e["approvals"]) for e in server.get("/v1/events")}
    assert status[reboot["event_id"]] == ("Started", ["solo"])
    assert status[freeze["event_id"]] == ("Started", ["solo"])
    assert status[redeploy["event_id"]] == ("Scheduled", [])


def test_cli_drives_the_whole_lifecycle(server):
    scheduled = json.loads(
        forewarn(
            server, "schedule", "--type", "Freeze", "--vm", "WestNO_0,WestNO_1", "--notice", "PT10M", "--json"
        ).stdout
    )
    [event] = scheduled
    assert event["resources"] == ["WestNO_0", "WestNO_1"] and event["not_before"] == "2026-04-20T22:21:58Z"
    table = forewarn(server, "events").stdout
    assert event["event_id"] in table and "Scheduled" in table and "WestNO_0,WestNO_1" in table
    assert "2026-04-20T22:11:58Z" in forewarn(server, "clock", "show").stdout
    forewarn(server, "clock", "advance", "5m")
    after = json.loads(forewarn(server, "clock", "next", "--json").stdout)
    assert after["now"] == "2026-04-20T22:21:58Z"
    assert json.loads(forewarn(server, "events", "--json").stdout)[0]["status"] == "Started"
    forewarn(server, "clock", "set", "2026-04-20T23:00:00Z")
    assert forewarn(server, "events").stdout.strip() == "no events"
    history = json.loads(forewarn(server, "events", "--all", "--json").stdout)
    assert [e["status"] for e in history] == ["Completed"]
    shown = forewarn(server, "show", event["event_id"]).stdout
    assert "scheduled" in shown and "started" in shown and "NotBefore passed" in shown and "completed" in shown
    doc = json.loads(forewarn(server, "document", "WestNO_1").stdout)
    assert doc == {"DocumentIncarnation": 4, "Events": []}


def test_cli_approve_cancel_and_readable_errors(server):
    [event] = json.loads(forewarn(server, "schedule", "--type", "Reboot", "--host", "host-02", "--json").stdout)[:1]
    approved = json.loads(forewarn(server, "approve", event["event_id"], "--json").stdout)
    assert approved[0]["approvals"] == ["control"]
    [other] = json.loads(forewarn(server, "schedule", "--type", "Freeze", "--vm", "myvmss_0", "--json").stdout)
    canceled = json.loads(forewarn(server, "cancel", other["event_id"], "--json").stdout)
    assert canceled[0]["status"] == "Canceled"
    again = forewarn(server, "cancel", other["event_id"], check=False)
    assert again.returncode == 1
    assert again.stderr.startswith("forewarn: event ") and "only Scheduled events can be canceled" in again.stderr
    bad = forewarn(server, "schedule", "--type", "Freeze", "--vm", "ghost", check=False)
    assert bad.returncode == 1 and "no VM named 'ghost'" in bad.stderr
    bad_duration = forewarn(server, "clock", "advance", "soon", check=False)
    assert bad_duration.returncode == 2 and "invalid duration" in bad_duration.stderr
    nowhere = subprocess.run(
        [sys.executable, "-m", "forewarn", "--server", "http://127.0.0.1:9", "events"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    assert nowhere.returncode == 1 and "Is `forewarn serve` running?" in nowhere.stderr


def test_cli_help_teaches(server):
    for args in ([], ["schedule"], ["serve"], ["clock"]):
        out = forewarn(server, *args, "--help").stdout
        assert "Example" in out or "forewarn serve --fleet demo" in out, args


def test_sped_up_clock_starts_events_by_itself(tmp_path):
    """--speed 3600: a wall second is a simulated hour, so a 15-minute notice passes in a quarter second."""
    server = Server(tmp_path, clock="real", extra=["--speed", "3600"]).start()
    try:
        [event] = server.schedule(type="Freeze", vms=["solo"])
        deadline = time.monotonic() + 20
        statuses = set()
        while time.monotonic() < deadline:
            doc = server.scheduled_events().json()
            statuses.update(e["EventStatus"] for e in doc["Events"])
            if not doc["Events"] and "Started" in statuses:
                break
            time.sleep(0.01)  # polling a real clock; nothing here waits for a fixed time
        assert "Started" in statuses and doc["Events"] == []
        final = server.get(f"/v1/events/{event['event_id']}")
        assert final["status"] == "Completed"
    finally:
        server.stop()


def test_server_refuses_bad_fleet_file_with_file_and_line(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("hosts:\n  - name: h1\nvms:\n  - name: a\n    host: h2\n")
    run = subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", "--fleet", str(fleet), "--db", ":memory:"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    assert run.returncode == 1
    assert f"{fleet}:5: vms[0].host: host 'h2' is not declared under hosts" in run.stderr


def test_cli_platform_commands(server):
    vms = forewarn(server, "vm", "list").stdout
    assert "solo" in vms and "running" in vms
    shown = json.loads(forewarn(server, "policy", "set", "solo", "--auto-approve-reboot", "--json").stdout)
    assert shown["auto_approve_reboot"] is True
    restarted = json.loads(forewarn(server, "vm", "restart", "solo", "--json").stdout)
    assert restarted["events"][0]["status"] == "Started" and restarted["vms"][0]["power"] == "rebooting"
    bad = forewarn(server, "policy", "set", "myvmss", "--terminate-notification", "PT1M", check=False)
    assert bad.returncode == 1 and "between PT5M and PT15M" in bad.stderr
    forewarn(server, "policy", "set", "myvmss", "--terminate-notification", "PT5M")
    assert "(not latest)" in forewarn(server, "vm", "show", "myvmss_0").stdout
    forewarn(server, "vmss", "update-instances", "myvmss")
    scaled = json.loads(forewarn(server, "vmss", "scale-in", "myvmss", "--json").stdout)
    assert scaled["events"][0]["type"] == "Terminate" and scaled["events"][0]["resources"] == ["myvmss_2"]
    failed = forewarn(server, "platform", "hardware-failure", "host-01").stdout
    assert "Started" in failed and "Redeploy" in failed
    predicted = json.loads(
        forewarn(server, "platform", "predicted-failure", "host-02", "--notice", "2d", "--json").stdout
    )
    assert predicted["events"][0]["not_before"] == "2026-04-22T22:11:58Z"
    assert "Preempt" in forewarn(server, "platform", "evict", "spotty").stdout
    domain = json.loads(
        forewarn(server, "schedule", "--type", "Freeze", "--set", "myvmss", "--update-domain", "0", "--json").stdout
    )
    assert domain[0]["resources"] == ["myvmss_0"]
