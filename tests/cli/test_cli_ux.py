"""A new user's first hour with the CLI and the control API: what it says, and what it accepts."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
import requests

from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.engine.engine import Engine
from helpers import ROOT, T0, Server, forewarn, free_port, fresh, small_fleet


def _without(args: list[str], option: str) -> list[str]:
    """``args`` less ``option`` and its value."""
    at = args.index(option)
    return args[:at] + args[at + 2 :]


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """One server for the tests that each had their own; ``fresh`` resets it for each."""
    with Server(tmp_path_factory.mktemp("small")) as running:
        yield running


def test_restart_without_clock_keeps_the_stored_manual_clock(tmp_path):
    with Server(tmp_path) as first:
        first.advance("1h")
        before = first.get("/v1/clock")
    assert before["mode"] == "manual"
    again = Server(tmp_path, fleet_text=None, db=first.db)
    again.args = _without(again.args, "--clock")
    with again:
        clock = again.get("/v1/clock")
        assert clock["mode"] == "manual"
        assert clock["now"] == before["now"]
    log = again.log_path.read_text()
    assert "clock: manual, as stored in the database" in log


def test_restart_with_clock_given_changes_it_and_says_so(tmp_path):
    with Server(tmp_path) as first:
        pass
    again = Server(tmp_path, fleet_text=None, db=first.db, clock="real")
    with again:
        assert again.get("/v1/clock")["mode"] == "real"
    assert "clock: real, as given (--clock/--speed); the database had manual" in again.log_path.read_text()


def test_document_prints_the_exact_bytes_imds_serves(small_server):
    with fresh(small_server) as server:
        server.schedule(type="Freeze", vms=["solo"])
        served = server.scheduled_events()  # the shared metadata endpoint answers as the default VM, solo
        run = forewarn(server, "document", "solo", "--raw")
        pretty = forewarn(server, "document", "solo", "--pretty")
    assert served.status_code == 200
    assert run.stdout.encode() == served.content
    assert json.loads(pretty.stdout) == json.loads(served.content)
    assert "\n  " in pretty.stdout


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", "--fleet", "demo", "--db", ":memory:", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )


@pytest.mark.parametrize(
    "option, what",
    [
        ("--port", "control API"),
        ("--imds-port", "metadata endpoint"),
        ("--arm-port", "ARM API"),
        ("--ec2-port", "EC2 API"),
        ("--gce-port", "Compute Engine API"),
    ],
)
def test_a_taken_port_is_named_with_the_option_that_sets_it(option, what):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {name: str(free_port()) for name in ("--port", "--imds-port", "--arm-port", "--ec2-port", "--gce-port")}
        ports[option] = str(port)
        run = _serve(*(item for pair in ports.items() for item in pair))
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith(f"forewarn: cannot listen on 127.0.0.1:{port} for the {what} (set by ")
    assert option in message and "Address already in use" in message


def test_a_port_out_of_range_is_a_usage_error():
    run = _serve("--port", "70000")
    assert run.returncode == 2 and "Traceback" not in run.stderr and "70000" in run.stderr


@pytest.mark.parametrize(
    "option, value, said",
    [
        ("--notice", "Frieze=5m", "unknown event type 'Frieze'; expected one of Freeze, Reboot"),
        ("--notice", "Freeze", "expected TYPE=DURATION, e.g. Freeze=5m; got 'Freeze'"),
        ("--impact-window", "Reboot=soon", "invalid duration 'soon'"),
    ],
)
def test_an_event_type_setting_it_cannot_use_is_a_usage_error_naming_the_option(option, value, said):
    run = _serve("--port", "0", "--imds-port", "0", option, value)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"Error: Invalid value for {option}: {said}" in run.stderr


def test_approve_on_shared_hardware_says_the_other_tenants_must_approve_too(small_server):
    with fresh(small_server) as server:
        events = server.schedule(type="Reboot", hosts=["host-02"])  # WestNO_2, solo and other-tenant: three scopes
        assert len(events) == 3
        mine = next(event for event in events if event["resources"] == ["solo"])
        run = forewarn(server, "approve", mine["event_id"])
        others = [event["event_id"] for event in events if event is not mine]
        assert f"{mine['event_id']}: approved; it starts when every tenant on its host has approved" in run.stdout
        assert "2 approvals still outstanding of 3" in run.stdout
        assert all(event_id in run.stdout for event_id in others)
        assert "NotBefore" in run.stdout
        forewarn(server, "approve", others[0])
        last = forewarn(server, "approve", others[1])
        assert "Started" in last.stdout and "outstanding" not in last.stdout


def test_event_ids_can_be_given_by_an_unambiguous_prefix(small_server):
    with fresh(small_server) as server:
        event_id = server.schedule(type="Freeze", vms=["solo"])[0]["event_id"]
        shown = forewarn(server, "show", event_id[:8].lower())
        assert f"event_id: {event_id}" in shown.stdout
        forewarn(server, "approve", event_id[:6])
        assert server.get(f"/v1/events/{event_id}")["approvals"] == ["control"]
        other = server.schedule(type="Freeze", vms=["WestNO_0"])[0]["event_id"]
        forewarn(server, "cancel", other[:5])
        assert server.get(f"/v1/events/{other}")["status"] == "Canceled"
        unknown = forewarn(server, "cancel", "FFFFFFFF-0000", check=False)
        assert unknown.returncode == 1
        assert "no event whose EventId is or starts with FFFFFFFF-0000" in unknown.stderr
        short = forewarn(server, "show", event_id[:3], check=False)
        assert short.returncode == 1 and "at least 4 characters" in short.stderr


def test_an_ambiguous_event_id_prefix_lists_the_candidates():
    from forewarn.core.errors import Ambiguous

    engine = Engine(small_fleet(), seed="test", now=T0)
    seen: dict[str, str] = {}
    for _ in range(3000):  # 4 hex digits: a clash is expected after a few hundred ids (the birthday bound)
        changes = engine.component(AzureComponent).schedule(
            ScheduleRequest(event_type=EventType.FREEZE, vms=("solo",), notice=timedelta(hours=1))
        )
        event_id = changes[0].event.event_id
        if event_id[:4] in seen:
            break
        seen[event_id[:4]] = event_id
    else:
        pytest.fail("no two EventIds share 4 characters")
    first = seen[event_id[:4]]
    common = next(i for i in range(4, 36) if first[i] != event_id[i])
    with pytest.raises(Ambiguous) as raised:
        engine.component(AzureComponent).resolve_event_id(event_id[:common].lower())
    assert first in str(raised.value) and event_id in str(raised.value) and "give more characters" in str(raised.value)
    assert engine.component(AzureComponent).resolve_event_id(event_id[: common + 1]) == event_id


def test_unknown_names_get_a_did_you_mean(small_server):
    with fresh(small_server) as server:
        for args, suggestion in [
            (("vm", "show", "sollo"), "did you mean 'solo'?"),
            (("schedule", "--type", "Freeze", "--vm", "westno_0"), "'WestNO_0'"),
            (("schedule", "--type", "Reboot", "--host", "host-2"), "'host-02'"),
            (("vmss", "scale-in", "myvmms"), "did you mean 'myvmss'?"),
            (("policy", "show", "westnoo"), "did you mean 'westno'?"),
            (("platform", "hardware-failure", "hots-03"), "'host-03'"),
        ]:
            run = forewarn(server, *args, check=False)
            assert run.returncode == 1, args
            assert suggestion in run.stderr, (args, run.stderr)
            assert len(run.stderr.strip().splitlines()) == 1
        far = forewarn(server, "vm", "show", "zzzzzzzz", check=False)
        assert "did you mean" not in far.stderr
    scenario = subprocess.run(
        [sys.executable, "-m", "forewarn", "scenario", "show", "user-rebot"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    assert scenario.returncode != 0 and "did you mean 'user-reboot'" in scenario.stderr


def test_ec2_api_messages_stay_as_aws_words_them(tmp_path):
    """The suggestion is the control API's: the EC2 Query API keeps AWS's own message."""
    from forewarn.aws.fleet import ec2_fleet
    from forewarn.core.errors import NotFound
    from forewarn.fleet.model import Fleet

    with pytest.raises(NotFound) as raised:
        ec2_fleet(Fleet(hosts=[])).instance("i-0123456789abcdef0")
    assert str(raised.value) == "The instance ID 'i-0123456789abcdef0' does not exist"


CENTRAL_FLEET = """
defaults: {subscription: 6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01, resource_group: contoso-rg}
hosts: [{name: h1}]
vms:
  - name: solo
    host: h1
    scheduled_events_policy: {scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}
