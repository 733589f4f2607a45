"""Compute Engine's cases discriminate too: the reference handler passes, and the same handler polling
maintenance-event without wait_for_change fails that case and no other (tests/conformance/handlers/gce_handler.py)."""

from __future__ import annotations

import sys
from pathlib import Path

HANDLER = Path(__file__).parent / "handlers" / "gce_handler.py"


def options(broken: str = "") -> dict:
    argv = [sys.executable, str(HANDLER), "--endpoint", "{metadata_url}", "--machine", "{machine}"]
    return {
        "command": [*argv, "--state", "{state_dir}", "--broken", broken],
        "drained": 'test -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
        "clouds": ["gcp"],
    }


def test_the_reference_gce_handler_passes(forewarn_conformance, tmp_path):
    verdict = forewarn_conformance(**options(), cases=["terminate-on-host-maintenance", "upcoming-maintenance"])
    verdict.assert_passes()


def test_polling_fails_the_wait_for_change_case_only(forewarn_conformance, tmp_path):
    verdict = forewarn_conformance(**options("polling"), cases=["waits-for-change", "live-migration"])
    assert verdict.grades == {"waits-for-change": "fail", "live-migration": "pass"}, verdict.explain()
