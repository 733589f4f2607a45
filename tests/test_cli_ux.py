"""A new user's first hour with the CLI and the control API: what it says, and what it accepts."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import requests

from helpers import ROOT, Server, forewarn, free_port


def _without(args: list[str], option: str) -> list[str]:
    """``args`` less ``option`` and its value."""
    at = args.index(option)
    return args[:at] + args[at + 2:]


def test_restart_without_clock_keeps_the_stored_manual_clock(tmp_path):
    with Server(tmp_path) as first:
        first.advance("1h")
        before = first.get("/v1/clock")
    assert before["mode"] == "manual"
    again = Server(tmp_path, fleet_text=None, db=first.db)
    again.args = _without(again.args, "--clock")
    with again:
        clock = again.get("/v1/clock")
        assert clock["mode"] == "manual"
        assert clock["now"] == before["now"]
    log = again.log_path.read_text()
    assert "clock: manual, as stored in the database" in log


def test_restart_with_clock_given_changes_it_and_says_so(tmp_path):
    with Server(tmp_path) as first:
        pass
    again = Server(tmp_path, fleet_text=None, db=first.db, clock="real")
    with again:
        assert again.get("/v1/clock")["mode"] == "real"
    assert "clock: real, as given (--clock/--speed); the database had manual" in again.log_path.read_text()


def test_document_prints_the_exact_bytes_imds_serves(tmp_path):
    with Server(tmp_path) as server:
        server.schedule(type="Freeze", vms=["solo"])
        served = server.scheduled_events()  # the shared metadata endpoint answers as the default VM, solo
        run = forewarn(server, "document", "solo")
        pretty = forewarn(server, "document", "solo", "--pretty")
    assert served.status_code == 200
    assert run.stdout.encode() == served.content
    assert json.loads(pretty.stdout) == json.loads(served.content)
    assert "\n  " in pretty.stdout


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forewarn", "serve", "--fleet", "demo", "--db", ":memory:", *args],
                          capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT / "src")})


@pytest.mark.parametrize("option, what", [("--port", "control API"), ("--imds-port", "metadata endpoint"),
                                          ("--arm-port", "ARM API"), ("--ec2-port", "EC2 API")])
def test_a_taken_port_is_named_with_the_option_that_sets_it(option, what):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {name: str(free_port()) for name in ("--port", "--imds-port", "--arm-port", "--ec2-port")}
        ports[option] = str(port)
        run = _serve(*(item for pair in ports.items() for item in pair))
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith(f"forewarn: cannot listen on 127.0.0.1:{port} for the {what} (set by ")
    assert option in message and "Address already in use" in message


def test_a_port_out_of_range_is_a_usage_error():
    run = _serve("--port", "70000")
    assert run.returncode == 2 and "Traceback" not in run.stderr and "70000" in run.stderr
