"""``--server`` as users give it: without a scheme, and pointed at another port of the server than the control API
(cli/ports.py). Each answer says what is wrong and where the control API is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import ROOT, Server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("pointers")) as running:
        yield running


def cli(server_option: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forewarn", "--server", server_option, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )


def test_a_server_given_without_a_scheme_is_taken_as_http(server):
    run = cli(f"127.0.0.1:{server.port}", "clock")
    assert run.returncode == 0, run.stderr
    assert "(manual clock; next deadline: " in run.stdout


@pytest.mark.parametrize("given", ["ftp://127.0.0.1:8170", "127.0.0.1:port", "http://:8170"])
def test_a_server_that_is_no_http_url_is_a_usage_error(given):
    run = cli(given, "events")
    assert run.returncode == 2
    assert f"Invalid value for '--server': {given!r} is not the URL of a forewarn control API" in run.stderr


@pytest.mark.parametrize(
    "port, named",
    [
        ("imds_port", "the metadata port (--imds-port: Azure IMDS, EC2 IMDS and Compute Engine metadata)"),
        ("arm_port", "the Azure ARM port (--arm-port)"),
        ("ec2_port", "the EC2 API port (--ec2-port)"),
        ("gce_port", "the Compute Engine API port (--gce-port)"),
    ],
)
def test_a_server_pointed_at_another_port_is_told_which_it_is(server, port, named):
    pointed = f"http://127.0.0.1:{getattr(server, port)}"
    run = cli(pointed, "events")
    assert run.returncode == 1
    assert run.stderr.startswith(f"forewarn: {pointed} is {named} of a forewarn server, not its control API; ")
    assert 'lists as "control API"' in run.stderr or "the control API answers at" in run.stderr
    assert "Not found" not in run.stderr and "MissingApiVersionParameter" not in run.stderr


def test_a_refusal_by_the_control_api_itself_is_left_as_it_is(server):
    run = cli(server.control, "cancel", "no-such-event")
    assert run.returncode == 1
    assert "not its control API" not in run.stderr
