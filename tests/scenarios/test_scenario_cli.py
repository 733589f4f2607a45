"""Scenarios from the command line and on servers of their own or shared: list, show, validate and run, the
timeline file, expectations that must fail, Compute Engine checks, a given or shared server."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from forewarn.scenarios import load_scenario, parse_scenario, shipped_names
from forewarn.scenarios.runner import RunOptions, run_scenario
from helpers import ROOT, SMALL_FLEET, T0, Server
from scenario_running import GOOD, cli, failures, problems, statuses

NAMES = shipped_names()


# ------------------------------------------------------------------------------------------------------- CLI
def test_cli_list_show_validate(tmp_path):
    listed = json.loads(cli("scenario", "list", "--json").stdout)
    assert [s["name"] for s in listed] == NAMES and all(s["source"] for s in listed)
    assert "two-vm-live-migration" in cli("scenario", "list").stdout
    shown = cli("scenario", "show", "canceled-maintenance").stdout
    assert "name: canceled-maintenance" in shown and "do: cancel" in shown
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    assert "ok" in cli("scenario", "validate", str(good)).stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("do: approve", "do: aprove"))
    refused = cli("scenario", "validate", str(bad), check=False)
    assert refused.returncode == 1 and f"{bad}:15: steps[1].do: unknown action 'aprove'" in refused.stderr
    unknown = cli("scenario", "run", "no-such-scenario", check=False)
    assert unknown.returncode == 1 and "unknown scenario 'no-such-scenario'" in unknown.stderr


def test_cli_run_writes_the_timeline_and_fails_on_a_broken_expectation(tmp_path):
    result = cli("scenario", "run", "user-reboot", "--timing", "fast", cwd=tmp_path)
    assert "#3   Started Reboot (User)" in result.stdout and "passed:" in result.stdout
    timeline = json.loads((tmp_path / "user-reboot-timeline.json").read_text())
    assert timeline["scenario"] == "user-reboot" and timeline["passed"] and timeline["timing"] == "fast"
    assert statuses(timeline["vms"]["app-01"]) == [(1, []), (2, ["Scheduled"]), (3, ["Started"]), (4, [])]
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(GOOD.replace("never: [Started Reboot]", "never: [Scheduled]"))
    failed = cli("scenario", "run", str(wrong), "--out", str(tmp_path / "wrong.json"), check=False)
    assert failed.returncode == 1
    assert "FAIL  vm a: never Scheduled" in failed.stdout and "FAILED: 1 of 1 check" in failed.stdout
    assert json.loads((tmp_path / "wrong.json").read_text())["passed"] is False
    as_json = cli("scenario", "run", "spot-preempt", "--timing", "fast", "--out", "-", "-q")
    assert json.loads(as_json.stdout)["passed"] is True


def test_a_step_expected_to_fail_must_fail():
    text = GOOD.replace("    as: a\n", "    as: a\n    fails: Conflict\n")
    timeline = run_scenario(parse_scenario(text, "mine.yaml").resolve("realistic"))
    assert not timeline["passed"]
    assert {"what": "steps[1] approve fails with Conflict", "passed": False, "detail": "it succeeded"} in timeline[
        "expectations"
    ]


GCE_WAVE = """\
name: gce-wave-canceled
description: a Compute Engine wave canceled while its first instance has its notice
fleet:
  hosts: [{name: h1}, {name: h2}]
  gce_instances:
    - {name: web-1, host: h1}
    - {name: web-2, host: h2}
steps:
  - at: 0s
    do: gce-watch
    with: {instance: web-1}
  - at: 0s
    id: rollout
    do: wave
    with: {cloud: gce, by: host, notice: 10m}
  - at: 9m30s
    do: cancel-wave
    with: {wave: $rollout}
observe: [web-1, web-2]
expect:
  - gce: web-1
    values: [NONE, MIGRATE_ON_HOST_MAINTENANCE, NONE]
    notified: [start+9m]
    moved: true
  - gce: web-2
    values: [NONE]
    moved: false
