"""EC2's cases discriminate too: the reference EC2 handler passes, and the same handler reading without an IMDSv2
token fails the token case and no other (tests/conformance/handlers/ec2_handler.py)."""

from __future__ import annotations

import sys
from pathlib import Path

HANDLER = Path(__file__).parent / "handlers" / "ec2_handler.py"


def options(broken: str = "") -> dict:
    argv = [sys.executable, str(HANDLER), "--endpoint", "{metadata_url}", "--machine", "{machine}"]
    return {
        "command": [*argv, "--state", "{state_dir}", "--broken", broken],
        "drained": 'test -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
        "restored": 'test ! -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
        "clouds": ["aws"],
    }


def test_the_reference_ec2_handler_passes(forewarn_conformance, tmp_path):
    verdict = forewarn_conformance(**options(), cases=["spot-interruption", "canceled-event"])
    verdict.assert_passes()


def test_reading_without_a_token_fails_the_imdsv2_case_only(forewarn_conformance, tmp_path):
    verdict = forewarn_conformance(**options("v1"), cases=["imdsv2-tokens", "system-reboot"])
    assert verdict.grades == {"imdsv2-tokens": "fail", "system-reboot": "pass"}, verdict.explain()
