"""forewarn-agent against a real forewarn: the agent and the server are real processes, the hooks real commands.

Each cloud's path (notice → drain → approval where the cloud takes one → restore), Azure's rules for events that
name other VMs or several VMs, and a kill -9 in the middle of a drain."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import requests

from agent_helpers import AGENT_SOURCE, AgentProcess, wait_for
from forewarn.scenarios.testnet import loopback_address
from helpers import Server, forewarn

WEB0, WEB1, SOLO = (loopback_address(40, n) for n in (10, 11, 12))
ORDERS, SPOT = loopback_address(40, 20), loopback_address(40, 21)
GWEB, GSPOT = loopback_address(40, 30), loopback_address(40, 31)
FLEET = f"""
hosts: [{{name: host-01}}, {{name: host-02}}]
availability_sets: [{{name: web}}]
vms:
  - {{name: web-0, host: host-01, availability_set: web, imds: {{address: {WEB0}}}}}
  - {{name: web-1, host: host-01, availability_set: web, imds: {{address: {WEB1}}}}}
  - {{name: solo, host: host-02, imds: {{address: {SOLO}}}}}
ec2_instances:
  - {{id: i-0a1b2c3d4e5f60718, name: orders-db, host: host-01, imds: {{address: {ORDERS}}}}}
  - {{id: i-0f1e2d3c4b5a69788, name: batch, host: host-02, spot: true, imds: {{address: {SPOT}}}}}
gce_instances:
  - {{name: gweb-1, host: host-02, imds: {{address: {GWEB}}}}}
  - {{name: gspot-1, host: host-02, scheduling: {{provisioning_model: SPOT}}, imds: {{address: {GSPOT}}}}}
"""


@pytest.fixture
def server(tmp_path):
    # The simulated clock starts months before the wall's time: the agent reads the cloud's time off the metadata
    # service's Date header, so the time an event leaves is the simulated one.
    with Server(tmp_path, fleet_text=FLEET) as running:
        yield running


@pytest.fixture
def agents():
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        agent.kill()


def endpoint(server: Server, address: str) -> str:
    return f"http://{address}:{server.imds_port}"


def agent(agents, tmp_path, server, name, address, *args, **options) -> AgentProcess:
    process = AgentProcess(tmp_path, name, endpoint(server, address), *args, **options)
    agents.append(process)
    return process.start()


def azure_events(server) -> dict[str, dict]:
    return {event["event_id"]: event for event in requests.get(server.control + "/v1/events").json()}


def schedule(server, *args) -> list[dict]:
    return json.loads(forewarn(server, "schedule", *args, "--json").stdout)


# ------------------------------------------------------------------------------------------------------- Azure
def test_azure_drains_approves_and_restores_its_own_event(server, agents, tmp_path):
    solo = agent(agents, tmp_path, server, "solo", SOLO)
    [event] = schedule(server, "--type", "Reboot", "--vm", "solo")
    wait_for(lambda: azure_events(server)[event["event_id"]]["status"] == "Started", "the approval")
    assert solo.phases() == [("drain", "Reboot")]
    drain = solo.hooks()[0]
    assert drain["stdin"]["event"]["resources"] == ["solo"] and drain["env"]["machine"] == "solo"
    assert int(drain["env"]["seconds_left"]) > 800  # 15 minutes of notice, less the hook's own start
    forewarn(server, "clock", "advance", "1h")
    wait_for(lambda: ("ended", "Reboot") in solo.phases(), "the restore")


def test_azure_leaves_alone_an_event_that_names_only_another_vm(server, agents, tmp_path):
    """web-0 sees web-1's event (one availability set, one document) but it is not its own."""
    web0 = agent(agents, tmp_path, server, "web-0", WEB0)
    [event] = schedule(server, "--type", "Freeze", "--vm", "web-1")
    polls = web0.polls()
    wait_for(lambda: web0.polls() >= polls + 3, "three more polls")
    assert web0.hooks() == [] and azure_events(server)[event["event_id"]]["status"] == "Scheduled"