"""


def test_a_compute_engine_check_of_times_names_its_place():
    for key in ("notified", "upcoming"):
        bad = GCE_WAVE.replace("notified: [start+9m]", f"{key}: [start+9m, soon]")
        found = problems(bad)
        assert any(f"expect[0].{key}[1]: invalid time 'soon'" in line for line in found), found
    found = problems(GCE_WAVE.replace("notified: [start+9m]", "notified: start+9m"))
    assert any("expect[0].notified: expected a list" in line for line in found), found


def test_a_canceled_compute_engine_wave_is_waited_for_until_its_notified_instance_is_done():
    """The run knows the wave's maintenance from the journal (the events name the wave), so it settles only when
    the migration that had its notice before the cancel is over."""
    timeline = run_scenario(parse_scenario(GCE_WAVE, "wave.yaml").resolve("realistic"))
    assert timeline["passed"], failures(timeline)
    assert timeline["settled"]
    hosts = [entry["host"] for entry in timeline["gce_instances"]["web-1"]]
    assert hosts[0] == "h1" and hosts[-1] == "h2"


# ------------------------------------------------------------------------------------------- other servers
SMALL = f"""\
name: on-a-given-server
description: runs on a server the test started
fleet:
{textwrap.indent(SMALL_FLEET.strip(), "  ")}
steps:
  - at: 0s
    id: freeze
    do: schedule
    with: {{type: Freeze, vms: [WestNO_0, WestNO_1], notice: 1m, impact_window: 30s}}
  - at: 10s
    do: approve
    as: WestNO_1
observe: [WestNO_0]
expect:
  - vm: WestNO_0
    documents:
      - {{incarnation: 1, events: []}}
      - {{incarnation: 2, events: [Scheduled Freeze]}}
      - {{incarnation: 3, events: [Started Freeze], at: 10s}}
      - {{incarnation: 4, events: []}}
  - event: $freeze
    approved_by: [WestNO_1]
