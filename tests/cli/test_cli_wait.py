"""``forewarn wait``: a script starts ``forewarn serve ... &`` and waits with it until the server takes commands
(cli/wait.py); the doc pages do so before their first command."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from helpers import ROOT, Server, free_port


def wait_command(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "forewarn", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src")},
    )


def test_it_waits_for_a_server_started_after_it(tmp_path):
    server = Server(tmp_path)
    waiting = wait_command("--server", server.control, "wait", "--timeout", "60")
    time.sleep(0.5)  # the command is polling a port nothing listens on yet
    assert waiting.poll() is None, waiting.communicate()
    with server:
        if server.control not in waiting.args:
            pytest.fail("the server's port was taken by another process meanwhile: run the test again")
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        assert out.startswith(f"forewarn answers at {server.control} (version ")
        assert server.get("/v1/clock")["mode"] == "manual"  # it answered: the next command can go


def test_it_gives_up_after_its_timeout_and_says_why():
    port = free_port()
    started = time.monotonic()
    waiting = wait_command("--server", f"127.0.0.1:{port}", "wait", "--timeout", "0.5")
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 1 and out == ""
    assert err.startswith(f"forewarn: http://127.0.0.1:{port} did not answer within 0.5 s: nothing answered")
    assert "Is `forewarn serve` running" in err
    assert time.monotonic() - started < 10


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("wait")) as running:
        yield running


def test_another_port_of_a_server_fails_at_once_with_where_the_control_api_is(server):
    started = time.monotonic()
    waiting = wait_command("--server", server.imds, "wait", "--timeout", "60")
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 1
    assert err.startswith(f"forewarn: {server.imds} is the metadata port (--imds-port: ")
    assert time.monotonic() - started < 30  # not the whole timeout


def test_a_url_is_waited_for_until_anything_answers_it(server):
    waiting = wait_command("wait", f"127.0.0.1:{server.imds_port}/metadata/scheduledevents")
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert out == f"http://127.0.0.1:{server.imds_port}/metadata/scheduledevents answers (HTTP 400)\n"


def test_a_bad_timeout_is_a_usage_error():
    waiting = wait_command("wait", "--timeout", "0")
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 2 and "Invalid value for '--timeout'" in err