def test_azure_shared_event_is_approved_only_once_every_named_vm_is_drained(server, agents, tmp_path):
    """ "Acknowledging an event allows the event to proceed for all Resources in the event, not just the VM that
    acknowledges" (Scheduled Events for Linux VMs): web-0 drains at once and waits for web-1's agent."""
    hold = tmp_path / "web-1.hold"
    hold.touch()
    web0 = AgentProcess(tmp_path, "web-0", endpoint(server, WEB0))
    web1 = AgentProcess(tmp_path, "web-1", endpoint(server, WEB1), env={"FOREWARN_TEST_HOLD": str(hold)})
    agents += [web0, web1]
    web0.start("--peer", f"web-1={web1.url}")
    web1.start("--peer", f"web-0={web0.url}")
    [event] = schedule(server, "--type", "Freeze", "--vm", "web-0,web-1")
    assert sorted(event["resources"]) == ["web-0", "web-1"]
    wait_for(lambda: web0.drained(event["event_id"]), "web-0's drain")
    wait_for(lambda: web1.hooks(), "web-1's drain to start")
    polls = web0.polls()
    wait_for(lambda: web0.polls() >= polls + 3, "three more polls of web-0")
    assert azure_events(server)[event["event_id"]]["status"] == "Scheduled"  # web-1 is still draining
    hold.unlink()
    wait_for(lambda: azure_events(server)[event["event_id"]]["status"] == "Started", "the approval")


def test_one_peers_list_for_every_vm_each_agent_listens_at_its_own_entry(server, agents, tmp_path):
    """The same settings on each VM: the peers list names every agent, this one too, and no --listen is given; each
    agent serves where the list says the others will ask it, so the shared event is approved once both drained."""
    web0 = AgentProcess(tmp_path, "web-0", endpoint(server, WEB0), listen=False)
    web1 = AgentProcess(tmp_path, "web-1", endpoint(server, WEB1), listen=False)
    agents += [web0, web1]
    peers = ["--peer", f"web-0={web0.url}", "--peer", f"web-1={web1.url}"]
    web0.start(*peers)
    web1.start(*peers)
    [event] = schedule(server, "--type", "Freeze", "--vm", "web-0,web-1")
    wait_for(lambda: azure_events(server)[event["event_id"]]["status"] == "Started", "the approval")
    assert web0.drained(event["event_id"]) and web1.drained(event["event_id"])


def test_a_kill_in_the_middle_of_a_drain_resumes_and_a_finished_drain_does_not_run_again(server, agents, tmp_path):
    hold = tmp_path / "hold"
    hold.touch()
    first = agent(agents, tmp_path, server, "solo", SOLO, env={"FOREWARN_TEST_HOLD": str(hold)})
    [event] = schedule(server, "--type", "Redeploy", "--vm", "solo")
    wait_for(first.hooks, "the drain to start")
    first.kill()
    hold.unlink()  # the drain's own process would end now; the agent that ran it is gone
    assert azure_events(server)[event["event_id"]]["status"] == "Scheduled"
    second = agent(agents, tmp_path, server, "solo", SOLO)
    key = f"azure:{event['event_id']}"
    # The server starts the event before the agent writes down that it approved it.
    state = wait_for(
        lambda: (
            json.loads(second.state.read_text())["events"][key].get("approved")
            and json.loads(second.state.read_text())["events"][key]
        ),
        "the approval in the state file",
    )
    assert state["drain"] == "done" and state["drain_runs"] == 2
    assert azure_events(server)[event["event_id"]]["status"] == "Started"
    second.kill()
    drains = len([h for h in second.hooks() if h["phase"] == "drain"])
    third = agent(agents, tmp_path, server, "solo", SOLO)
    polls = third.polls()
    wait_for(lambda: third.polls() >= polls + 3, "three polls after the restart")
    assert len([h for h in third.hooks() if h["phase"] == "drain"]) == drains


def test_dry_run_runs_no_hook_and_approves_nothing(server, agents, tmp_path):
    solo = agent(agents, tmp_path, server, "solo", SOLO, "--dry-run")
    [event] = schedule(server, "--type", "Reboot", "--vm", "solo")
    wait_for(lambda: "would approve" in solo.log_path.read_text(), "the dry run's approval line")
    assert solo.hooks() == [] and azure_events(server)[event["event_id"]]["status"] == "Scheduled"


