"""Scenarios: every shipped scenario runs on the manual clock against a real private server and its timeline shows
the documented behaviour; the file format is validated with file, line and place; the CLI; other servers."""

from __future__ import annotations

import pytest

from forewarn.scenarios import load_scenario, parse_scenario, shipped_names
from forewarn.scenarios.runner import RunOptions, run_scenario
from scenario_running import GOOD, failures, problems, run, statuses

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
        (("do: approve", "do: aprove"), "; did you mean 'approve' or 'wave'?"),
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


def test_a_private_server_gets_the_fleet_without_any_clouds_own_metadata_ports():
    """Fixed ports would keep two private servers from running side by side: every cloud's machine, and a scale set,
    loses its port and keeps its address; the rest of the fleet is as written."""
    import yaml

    from forewarn.fleet.file import parse_fleet
    from forewarn.scenarios.spec import server_fleet

    fleet = """
hosts: [{name: host-01}]
vms: [{name: solo, host: host-01, imds: {address: 127.0.0.10, port: 18169}}]
scale_sets: [{name: web, instances: 2, hosts: [host-01], imds: {port: 18170}}]
ec2_instances: [{id: i-0a1b2c3d4e5f60718, host: host-01, imds: {address: 127.0.0.11, port: 18180}}]
gce_instances: [{name: g-1, zone: us-central1-a, host: host-01, imds: {port: 18190}}]
"""
    served = yaml.safe_load(server_fleet(fleet))
    assert served["vms"][0]["imds"] == {"address": "127.0.0.10"}
    assert "imds" not in served["scale_sets"][0] and "imds" not in served["gce_instances"][0]
    assert served["ec2_instances"][0]["imds"] == {"address": "127.0.0.11"}
    assert served["hosts"] == [{"name": "host-01"}]
    assert all(machine.imds_port is None for machine in parse_fleet(server_fleet(fleet), "fleet").machines())
    assert any(machine.imds_port is not None for machine in parse_fleet(fleet, "fleet").machines())
