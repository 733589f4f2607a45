"""--sandbox: the handler runs in a sandbox of its machine (docs/sandbox.md), reaching http://169.254.169.254 with no
proxy set, and the battery still sees its every call. Needs root (network namespaces): skipped otherwise."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from forewarn.cli.main import cli
from forewarn.sandbox import unavailable_reason

HANDLER = Path(__file__).parent / "handlers" / "handler.py"
REASON = unavailable_reason() if os.geteuid() == 0 else "the sandbox needs root"


@pytest.mark.skipif(REASON is not None, reason=str(REASON))
def test_a_handler_in_the_sandbox_is_graded(forewarn_conformance, tmp_path):
    # The metadata address as the handler would hard-code it; the sandbox sets no HTTP_PROXY.
    command = [sys.executable, str(HANDLER), "--endpoint", "http://169.254.169.254", "--machine", "{machine}"]
    verdict = forewarn_conformance(
        [*command, "--state", "{state_dir}"],
        clouds=["azure"],
        cases=["own-freeze", "other-vm-event"],
        drained='test -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
        sandbox=True,
    )
    verdict.assert_passes()


def test_where_the_sandbox_cannot_run_the_option_says_why_and_runs_nothing(monkeypatch):
    import forewarn.sandbox

    monkeypatch.setattr(forewarn.sandbox, "unavailable_reason", lambda: "the sandbox needs root: run it with sudo")
    result = CliRunner().invoke(cli, ["conformance", "run", "--sandbox", "--cases", "own-freeze", "--", "true"])
    assert result.exit_code == 1, result.output
    assert "the sandbox needs root: run it with sudo" in result.output
