"""EC2's rescheduled, completed, target-lifecycle-state, imds-throttled and token-expiry cases discriminate: the
reference EC2 handler passes them, and a variant that stops reading after its drain, never restores, ignores the
target lifecycle state, stops at an error answer or keeps its first token fails the one it breaks and no other
(tests/conformance/handlers/ec2_handler.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HANDLER = Path(__file__).parent / "handlers" / "ec2_handler.py"


def options(broken: str = "") -> dict:
    argv = [sys.executable, str(HANDLER), "--endpoint", "{metadata_url}", "--machine", "{machine}"]
    return {
        "command": [*argv, "--state", "{state_dir}", "--broken", broken],
        "drained": 'test -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
        "restored": 'test ! -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
        "clouds": ["aws"],
    }


def test_the_reference_ec2_handler_passes_the_rescheduled_and_completed_cases(forewarn_conformance, tmp_path):
    verdict = forewarn_conformance(**options(), cases=["rescheduled", "completed"])
    verdict.assert_passes()


@pytest.mark.parametrize("broken, case", [("once", "rescheduled"), ("never-restore", "completed")])
def test_each_broken_ec2_handler_fails_its_case_only(forewarn_conformance, tmp_path, broken, case):
    verdict = forewarn_conformance(**options(broken), cases=[case, "system-reboot"])
    assert verdict.grades == {case: "fail", "system-reboot": "pass"}, verdict.explain()


def test_the_target_lifecycle_state_case_discriminates(forewarn_conformance, tmp_path):
    verdict = forewarn_conformance(**options(), cases=["target-lifecycle-state"])
    verdict.assert_passes()
    verdict = forewarn_conformance(**options("no-lifecycle"), cases=["target-lifecycle-state", "spot-interruption"])
    assert verdict.grades == {"target-lifecycle-state": "fail", "spot-interruption": "pass"}, verdict.explain()


@pytest.mark.parametrize("broken, case", [("no-retry", "imds-throttled"), ("token-once", "token-expiry")])
def test_throttling_and_token_expiry_discriminate(forewarn_conformance, tmp_path, broken, case):
    verdict = forewarn_conformance(**options(), cases=[case])
    verdict.assert_passes()
    verdict = forewarn_conformance(**options(broken), cases=[case, "system-reboot"])
    assert verdict.grades == {case: "fail", "system-reboot": "pass"}, verdict.explain()
