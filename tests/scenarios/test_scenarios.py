"""Scenarios: every shipped scenario runs on the manual clock against a real private server and its timeline shows
the documented behaviour; the file format is validated with file, line and place; the CLI; other servers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import pytest

from forewarn.scenarios import ScenarioError, load_scenario, parse_scenario, shipped_names
from forewarn.scenarios import server as private_server
from forewarn.scenarios.api import Api, Unreachable
from forewarn.scenarios.runner import RunInterrupted, Runner, RunOptions, StopRequest, run_scenario
from helpers import ROOT, SMALL_FLEET, T0, Server

NAMES = shipped_names()

# The issue's list: each is a shipped scenario.
REQUIRED = {
    "live-migration",
    "host-maintenance",
    "user-reboot",
    "user-redeploy",
    "user-reboot-auto-approved",
    "predicted-hardware-failure",
    "canceled-maintenance",
    "spot-preempt",
    "scale-set-terminate",
    "hardware-failure",
    "two-vm-live-migration",
    "ec2-system-reboot-event-window",
    "ec2-instance-retirement",
    "gce-live-migration",  # issue 15: a live migration seen by a watcher
    "gce-gpu-terminate-performed",  # terminate-on-maintenance of a GPU VM, announced, started early by its user
    "gce-gpu-terminate-rescheduled",  # the same, with advance notice rescheduled (later) by the user
    "gce-spot-preemption",
    "ec2-spot-interruption-queue",  # issue 27: the AWS queue path
    "ec2-asg-scale-in-lifecycle-hook",
    "ec2-asg-lifecycle-hook-timeout",
}


def run(name: str, timing: str = "fast", **kwargs) -> dict:
    return run_scenario(load_scenario(name).resolve(timing), **kwargs)


def failures(timeline: dict) -> list[str]:
    problems = [f"{r['what']}: {r['detail']}" for r in timeline["expectations"] if not r["passed"]]
    return problems + ([f"aborted: {timeline['aborted']}"] if timeline["aborted"] else [])


def statuses(entries: list[dict]) -> list[tuple[int, list[str]]]:
    return [(e["incarnation"], [ev["EventStatus"] for ev in e["document"]["Events"]]) for e in entries]


def cli(*args, cwd=None, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "forewarn", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


# ------------------------------------------------------------------------------------------- the shipped library
def test_the_library_ships_every_scenario_of_the_issue_with_both_timings():
    assert REQUIRED <= set(NAMES)
    for name in NAMES:
        scenario = load_scenario(name)
        assert scenario.name == name
        assert scenario.description and scenario.source and scenario.title != name
        for timing in ("fast", "realistic"):
            resolved = scenario.resolve(timing)
            assert resolved.steps and resolved.expectations, name


@pytest.mark.parametrize("timing", ["fast", "realistic"])
@pytest.mark.parametrize("name", NAMES)
def test_shipped_scenario_passes_on_the_manual_clock(name, timing):
    timeline = run(name, timing)
    assert timeline["passed"], failures(timeline)
    assert timeline["settled"] and timeline["private_server"] and timeline["clock"] == "manual"
    assert timeline["expectations"] and all(r["passed"] for r in timeline["expectations"])


@pytest.mark.parametrize("timing", ["fast", "realistic"])
def test_two_vm_freeze_is_the_seed_example_flow(timing):
    timeline = run("two-vm-live-migration", timing)
    assert timeline["passed"], failures(timeline)
    for vm in ("WestNO_0", "WestNO_1"):
        entries = timeline["vms"][vm]
        assert statuses(entries) == [(1, []), (2, ["Scheduled"]), (3, ["Started"]), (4, [])]
        ids = {ev["EventId"] for e in entries for ev in e["document"]["Events"]}
        assert len(ids) == 1
        scheduled, started = entries[1]["document"]["Events"][0], entries[2]["document"]["Events"][0]
        assert scheduled["Resources"] == started["Resources"] == ["WestNO_0", "WestNO_1"]
        assert scheduled["EventType"] == "Freeze" and scheduled["DurationInSeconds"] == 5
        assert started["NotBefore"] == ""
    assert [e["document"] for e in timeline["vms"]["WestNO_0"]] == [e["document"] for e in timeline["vms"]["WestNO_1"]]
    notice, window = (15, 5) if timing == "fast" else (900, 300)
    assert [e["offset"] for e in timeline["vms"]["WestNO_0"]] == [0, 0, notice, notice + window]
    if timing == "realistic":  # the overview's example flow: 22:11:58 + 15 minutes
        assert timeline["start"] == "2026-04-20T22:11:58Z"
        assert timeline["vms"]["WestNO_0"][1]["document"]["Events"][0]["NotBefore"] == "Mon, 20 Apr 2026 22:26:58 GMT"
    assert timeline["approvals"] == []


QUEUE_FAULTS = """
name: duplicated-warning
description: A Spot interruption warning delivered twice to the handler's queue, and SQS throttled after that.
fleet:
  hosts: [{name: h1}]
  ec2_instances: [{id: i-0c00000000000000a, host: h1, spot: true}]
