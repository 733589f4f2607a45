"""EC2's queue-mode cases discriminate: a queue-mode handler (boto3) given a queue URL and the SQS and Auto Scaling
endpoint passes them, and a variant that never completes a lifecycle action, or never deletes a message, fails the
cases it breaks and no other (tests/conformance/handlers/queue_handler.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HANDLER = Path(__file__).parent / "handlers" / "queue_handler.py"
CASES = ["queue-spot-interruption", "queue-lifecycle-hook", "queue-lifecycle-timeout"]


def options(broken: str = "") -> dict:
    argv = [sys.executable, str(HANDLER), "--queue-url", "{queue_url}", "--endpoint", "{endpoint_url}"]
    return {
        "command": [*argv, "--state", "{state_dir}", "--broken", broken],
        "drained": 'test -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
        "clouds": ["aws"],
        "cases": CASES,
    }


@pytest.mark.parametrize(
    "broken, grades",
    [
        ("", dict.fromkeys(CASES, "pass")),
        ("never-complete", {CASES[0]: "pass", CASES[1]: "fail", CASES[2]: "fail"}),
        ("never-delete", {CASES[0]: "fail", CASES[1]: "fail", CASES[2]: "pass"}),
    ],
)
def test_the_queue_mode_cases_grade_a_handler_by_what_it_does(forewarn_conformance, broken, grades):
    verdict = forewarn_conformance(**options(broken))
    assert verdict.grades == grades, verdict.explain()
