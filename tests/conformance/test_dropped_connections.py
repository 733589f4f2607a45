"""The cases that drop the handler's metadata connections (a ``drop`` step) discriminate: the reference handlers
pass them, and a variant that does not reconnect fails them and nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

HANDLERS = Path(__file__).parent / "handlers"


def options(handler: str, cloud: str, broken: str) -> dict:
    argv = [sys.executable, str(HANDLERS / handler), "--endpoint", "{metadata_url}", "--machine", "{machine}"]
    return {
        "command": [*argv, "--state", "{state_dir}", "--broken", broken],
        "drained": 'test -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
        "clouds": [cloud],
    }


def test_the_azure_reference_handler_survives_dropped_connections(forewarn_conformance, tmp_path):
    verdict = forewarn_conformance(**options("handler.py", "azure", ""), cases=["imds-dropped"])
    verdict.assert_passes()


def test_an_azure_handler_retrying_only_http_errors_fails_the_dropped_case_only(forewarn_conformance, tmp_path):
    given = options("handler.py", "azure", "http-errors-only")
    verdict = forewarn_conformance(**given, cases=["imds-dropped", "imds-throttled"])
    assert verdict.grades == {"imds-dropped": "fail", "imds-throttled": "pass"}, verdict.explain()


def test_the_gce_reference_handler_waits_again_after_a_dropped_connection(forewarn_conformance, tmp_path):
    given = options("gce_handler.py", "gcp", "")
    verdict = forewarn_conformance(**given, cases=["wait-for-change-dropped"])
    verdict.assert_passes()


def test_a_gce_handler_that_does_not_reconnect_fails_the_dropped_case_only(forewarn_conformance, tmp_path):
    given = options("gce_handler.py", "gcp", "no-reconnect")
    verdict = forewarn_conformance(**given, cases=["wait-for-change-dropped", "live-migration"])
    assert verdict.grades == {"wait-for-change-dropped": "fail", "live-migration": "pass"}, verdict.explain()


def test_the_service_enabled_again_discriminates(forewarn_conformance, tmp_path):
    """The case runs on a server of its own (--require-enabling, a slow enabling answer): the reference handler
    waits for the slow answer; one that gives up after 2 s stops."""
    verdict = forewarn_conformance(**options("handler.py", "azure", ""), cases=["service-reenabled"])
    verdict.assert_passes()
    given = options("handler.py", "azure", "impatient")
    verdict = forewarn_conformance(**given, cases=["service-reenabled", "own-reboot"])
    assert verdict.grades == {"service-reenabled": "fail", "own-reboot": "pass"}, verdict.explain()