steps:
  - {at: 0s, do: sqs-create-queue, with: {name: nth}}
  - after: 0s
    do: events-put-rule
    with: {name: spot, queue: nth, pattern: {detail-type: [EC2 Spot Instance Interruption Warning]}}
  - {after: 0s, do: queue-faults, with: {deliveries: {duplicate: 1}}}
  - {at: 10s, do: ec2-interrupt, with: {instances: [i-0c00000000000000a]}}
  - {at: 20s, id: warnings, do: sqs-handle, with: {queue: nth, expect: [EC2 Spot Instance Interruption Warning]}}
  - {after: 0s, do: queue-faults, with: {throttle: {service: sqs, actions: [ReceiveMessage]}}}
  - {after: 0s, do: sqs-handle, with: {queue: nth}, fails: RequestThrottled}
expect:
  - instance: i-0c00000000000000a
    states: [running, terminated]
"""


def test_queue_path_steps_set_faults_and_handle_what_comes():
    timeline = run_scenario(parse_scenario(QUEUE_FAULTS, "queue-faults.yaml").resolve("fast"))
    assert timeline["passed"], failures(timeline)
    handled = next(a for a in timeline["actions"] if a["do"] == "sqs-handle")
    assert handled["produced"] == ["EC2 Spot Instance Interruption Warning"] * 2  # the duplicate, handled too
    assert [check["passed"] for check in timeline["expectations"]] == [True, True]


def test_canceled_maintenance_approval_does_not_cancel_and_cancellation_removes_it():
    timeline = run("canceled-maintenance", "realistic")
    assert timeline["passed"], failures(timeline)
    web = timeline["vms"]["web-01"]
    assert statuses(web) == [(1, []), (2, ["Scheduled"]), (3, [])]
    assert web[2]["offset"] == 8 * 60  # gone at the cancellation, not at the approval
    [approval] = timeline["approvals"]
    assert approval["by"] == "web-01" and approval["offset"] == 60
    event = next(e for e in timeline["events"] if e["event_id"] == approval["event_id"])
    assert event["status"] == "Canceled" and event["started_at"] is None
    assert [entry["what"] for entry in event["journal"]] == ["scheduled", "approved", "canceled"]
    # After the approval the document was still Scheduled: the approval changed nothing the VM sees.
    assert all(s["power"] == "running" for s in timeline["vm_states"]["web-01"])
    assert [a["do"] for a in timeline["actions"]] == ["schedule", "approve", "cancel", "cancel"]


def test_shared_host_waits_for_the_other_tenant():
    timeline = run("host-maintenance", "realistic")
    assert timeline["passed"], failures(timeline)
    assert [(a["by"], a["offset"]) for a in timeline["approvals"]] == [("web-01", 120)]
    for vm in ("web-01", "db-01"):  # Started at NotBefore, not at web-01's approval
        assert statuses(timeline["vms"][vm])[2] == (3, ["Started"]) and timeline["vms"][vm][2]["offset"] == 900


def test_auto_approved_reboot_never_shows_scheduled_and_hardware_failure_cannot_be_canceled():
    auto = run("user-reboot-auto-approved")
    assert statuses(auto["vms"]["app-01"]) == [(1, []), (2, ["Started"]), (3, [])]
    failure = run("hardware-failure")
    assert statuses(failure["vms"]["web-01"]) == [(1, []), (2, ["Started"]), (3, [])]
    refused = failure["actions"][1]
    assert refused["do"] == "cancel" and refused["error"]["code"] == "Conflict"


def test_predicted_failure_gives_seven_days_and_approval_brings_it_forward():
    timeline = run("predicted-hardware-failure", "realistic")
    assert timeline["passed"], failures(timeline)
    entries = timeline["vms"]["db-01"]
    assert entries[1]["document"]["Events"][0]["NotBefore"] == "Mon, 27 Apr 2026 22:11:58 GMT"
    assert entries[2]["offset"] == 2 * 86400  # Started when approved, five days early
    states = timeline["vm_states"]["db-01"]
    assert states[0]["host"] == "host-01" and states[-1]["host"] == "host-02"


def test_ec2_scenarios_record_what_the_instances_went_through():
    window = run("ec2-system-reboot-event-window")
    assert window["passed"], failures(window)
    history = window["instances"]["i-0a1b2c3d4e5f60718"]
    assert [e["events"][0]["not_before"] for e in history if e["events"]] == [
        "2026-04-21T02:00:00Z",
        "2026-04-28T03:00:00Z",
        "2026-04-28T03:00:00Z",
        "2026-04-28T03:00:00Z",
    ]
    assert history[-1]["events"][0]["state"] == "completed" and history[-1]["host"] != history[0]["host"]
    assert window["actions"][0]["produced"][0].startswith("iew-")  # the window, through the EC2 Query API
    retirement = run("ec2-instance-retirement")
    assert [e["state"] for e in retirement["instances"]["i-0b00000000000000a"]][-1] == "stopped"
    assert [e["state"] for e in retirement["instances"]["i-0b00000000000000b"]][-1] == "terminated"


def test_event_ids_are_reproducible_with_the_same_seed():
    first, second = run("scale-set-terminate"), run("scale-set-terminate")
    assert first["actions"][0]["produced"] == second["actions"][0]["produced"]
    other = run("scale-set-terminate", seed="another")
    assert other["actions"][0]["produced"] != first["actions"][0]["produced"]


def test_sped_up_real_clock_is_polled():
    timeline = run("live-migration", "fast", options=RunOptions(mode="real", speed=5))
    assert timeline["clock"] == "real" and timeline["speed"] == 5
    assert statuses(timeline["vms"]["app-01"]) == [(1, []), (2, ["Scheduled"]), (3, ["Started"]), (4, [])]
    assert timeline["passed"], failures(timeline)


# ------------------------------------------------------------------------------------------------- validation
GOOD = """\
name: mine
description: a test
fleet:
  vms:
    - {name: a, host: h1}
    - {name: b, host: h1}