"""


def test_runs_on_a_given_server_and_refuses_a_foreign_fleet_or_clock(tmp_path):
    scenario = parse_scenario(SMALL, "small.yaml").resolve("fast")
    server = Server(tmp_path).start()
    try:
        timeline = run_scenario(scenario, server=server.control, ec2_url=server.ec2)
        assert timeline["passed"], failures(timeline)
        assert timeline["private_server"] is False and timeline["start"] == T0.isoformat().replace("+00:00", "Z")
        foreign = parse_scenario(GOOD, "mine.yaml").resolve("fast")
        refused = run_scenario(foreign, server=server.control)
        assert not refused["passed"] and "the server's fleet has no a, b" in refused["aborted"]
        real = run_scenario(scenario, server=server.control, options=RunOptions(mode="real"))
        assert "the server's clock is manual" in real["aborted"]
    finally:
        server.stop()
    (tmp_path / "real").mkdir()
    sped_up = Server(tmp_path / "real", clock="real", start=T0, extra=["--speed", "20"]).start()
    try:  # neither --manual nor --speed: the server's own clock
        timeline = run_scenario(scenario, server=sped_up.control, options=RunOptions(mode="auto"))
        assert timeline["clock"] == "real" and timeline["speed"] == 20
        assert statuses(timeline["vms"]["WestNO_0"]) == [(1, []), (2, ["Scheduled"]), (3, ["Started"]), (4, [])]
        assert timeline["passed"], failures(timeline)
    finally:
        sped_up.stop()


def test_docs_describe_every_shipped_scenario():
    docs = (ROOT / "docs" / "scenarios.md").read_text()
    for name in NAMES:
        assert f"### {name}\n" in docs and f"[`{name}`](#{name})" in docs, name


def test_show_prints_the_file_as_it_is(tmp_path):
    copy = tmp_path / "copy.yaml"
    copy.write_text(cli("scenario", "show", "host-maintenance").stdout)
    assert parse_scenario(copy.read_text(), str(copy)).data == load_scenario("host-maintenance").data


def test_the_runner_is_a_client_it_never_imports_the_engine():
    code = (
        "import sys, forewarn.scenarios.runner, forewarn.scenarios.cli; "
        "from forewarn.scenarios import load_library; load_library(); "
        "print(sorted(m for m in sys.modules if m.startswith(('forewarn.engine.settled_engine()', 'forewarn.service', "
        "'forewarn.surfaces', 'forewarn.store'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT / "src")}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------- random maintenance
def test_generated_scenarios_are_reproducible_and_every_step_runs(tmp_path):
    """Two seeds over a small generated fleet at a high rate (evictions, redeploys and host failures mixed): the
    files are the same for the same seed, and every step succeeds on a real private server."""
    fleet = tmp_path / "fleet.yaml"
    cli(
        "fleet",
        "generate",
        "--vms",
        "120",
        "--vms-per-host",
        "3",
        "--spot-share",
        "0.5",
        "--seed",
        "g",
        "--out",
        str(fleet),
    )
    for seed in ("1", "2"):
        out = tmp_path / f"random-{seed}.yaml"
        args = (
            "scenario",
            "generate",
            "--fleet",
            str(fleet),
            "--seed",
            seed,
            "--per-hour",
            "30",
            "--observe",
            "3",
            "--duration",
            "4h",
            "--start",
            "2026-04-20T00:00:00Z",
        )
        cli(*args, "--out", str(out))
        again = tmp_path / f"again-{seed}.yaml"
        cli(*args, "--out", str(again))
        assert again.read_text() == out.read_text()  # same seed, same file
        scenario = load_scenario(str(out))
        assert scenario.data["fleet"] == "fleet.yaml"  # relative to the scenario file
        kinds = {step["do"] for step in scenario.data["steps"]}
        assert {"schedule", "evict", "restart"} <= kinds
        timeline = run_scenario(scenario.resolve("realistic"), options=RunOptions(max_moves=20_000))
        assert timeline["aborted"] is None and timeline["settled"], failures(timeline)
        assert not [action for action in timeline["actions"] if "error" in action]
        assert len(timeline["actions"]) == len(scenario.data["steps"])
    assert (tmp_path / "random-1.yaml").read_text() != (tmp_path / "random-2.yaml").read_text()


def test_generate_refuses_what_cannot_be(tmp_path):
    result = cli("scenario", "generate", "--fleet", "demo", "--per-hour", "0", check=False)
    assert result.returncode == 1 and "--per-hour" in result.stderr
    result = cli("scenario", "generate", "--fleet", str(tmp_path / "none.yaml"), check=False)
    assert result.returncode == 1 and "cannot read the fleet file" in result.stderr


# ------------------------------------------------------------------------------------ shared servers, large runs
def test_a_run_on_a_shared_server_waits_only_for_what_it_created(tmp_path):
    """An older wave (three units of a day's notice each) is running on the server: the run's own event ends at
    +40 s, and the clock stops there instead of following the wave for three days."""
    scenario = parse_scenario(SMALL, "small.yaml").resolve("fast")
    server = Server(tmp_path).start()
    try:
        older = server.post(
            "/v1/waves", {"type": "Freeze", "by": "update-domain", "groups": ["myvmss"], "notice": "1d"}
        ).json()["wave"]
        timeline = run_scenario(scenario, server=server.control, ec2_url=server.ec2)
        assert timeline["passed"], failures(timeline)
        clock = server.get("/v1/clock")
        assert clock["now"] == timeline["end"] == "2026-04-20T22:12:38Z"  # started at +10 s, 30 s window: its end
        assert server.get(f"/v1/waves/{older['wave_id']}")["status"] == "running"
        [own] = timeline["actions"][0]["produced"]
        assert {e["event_id"]: e["status"] for e in timeline["events"]}[own] == "Completed"
    finally:
        server.stop()
