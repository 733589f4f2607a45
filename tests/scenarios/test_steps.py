"""Each cloud gives its scenario steps through its plugin (``Cloud.scenario_steps``): the parser and the runner take
every registered cloud's, so a cloud of one's own adds steps with no change to ``forewarn.scenarios``."""

from __future__ import annotations

import textwrap
from datetime import datetime

import pytest

from forewarn.cloud import registered
from forewarn.scenario_steps import CheckRecord, MachineCheck, NoSteps, StepAction, StepApi, StepCall
from forewarn.scenarios import ScenarioError, expect, parse_scenario, spec
from forewarn.scenarios.actions import WAVE_ACTIONS, steps, steps_of

AZURE = (
    "schedule",
    "approve",
    "cancel",
    "restart",
    "redeploy",
    "reimage",
    "delete",
    "policy",
    "scale-in",
    "update-instances",
    "hardware-failure",
    "predicted-failure",
    "evict",
)
EC2 = (
    "ec2-schedule",
    "ec2-cancel",
    "ec2-reschedule",
    "ec2-start",
    "ec2-interrupt",
    "ec2-rebalance",
    "ec2-api",
    "sqs-create-queue",
    "events-put-rule",
    "asg-put-hook",
    "asg-terminate",
    "asg-complete",
    "sqs-handle",
    "queue-faults",
)
GCE = (
    "gce-maintain",
    "gce-cancel",
    "gce-perform",
    "gce-reschedule",
    "gce-simulate",
    "gce-scheduling",
    "gce-preempt",
    "gce-host-error",
    "gce-watch",
)


def ping(api: StepApi, step: StepCall, params: dict) -> tuple[object, list[str]]:
    return api.post("/v1/ping", params), []


class PingSteps:
    """The steps of a small cloud of one's own."""

    actions = {"ping": StepAction(ping, ("vm",), ("at_time",), summary="POST /v1/ping")}
    time_keys = ("at_time",)
    scheduled_by_wave = None
    checks: dict = {}

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        return []


def test_every_registered_cloud_gives_its_steps_and_the_waves_come_last():
    given = {cloud.name: tuple(cloud.scenario_steps().actions) for cloud in registered()}
    assert given == {"azure": AZURE, "aws": EC2, "gcp": GCE}
    found = steps()
    assert tuple(found.actions) == (*AZURE, *EC2, *GCE, *WAVE_ACTIONS)
    assert {found.cloud_of[name] for name in EC2} == {"aws"} and found.cloud_of["wave"] is None
    assert found.time_keys == ("not_before", "not_after", "start", "NotBefore")


def test_a_cloud_of_ones_own_adds_its_steps_and_their_time_keys():
    clouds = {cloud.name: cloud.scenario_steps() for cloud in registered()}
    found = steps_of({**clouds, "ping": PingSteps()})
    assert tuple(found.actions)[-3:] == ("ping", *WAVE_ACTIONS)
    assert found.cloud_of["ping"] == "ping" and "at_time" in found.time_keys
    with pytest.raises(ValueError, match="the again cloud's scenario steps ping are another's already"):
        steps_of({"ping": PingSteps(), "again": PingSteps()})


def test_the_parser_checks_a_cloud_of_ones_own_steps_with_its_fields(monkeypatch):
    clouds = {cloud.name: cloud.scenario_steps() for cloud in registered()}
    monkeypatch.setattr(spec, "steps_of_clouds", lambda: steps_of({**clouds, "ping": PingSteps()}))
    text = textwrap.dedent(
        """\
        name: ping
        description: a step of a cloud of one's own
        fleet: {hosts: [{name: h}], vms: [{name: a, host: h}]}
        steps:
          - {at: 0s, do: ping, with: {vm: a, at_time: start+1m}}
        """
    )
    assert parse_scenario(text, "ping.yaml").data["steps"][0]["do"] == "ping"
    wrong = text.replace("at_time: start+1m", "at_time: whenever, colour: blue")
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(wrong, "ping.yaml")
    assert str(refused.value).splitlines() == [
        "ping.yaml:5: steps[0].with.colour: ping takes no 'colour'; it takes vm, at_time",
        "ping.yaml:5: steps[0].with.at_time: invalid time 'whenever'; use ISO 8601 (2026-04-20T22:26:58Z) or "
        "start+DURATION (start+15m)",
    ]


def pongs(check: CheckRecord, timeline: dict) -> None:
    """A check of a cloud of one's own: whether the VM answered a ping, from what its observer recorded."""
    recorded = check.observed("pings")
    if recorded is not None:
        answered = any(entry["pong"] for entry in recorded)
        check.add("pong", answered == check.checks["pong"], f"{len(recorded)} pings")


class CheckedPingSteps(PingSteps):
    checks = {"ping": MachineCheck(pongs, ("pong",), member="vm", noun="a pinged VM", flags=("pong",))}


def test_a_cloud_of_ones_own_adds_its_check_of_a_machine(monkeypatch):
    """A scenario's `expect:` takes every registered cloud's checks of a machine: the parser checks the new one's
    target and values as it declares them, and the expectations run it on the timeline."""
    clouds = {cloud.name: cloud.scenario_steps() for cloud in registered()}
    found = steps_of({**clouds, "ping": CheckedPingSteps()})
    monkeypatch.setattr(spec, "steps_of_clouds", lambda: found)
    monkeypatch.setattr(expect, "steps", lambda: found)
    text = textwrap.dedent(
        """\
        name: ping
        description: a check of a cloud of one's own
        fleet: {hosts: [{name: h}], vms: [{name: a, host: h}]}
        steps:
          - {at: 0s, do: ping, with: {vm: a}}
        expect:
          - {ping: a, pong: true}
        """
    )
    scenario = parse_scenario(text, "ping.yaml").resolve()
    timeline = {"start": "2026-04-20T00:00:00Z", "pings": {"a": [{"pong": False}, {"pong": True}]}}
    [result] = expect.evaluate(scenario, timeline, event_keys=[])
    assert result == {"check": 0, "what": "ping a: pong", "passed": True, "detail": "2 pings"}
    [unobserved] = expect.evaluate(scenario, {**timeline, "pings": {}}, event_keys=[])
    assert not unobserved["passed"] and unobserved["detail"] == "a was not observed (add it to `observe`)"
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text.replace("{ping: a, pong: true}", "{ping: b, pong: 1}"), "ping.yaml")
    assert str(refused.value).splitlines() == [
        "ping.yaml:7: expect[0].ping: 'b' is not a pinged VM of the fleet",
        "ping.yaml:7: expect[0].pong: expected true or false",
    ]
    with pytest.raises(ScenarioError, match="give exactly one of `vm`, `instance`, `gce`, `ping` and `event`"):
        parse_scenario(text.replace("{ping: a, pong: true}", "{pong: true}"), "ping.yaml")
    with pytest.raises(ValueError, match="the again cloud's scenario checks ping are another's already"):
        steps_of({"ping": CheckedPingSteps(), "again": NoSteps(checks=CheckedPingSteps.checks)})