timing:
  notice: {fast: 10s, realistic: 10m}
steps:
  - at: 0s
    id: freeze
    do: schedule
    with: {type: Freeze, vms: [a], notice: $notice}
  - at: 1m
    do: approve
    as: a
observe: [a]
expect:
  - vm: a
    never: [Started Reboot]
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(textwrap.dedent(text), "mine.yaml")
    return str(refused.value).splitlines()


def test_a_valid_file_resolves_per_timing():
    scenario = parse_scenario(GOOD, "mine.yaml")
    fast, realistic = scenario.resolve("fast"), scenario.resolve("realistic")
    assert fast.steps[0].params["notice"] == "10s" and realistic.steps[0].params["notice"] == "10m"
    assert [s.time.total_seconds() for s in fast.steps] == [0, 60]
    assert fast.observe == ("a",) and not fast.observe_all


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            ("do: approve", "do: aprove"),
            "mine.yaml:15: steps[1].do: unknown action 'aprove'; expected one of schedule, approve, cancel",
        ),
        (
            ("  - at: 1m\n", "  - note: no time\n"),
            "mine.yaml:14: steps[1]: give exactly one of `at` (time from the start) and `after`",
        ),
        (
            ("notice: $notice}", "notice: $notise}"),
            "mine.yaml:13: steps[0].with.notice: unknown reference '$notise': not a timing name nor the id of an earlier "
            "step (known: $notice)",
        ),
        (("at: 1m", "at: -1m"), "mine.yaml:14: steps[1].at: invalid duration '-1m'"),
        (("observe: [a]", "observe: [c]"), "mine.yaml:17: observe[0]: 'c' is not a VM or an instance of the fleet"),
        (
            ("    - {name: b, host: h1}", "    - {name: b, hots: h1}"),
            "mine.yaml:6: fleet.vms[1].hots: unknown key 'hots'",
        ),
        (
            ("description: a test", "description: a test\ndescription: again"),
            "mine.yaml:3: duplicate key 'description'",
        ),
        (
            ("    never: [Started Reboot]", "    nevr: [Started]"),
            "mine.yaml:20: expect[0].nevr: a vm check takes documents, never,",
        ),
        (("{fast: 10s, realistic: 10m}", "{fast: 10s}"), "mine.yaml:8: timing.notice: expected {fast: VALUE, "),
        (("    as: a", "    as: z"), "mine.yaml:16: steps[1].as: 'z' is not a VM of the fleet (or `control`)"),
        (
            ("with: {type: Freeze, vms: [a]", "with: {type: Freeze, vms: [x]"),
            "mine.yaml:13: steps[0].with.vms: 'x' is not a vm of the fleet",
        ),
        (("with: {type: Freeze,", "with: {kind: Freeze,"), "mine.yaml:13: steps[0].with: schedule needs `type`"),
        (
            ("  - at: 1m", "  - at: 1m\n    fails: Conflict\n    ass: x"),
            "mine.yaml:16: steps[1].ass: unknown key 'ass'",
        ),
        (("name: mine", "name: Mine!"), "mine.yaml:1: name: a name is lowercase letters"),
        (("steps:", "stepz:"), "mine.yaml:9: stepz: unknown key 'stepz'"),
        (
            ("observe: [a]", "  - {at: 30s, do: cancel, with: {event: $freeze}}\nobserve: [a]"),
            "mine.yaml:17: steps[2].at: +00:00:30 is before the previous step (+00:01:00)",
        ),
        (
            ("steps:\n  - at: 0s", "steps:\n  - at: 0s\n    note: [\n"),
            "mine.yaml:14: not valid YAML: did not find expected",
        ),
    ],
)
def test_invalid_files_name_file_line_place_and_problem(change, expected):
    old, new = change
    assert old in GOOD
    found = problems(GOOD.replace(old, new, 1))
    assert any(line.startswith(expected) or expected in line for line in found), found


