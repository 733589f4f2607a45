"""The steps beyond a control-API call: drop, throttle, expire, advance, a call to another port, a time written
{clock+DURATION}, and a case's own server options; read from YAML with their errors named."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from forewarn.conformance import battery
from forewarn.conformance.cases import CaseFileError, load_cases
from forewarn.conformance.runner import CaseRun, with_times


def loaded(tmp_path, steps: str, extra: str = "") -> list:
    file = tmp_path / "mine.yaml"
    file.write_text(f"cases:\n  - {{name: x, title: t, source: s, machines: [a], checks: [], {extra}steps: {steps}}}\n")
    return load_cases(file, "azure", "fast")


def test_each_kind_of_step_is_read(tmp_path):
    steps = "[{at: 1s, drop: 4s}, {throttle: 2s}, {expire: X-Token}, {advance: 25h}, {port: ec2, call: POST /}]"
    [case] = loaded(tmp_path, steps, "serve: [--require-enabling], ")
    drop, throttle, expire, advance, call = case.steps
    assert (drop.at, drop.drop, throttle.throttle, expire.expire) == (1.0, 4.0, 2.0, "X-Token")
    assert (advance.advance, call.port, call.call) == (90000.0, "ec2", "POST /")
    assert list(case.serve) == ["--require-enabling"]


@pytest.mark.parametrize(
    "steps, message",
    [
        ("[{drop: 4s, advance: 1h}]", "a step is one of"),
        ("[{at: 1s}]", "a step is one of"),
        ("[{drop: soon}]", r"steps\[0\].drop"),
        ("[{port: ec2, drop: 1s}]", "'port' names one of the server's ports"),
        ("[{port: '../x', call: POST /}]", "'port' names one of the server's ports"),
    ],
)
def test_a_wrong_step_is_named(tmp_path, steps, message):
    with pytest.raises(CaseFileError, match=message):
        loaded(tmp_path, steps)


def test_a_time_in_a_body_is_the_clock_plus_a_duration():
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    body = {"not_before": "{clock+2h}", "keep": ["{clock+30s}", 3, "plain"]}
    assert with_times(body, now) == {"not_before": "2026-01-01T14:00:00Z", "keep": ["2026-01-01T12:00:30Z", 3, "plain"]}


def test_a_time_the_clock_jumped_over_came_at_the_jump():
    run = CaseRun.__new__(CaseRun)
    run.sim_start = datetime(2026, 1, 1, tzinfo=UTC)
    run.jumps = [(9.0, 30.0)]  # at 9 s of the case the clock jumped 30 s ahead
    assert run.seconds_since_start("2026-01-01T00:00:05Z") == 5.0  # before the jump: as it was
    assert run.seconds_since_start("2026-01-01T00:00:20Z") == 9.0  # jumped over
    assert run.seconds_since_start("2026-01-01T00:00:45Z") == 15.0  # after: 30 s less


def test_the_shipped_cases_of_this_battery_load_in_both_timings():
    for timing in ("fast", "realistic"):
        names = {(c.cloud, c.name) for c, _ in battery(None, timing)}
        assert {
            ("azure", "imds-dropped"),
            ("azure", "service-reenabled"),
            ("aws", "rescheduled"),
            ("aws", "completed"),
            ("aws", "target-lifecycle-state"),
            ("aws", "imds-throttled"),
            ("aws", "token-expiry"),
            ("gcp", "wait-for-change-dropped"),
        } <= names


def test_a_queue_mode_case_is_read_with_its_endpoint_setup_and_placeholders(tmp_path):
    extra = (
        "mode: queue, endpoint: ec2, placeholders: {queue_url: '{endpoint_url}/1/q'}, "
        "setup: [{port: ec2, call: POST /, target: AWSEvents.PutRule, body: {Name: r}}], "
    )
    [case] = loaded(tmp_path, "[]", extra)
    assert (case.mode, case.endpoint, dict(case.placeholders)) == ("queue", "ec2", {"queue_url": "{endpoint_url}/1/q"})
    [setup] = case.setup
    assert (setup.port, setup.target, setup.body) == ("ec2", "AWSEvents.PutRule", {"Name": "r"})


@pytest.mark.parametrize(
    "extra, message",
    [
        ("placeholders: {machine: x}, ", r"placeholders.machine: a placeholder is .* not a built-in one"),
        ("placeholders: {Queue-URL: x}, ", r"placeholders.Queue-URL: a placeholder is lower-case"),
        ("endpoint: '../x', ", "endpoint: names one of the server's ports"),
        ("mode: [queue], ", "mode: a mode is a word"),
        ("setup: [{target: AWSEvents.PutRule, call: POST /}], ", r"setup\[0\]: 'target' .* goes with a 'port'"),
    ],
)
def test_a_wrong_queue_mode_key_is_named(tmp_path, extra, message):
    with pytest.raises(CaseFileError, match=message):
        loaded(tmp_path, "[]", extra)
