"""launch_serve: a ``forewarn serve`` forked from the preloaded process (this suite's way, tests/conftest.py) lives
as a started one does: its own process and session, its output in its log, the caller's environment but for the
control token, and its exit status seen by the caller."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from forewarn.scenarios import server as launching
from forewarn.scenarios.server import ForkedServe, free_ports, launch_serve, stop_process
from helpers import ROOT


def serve(tmp_path, *extra: str) -> tuple[ForkedServe, str]:
    port, imds = free_ports(2)
    args = ["--fleet", "demo", "--db", ":memory:", "--port", str(port), "--imds-port", str(imds)]
    args += ["--arm-port", "0", "--ec2-port", "0", "--gce-port", "0", "--clock", "manual", *extra]
    process = launch_serve(args, tmp_path / "server.log", f"http://127.0.0.1:{port}")
    assert isinstance(process, ForkedServe)  # tests/conftest.py preloads
    return process, f"http://127.0.0.1:{port}"


def test_a_forked_server_is_a_process_and_session_of_its_own_whose_output_goes_to_its_log(tmp_path, monkeypatch):
    monkeypatch.setenv("FOREWARN_CONTROL_TOKEN", "the-callers-shell-token")
    process, control = serve(tmp_path)
    try:
        assert process.pid != os.getpid() and os.getsid(process.pid) == process.pid
        assert httpx.get(f"{control}/v1/clock").status_code == 200  # the caller's token is not the server's
        assert "forewarn serving" in (tmp_path / "server.log").read_text()
        assert process.poll() is None
    finally:
        stop_process(process)
    assert process.returncode == -signal.SIGTERM and process.poll() == -signal.SIGTERM


def test_a_forked_server_killed_or_refused_says_so_in_its_status(tmp_path):
    process, _ = serve(tmp_path)
    process.kill()
    assert process.wait(10) == -signal.SIGKILL
    with pytest.raises(launching.ServerError, match="--clock"):
        serve(tmp_path, "--clock", "sundial")  # click's usage error: status 2, the message in the log


PARENT = """
import sys, time
from pathlib import Path
from forewarn.scenarios.server import free_ports, launch_serve
port, imds = free_ports(2)
args = ["--fleet", "demo", "--db", ":memory:", "--port", str(port), "--imds-port", str(imds), "--arm-port", "0",
        "--ec2-port", "0", "--gce-port", "0", "--clock", "manual"]
server = launch_serve(args, Path(sys.argv[1]), f"http://127.0.0.1:{port}")
print(server.pid, flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()  # exited, not yet reaped by its new parent
    except FileNotFoundError:
        return False


def test_a_server_does_not_outlive_the_process_that_started_it_even_killed(tmp_path):
    """A scenario run's private server, or a test's, is in a session of its own (a Ctrl-C reaches the runner only):
    a runner killed with -9 (a CI job's timeout) used to leave it running for good, holding its ports."""
    log = tmp_path / "server.log"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(log)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        server_pid = int(parent.stdout.readline())
        assert os.getsid(server_pid) == server_pid
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while running(server_pid):
            assert time.monotonic() < deadline, "the server outlived the process that started it"
            time.sleep(0.1)
    finally:
        parent.kill()
    assert "the process that started this server" in log.read_text()
