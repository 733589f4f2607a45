"""What the scenario tests share (tests/scenarios/test_scenario*.py): a shipped scenario run on a private server,
its failures and document statuses, and the forewarn CLI as a process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from forewarn.scenarios import ScenarioError, load_scenario, parse_scenario
from forewarn.scenarios.runner import run_scenario
from helpers import ROOT


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