"""


def _acknowledge(server: Server, *ids: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forewarn", "acknowledge", "--arm", server.arm, *ids],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )


def test_acknowledge_takes_an_event_id_or_its_prefix(tmp_path):
    with Server(tmp_path, CENTRAL_FLEET) as server:
        first = server.schedule(type="Freeze", vms=["solo"])[0]["event_id"]
        run = _acknowledge(server, first[:8].lower())
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == f"{first.lower()}: Successfully Approved"
        assert server.get(f"/v1/events/{first}")["status"] == "Started"
        second = server.schedule(type="Freeze", vms=["solo"], notice="1h")[0]["event_id"]
        assert _acknowledge(server, second).returncode == 0
        unknown = _acknowledge(server, "ABCDEF01")
        assert unknown.returncode == 1 and "no scheduled event in Resource Graph has this EventId" in unknown.stderr
        junk = _acknowledge(server, "not-an-id")
        assert junk.returncode == 1 and "nor an EventId" in junk.stderr


def test_clock_moves_say_what_happened(small_server):
    with fresh(small_server) as server:
        [event] = server.schedule(type="Freeze", vms=["solo"], notice="5m")
        step = forewarn(server, "clock", "next")
        lines = step.stdout.splitlines()
        assert lines[0].startswith("2026-04-20T22:16:58Z")
        assert any(line.split()[:4] == ["started", event["event_id"], "Freeze", "solo"] for line in lines), step.stdout
        assert any(line.split()[:3] == ["impacted", "solo", "VM"] for line in lines), step.stdout
        moved = json.loads(forewarn(server, "clock", "advance", "1h", "--json").stdout)
        assert moved["now"] == "2026-04-20T23:16:58Z"
        assert {
            "kind": "event",
            "id": event["event_id"],
            "what": "completed",
            "type": "Freeze",
            "status": "Completed",
            "targets": ["solo"],
        }.items() <= next(c for c in moved["changes"] if c["kind"] == "event").items()
        assert moved["changes_total"] == len(moved["changes"]) >= 2
        canceled = server.schedule(type="Reboot", vms=["WestNO_0"], notice="5m")[0]
        server.post(f"/v1/events/{canceled['event_id']}/cancel", expect=200)
        quiet = forewarn(server, "clock", "advance", "10m")
        assert quiet.stdout.splitlines()[1:] == ["  nothing happened"]


SET_FLEET = """
defaults: {subscription: 6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01, resource_group: contoso-rg}
hosts: [{name: h1}, {name: h2}]
availability_sets:
  - {name: db, scheduled_events_policy: {scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}}