# --------------------------------------------------------------------------------------------------------- EC2
def test_ec2_scheduled_event_and_spot_interruption_with_imdsv2(server, agents, tmp_path):
    orders = agent(agents, tmp_path, server, "orders", ORDERS)
    batch = agent(agents, tmp_path, server, "batch", SPOT)
    forewarn(server, "schedule", "--code", "system-reboot", "--instance", "orders-db", "--notice", "1h")
    forewarn(server, "ec2", "interrupt", "batch", "--action", "stop")
    wait_for(lambda: orders.phases() == [("drain", "system-reboot")], "the scheduled event's drain")
    wait_for(lambda: batch.phases() == [("drain", "spot-stop")], "the Spot interruption's drain")
    assert 0 < int(batch.hooks()[0]["env"]["seconds_left"]) <= 120
    forewarn(server, "clock", "advance", "4h")  # the reboot happens and its event completes
    wait_for(lambda: ("ended", "system-reboot") in orders.phases(), "the restore after the reboot")
    calls = requests.get(server.control + "/v1/imds/requests", params={"limit": 500})
    if calls.status_code == 200:  # the request log, where the server keeps one: every EC2 call carried a token
        assert all(c.get("token", True) for c in calls.json() if c.get("cloud") == "aws")


# ---------------------------------------------------------------------------------------------- Compute Engine
def test_gce_maintenance_event_and_preemption(server, agents, tmp_path):
    gweb = agent(agents, tmp_path, server, "gweb", GWEB)
    gspot = agent(agents, tmp_path, server, "gspot", GSPOT)
    wait_for(lambda: requests.get(server.control + "/v1/gce/instances/gweb-1").json()["watched"], "the held GET")
    forewarn(server, "gce", "maintain", "gweb-1")
    wait_for(lambda: gweb.phases() == [("drain", "MIGRATE_ON_HOST_MAINTENANCE")], "the migration's drain")
    forewarn(server, "clock", "advance", "10m")
    wait_for(lambda: ("ended", "MIGRATE_ON_HOST_MAINTENANCE") in gweb.phases(), "the restore after the migration")
    forewarn(server, "gce", "preempt", "gspot-1")
    wait_for(lambda: gspot.phases() == [("drain", "PREEMPTED")], "the preemption's drain")


def test_gce_maintenance_announced_days_ahead_is_told_and_not_drained_for(server, agents, tmp_path):
    """upcoming-maintenance ("Monitor and plan for a host maintenance event"): a week ahead, the agent logs and
    remembers it; the drain waits for maintenance-event's notice."""
    gweb = agent(agents, tmp_path, server, "gweb", GWEB)
    forewarn(server, "gce", "maintain", "gweb-1", "--notice", "7d")
    wait_for(lambda: "announced: UPCOMING_" in gweb.log_path.read_text(), "the announcement in the log")
    [record] = json.loads(gweb.state.read_text())["events"].values()
    assert record["advance"] and record["kind"].startswith("UPCOMING_") and gweb.hooks() == []


# ------------------------------------------------------------------------------------------------ its settings
def run_agent(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forewarn_agent", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": str(AGENT_SOURCE), **(env or {})},
    )


def test_settings_come_from_the_file_then_the_environment_then_the_flags(tmp_path):
    sys.path.insert(0, str(AGENT_SOURCE))
    try:
        from forewarn_agent.config import ConfigError, load
    finally:
        sys.path.remove(str(AGENT_SOURCE))
    path = tmp_path / "agent.json"
    path.write_text(
        json.dumps({"interval": 5, "margin": 20, "hooks": {"drain": [{"command": "x", "kinds": ["Freeze"]}]}})
    )
    config = load(str(path), {"FOREWARN_AGENT_MARGIN": "30", "FOREWARN_AGENT_DRY_RUN": "yes"}, {"interval": "2"})
    assert (config.interval, config.margin, config.dry_run) == (2.0, 30.0, True)
    assert config.hooks[0].applies("drain", "Freeze") and not config.hooks[0].applies("drain", "Reboot")
    path.write_text(json.dumps({"intervall": 5}))
    with pytest.raises(ConfigError, match="unknown settings intervall"):
        load(str(path), {}, {})
    with pytest.raises(ConfigError, match="environment: margin = 'soon'"):
        load(None, {"FOREWARN_AGENT_MARGIN": "soon"}, {})


def test_no_metadata_service_is_a_clear_error():
    run = run_agent("--endpoint", "http://127.0.0.1:9", "--state", "", "--listen", "")
    assert run.returncode == 1 and "no metadata service answered" in run.stderr, run.stderr