def test_every_problem_is_reported_at_once():
    text = GOOD.replace("do: approve", "do: aprove").replace("observe: [a]", "observe: [zz]")
    found = problems(text)
    assert len(found) == 2 and "steps[1].do" in found[0] and "observe[0]" in found[1]


def test_approve_needs_an_event_or_a_vm_and_refs_must_be_earlier():
    text = GOOD.replace("    as: a\n", "    with: {event: $later}\n") + "  - {vm: a, power: [running]}\n"
    text = text.replace("  - at: 0s\n    id: freeze", "  - at: 0s\n    id: first")
    found = problems(text)
    assert any("steps[1].with.event: unknown reference '$later'" in line for line in found), found


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
    assert "FAIL  vm a: never Scheduled" in failed.stdout and "FAILED: 1 of 1 checks" in failed.stdout
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


class CountingApi(Api):
    """The runner's client, counting its requests by method and path."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests: list[tuple[str, str]] = []

    def _send(self, method, url, **kwargs):
        self.requests.append((method, url.split("/", 3)[-1]))
        return super()._send(method, url, **kwargs)


def generated(tmp_path, vms: int, duration: str, per_hour: str, observe: str, seed: str = "1") -> str:
    fleet = tmp_path / "fleet.yaml"
    if not fleet.exists():
        cli(
            "fleet",
            "generate",
            "--vms",
            str(vms),
            "--vms-per-host",
            "10",
            "--spot-share",
            "0.5",
            "--seed",
            "g",
            "--out",
            str(fleet),
        )
    out = tmp_path / f"random-{seed}.yaml"
    cli(
        "scenario",
        "generate",
        "--fleet",
        str(fleet),
        "--seed",
        seed,
        "--per-hour",
        per_hour,
        "--observe",
        observe,
        "--duration",
        duration,
        "--start",
        "2026-04-20T00:00:00Z",
        "--out",
        str(out),
    )
    return str(out)


def test_a_large_fleet_costs_no_more_requests_per_step_than_a_small_one(tmp_path):
    """2,000 VMs: after a step or a move the runner reads only what the journal says changed, never every VM, and
    deadlines that concern nothing it records are passed in one move. (Before: 20 documents, all 2,000 VM rows and
    the clock after every move: 12,663 requests for these 118 steps, 524 of them all 2,000 VM rows.)"""
    from forewarn.scenarios.server import PrivateServer

    scenario = load_scenario(generated(tmp_path, 2000, "3h", "40", "20")).resolve("realistic")
    with PrivateServer(scenario) as private:
        api = CountingApi(private.control, private.ec2)
        try:
            timeline = Runner(scenario, api).run()
        finally:
            api.close()
    assert timeline["aborted"] is None and timeline["settled"], failures(timeline)
    steps = len(scenario.steps)
    assert steps > 80 and not [a for a in timeline["actions"] if "error" in a]
    full_reads = [path for method, path in api.requests if path == "v1/vms"]
    assert len(full_reads) <= 3, len(full_reads)  # at the start, and once the run's events are over
    assert len(api.requests) < 15 * steps, (len(api.requests), steps)  # 1,226 when written


def test_passing_deadlines_in_one_move_records_the_same_timeline(tmp_path):
    path = generated(tmp_path, 120, "4h", "30", "3")
    every = run_scenario(load_scenario(path).resolve("realistic"), options=RunOptions(every_deadline=True))
    fewer = run_scenario(load_scenario(path).resolve("realistic"))
    assert every["aborted"] is None and fewer["aborted"] is None and every["settled"] and fewer["settled"]
    for key in ("vms", "vm_states", "instances", "actions", "approvals", "events", "end"):
        assert every[key] == fewer[key], key
    assert fewer["moves"] < every["moves"] * 0.8, (fewer["moves"], every["moves"])


@pytest.mark.parametrize("signal_name, status", [("SIGTERM", 143), ("SIGINT", 130)])
def test_an_interrupted_run_writes_a_partial_timeline(tmp_path, signal_name, status):
    import signal

    path = generated(tmp_path, 120, "2d", "60", "120")  # thousands of steps: far from over when interrupted
    out = tmp_path / "timeline.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "forewarn", "scenario", "run", path, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    try:
        for line in process.stdout:  # the live timeline: under way once a step has created events ("-> IDs")
            if "> " in line and " -> " in line:
                break
        process.send_signal(getattr(signal, signal_name))
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == status, stderr
    assert "Traceback" not in stderr and "progress: step" in stderr
    assert f"interrupted: interrupted by {signal_name} at +" in stdout and "(partial)" in stdout
    timeline = json.loads(out.read_text())
    assert timeline["partial"] is True and timeline["interrupted"] == signal_name and not timeline["passed"]
    assert 0 < len(timeline["actions"]) < len(load_scenario(path).data["steps"])
    assert timeline["events"] and all(event["journal"] for event in timeline["events"])
    with pytest.raises(Unreachable):  # the private server was stopped
        Api(timeline["server"], timeout=2).get("/healthz")
    assert not out.with_name(out.name + ".partial").exists()


def test_a_stop_whose_exception_was_lost_still_stops_the_run_at_its_next_move(tmp_path):
    """A signal handler's exception is lost where the signal lands in a finalizer, and was lost in library code that
    catches Exception (a Ctrl-C that never stopped the run): the request is kept, and the runner checks it."""
    stop = StopRequest()
    with pytest.raises(RunInterrupted):
        try:
            stop.request("SIGINT")
        except Exception:  # what click's isatty did with the handler's exception
            pass
    timeline = run_scenario(
        load_scenario(generated(tmp_path, 20, "4h", "30", "3")).resolve(), options=RunOptions(stop=stop)
    )
    assert timeline["partial"] is True and timeline["interrupted"] == "SIGINT"
    assert timeline["aborted"].startswith("interrupted by SIGINT at +00:00:00, after 0 of")


def test_a_private_server_whose_port_was_taken_meanwhile_starts_on_other_ports(monkeypatch):
    """Two scenario runs at once (two CI jobs, two test workers) can draw the same free port: the second to bind
    it tries again on new ports instead of failing the run."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        drawn, free_ports = [], private_server.free_ports

        def first_draw_taken(count):
            ports = free_ports(count)
            drawn.append(ports)
            return [taken.getsockname()[1], *ports[1:]] if len(drawn) == 1 else ports

        monkeypatch.setattr(private_server, "free_ports", first_draw_taken)
        timeline = run_scenario(load_scenario("user-reboot").resolve("fast"))
    assert timeline["passed"] is True and len(drawn) == 2


