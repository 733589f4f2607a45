"""forewarn-agent (agent/) through every case of each cloud's battery, fast timing: the agent runs unmodified as a
real process per machine, against the battery's real server, with the hooks docs/conformance.md gives it (a drain
leaves a marker in the machine's own directory, a restore removes it; the probes check the marker). The tests are
tests/conformance/test_agent_battery_{azure,aws,gcp}.py: a file per cloud, so that xdist (one worker a file) runs
them side by side."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from forewarn.conformance import battery

AGENT_SOURCE = Path(__file__).resolve().parents[1] / "agent" / "src"
DRAINED = 'test -f "$FOREWARN_STATE_DIR/drained"'
RESTORED = 'test ! -f "$FOREWARN_STATE_DIR/drained"'
DRAIN_HOOK = 'sleep 1; touch "$FOREWARN_STATE_DIR/drained"'
RESTORE_HOOK = 'rm -f "$FOREWARN_STATE_DIR/drained"'


def agent_command(cloud: str) -> list[str]:
    """The agent as each machine of ``cloud``'s cases: its drain takes a second (so that the battery's kill -9 lands
    in the middle of it), and it keeps 2 s before NotBefore free (fast timing gives 6 to 10 s of notice). On Azure
    one peers list names every machine of the battery, each at a port of its case (``{port:NAME}``: cases run side
    by side), and each agent listens at its own entry, so the agents of an event naming several VMs coordinate its
    approval."""
    command = [sys.executable, "-m", "forewarn_agent", "--cloud", cloud, "--endpoint", "{metadata_url}"]
    command += ["--state", "{state_dir}/state.json", "--margin", "2"]
    command += ["--on-drain", DRAIN_HOOK, "--on-restore", RESTORE_HOOK]
    if cloud != "azure":
        return [*command, "--listen", ""]
    machines = sorted({machine for case, _ in battery([cloud]) for machine in case.machines})
    for machine in machines:
        command += ["--peer", f"{machine}=http://127.0.0.1:{{port:{machine}}}"]
    return command


@pytest.fixture
def agent_on_path(monkeypatch):
    """The handler processes inherit the test's environment: the agent's sources go first on their PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(AGENT_SOURCE), os.environ.get("PYTHONPATH", "")]))


def passes_every_case(forewarn_conformance, cloud: str) -> None:
    """The agent through every case of ``cloud``'s battery: each passes."""
    verdict = forewarn_conformance(
        agent_command(cloud), clouds=[cloud], timing="fast", drained=DRAINED, restored=RESTORED
    )
    assert sorted(verdict.grades) == sorted(case.name for case, _ in battery([cloud]) if case.mode == "metadata")
    verdict.assert_passes()
    if cloud == "azure":  # the agents coordinated: the event naming three VMs was approved, once all three drained
        [three] = [result for result in verdict.results if result.case.name == "three-vm-event"]
        reasons = {grade.check: grade.reason for grade in three.grades}
        assert reasons["no_approval_before_all_drained"] == "every approval came after every named machine drained"