vms:
  - {name: db-0, host: h2, availability_set: db}
scale_sets:
  - name: web
    instances: 1
    hosts: [h1]
    scheduled_events_policy: {scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}
"""


def test_resource_graph_and_event_grid_agree_on_resource_type(tmp_path):
    from forewarn.azure.eventgrid.events import scheduled_event_emitted
    from forewarn.azure.eventgrid.settings import EventGridSettings
    from forewarn.fleet.file import parse_fleet

    with Server(tmp_path, SET_FLEET) as server:
        server.schedule(type="Freeze", vms=["web_0"])
        server.schedule(type="Freeze", vms=["db-0"])
        page = requests.post(
            f"{server.arm}/providers/Microsoft.ResourceGraph/resources",
            params={"api-version": "2022-10-01"},
            timeout=10,
            json={"query": "maintenanceresources | project id, properties"},
        ).json()
    rows = {row["properties"]["Resources"][0]: row for row in page["data"]}
    assert "/virtualmachinescalesets/web/" in rows["web_0"]["id"]
    assert "/availabilitysets/db/" in rows["db-0"]["id"]
    fleet = parse_fleet(SET_FLEET, "sets.yaml")
    engine = Engine(fleet, seed="test", now=T0)
    [change] = engine.component(AzureComponent).schedule(ScheduleRequest(event_type=EventType.FREEZE, vms=("web_0",)))[
        :1
    ]
    published = scheduled_event_emitted(
        change.event, azure_fleet(fleet).vms["web_0"], "scheduled", T0, "test", EventGridSettings()
    )
    event_grid_type = published["data"]["resourceInfo"]["properties"]["ResourceType"]
    assert event_grid_type == "VirtualMachine"
    assert {row["properties"]["ResourceType"] for row in rows.values()} == {event_grid_type}


@pytest.mark.parametrize(
    "group, says",
    [
        (
            "ec2",
            "No such command 'schedule': EC2 events are scheduled by `forewarn schedule --code CODE --instance ID`",
        ),
        ("gce", "No such command 'schedule': Compute Engine maintenance is `forewarn gce maintain NAME`"),
    ],
)
def test_a_cloud_groups_schedule_says_where_scheduling_is(group, says):
    run = subprocess.run(
        [sys.executable, "-m", "forewarn", group, "schedule", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    assert run.returncode == 2 and says in run.stderr and "reschedule" not in run.stderr