def test_progress_goes_to_stderr_and_json_is_quiet(tmp_path):
    result = cli("scenario", "run", "user-reboot", "--timing", "fast", "--out", str(tmp_path / "t.json"))
    assert "progress: step 1/1" in result.stderr and "progress:" not in result.stdout
    as_json = cli("scenario", "run", "user-reboot", "--timing", "fast", "--json")
    assert json.loads(as_json.stdout)["passed"] is True
    assert "progress:" not in as_json.stderr and "#3" not in as_json.stderr
    quiet = cli("scenario", "run", "user-reboot", "--timing", "fast", "-q", "--out", str(tmp_path / "q.json"))
    assert "progress:" not in quiet.stderr


def test_progress_on_a_terminal_is_one_line_rewritten_in_place(tmp_path):
    import os
    import pty

    main, terminal = pty.openpty()
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "forewarn",
                "scenario",
                "run",
                "user-reboot",
                "--timing",
                "fast",
                "--out",
                str(tmp_path / "t.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=terminal,
            timeout=120,
            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        )
        os.close(terminal)
        written = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            written += chunk
    finally:
        os.close(main)
    assert result.returncode == 0
    text = written.decode()
    assert "\r\x1b[Kprogress: step 1/1" in text and text.rstrip().endswith("(done)"), repr(text)
