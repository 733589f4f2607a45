"""The extension point, proved: a cloud kept outside forewarn (tests/example_cloud/, registered through
``FOREWARN_CLOUDS``) takes part in a real server end to end: its fleet-file section, its metadata key, its kind of
maintenance on the engine's clock, its control route, its CLI command, its scenario step, its stored state across a
restart. Nothing outside its package names it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import requests

from forewarn.scenarios.server import answered_by
from helpers import ROOT, T0, free_port

PACKAGE = ROOT / "tests" / "example_cloud"
ENTRY = "example_cloud.cloud:EXAMPLE"
FLEET = """
hosts: [{name: rack-1}]
example_machines:
  - {name: ex-1, host: rack-1, imds: {address: 127.0.0.41}}
  - {name: ex-2, host: rack-1, imds: {address: 127.0.0.42}}
"""
SCENARIO = """
name: example-reboot
description: A reboot of an example machine, announced 5 minutes ahead.
start: 2026-04-20T22:11:58Z
fleet:
  example_machines:
    - {name: ex-9, imds: {address: 127.0.0.49}}
steps:
  - at: 0s
    do: example-maintain
    with: {machine: ex-9, notice: 5m}
expect:
  - {example: ex-9, states: [none, announced, rebooted]}
"""


def environment() -> dict[str, str]:
    """This checkout's forewarn and the example package on the path, and the example cloud registered."""
    env = {key: value for key, value in os.environ.items() if key != "FOREWARN_CONTROL_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])
    env["FOREWARN_CLOUDS"] = ENTRY
    return env


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forewarn", *args], capture_output=True, text=True, timeout=120, env=environment()
    )


class ExampleServer:
    """``forewarn serve`` in a process of its own, started with the example cloud registered."""

    def __init__(self, tmp_path: Path):
        (tmp_path / "fleet.yaml").write_text(FLEET)
        self.db = tmp_path / "forewarn.db"
        self.fleet = tmp_path / "fleet.yaml"
        self.log = tmp_path / "server.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> ExampleServer:
        self.port, self.imds_port = free_port(), free_port()
        args = ["--db", str(self.db), "--fleet", str(self.fleet), "--port", str(self.port)]
        args += ["--imds-port", str(self.imds_port), "--arm-port", "0", "--ec2-port", "0", "--gce-port", "0"]
        args += ["--clock", "manual", "--start", T0.isoformat(), "--seed", "test", "--exit-with-parent"]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "forewarn", "serve", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment(),
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if answered_by(httpx.get(f"{self.control}/healthz", timeout=2), self.process):
                    return self
            except httpx.TransportError:  # not listening yet, or still starting up
                pass
            time.sleep(0.05)
        raise AssertionError(f"the server did not answer: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(20)

    @property
    def control(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def key(self, address: str) -> str:
        """What the machine at ``address`` reads as its maintenance key."""
        answer = requests.get(f"http://{address}:{self.imds_port}/example/v1/maintenance", timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.text

    def advance(self, by: str) -> None:
        answer = requests.post(f"{self.control}/v1/clock/advance", json={"by": by}, timeout=10)
        assert answer.status_code == 200, answer.text

    def journal_kinds(self) -> list[str]:
        entries = requests.get(f"{self.control}/v1/journal", timeout=10).json()
        return [entry["what"] for entry in entries]


@pytest.fixture
def server(tmp_path):
    started = ExampleServer(tmp_path).start()
    yield started
    started.stop()


def test_a_reboot_is_announced_by_the_cli_and_read_at_the_machines_metadata_key(server):
    assert (server.key("127.0.0.41"), server.key("127.0.0.42")) == ("NONE", "NONE")

    run = cli("--server", server.control, "example", "maintain", "ex-1", "--notice", "10m")

    assert run.returncode == 0, run.stderr
    assert run.stdout == "ex-1: reboot at 2026-04-20T22:21:58+00:00\n"
    assert (server.key("127.0.0.41"), server.key("127.0.0.42")) == ("REBOOT", "NONE")
    server.advance("9m59s")
    assert server.key("127.0.0.41") == "REBOOT"
    server.advance("1s")
    assert server.key("127.0.0.41") == "NONE"
    assert server.journal_kinds()[-2:] == ["example reboot announced", "example reboot rebooted"]


def test_the_fleet_lists_the_example_machines_with_every_clouds(server):
    machines = requests.get(f"{server.control}/v1/fleet/machines", timeout=10).json()

    assert machines == [
        {"name": "ex-1", "cloud": "example", "host": "rack-1"},
        {"name": "ex-2", "cloud": "example", "host": "rack-1"},
    ]
    listed = cli("--server", server.control, "fleet")
    as_json = cli("--server", server.control, "fleet", "--json")
    assert listed.stdout.split() == ["MACHINE", "HOST", "ex-1", "rack-1", "ex-2", "rack-1"], listed.stdout
    found = json.loads(as_json.stdout)
    assert (list(found), found["azure"]["vms"], found["example"]) == (["azure", "ec2", "gce", "example"], [], machines)


def test_what_the_example_has_none_of_is_left_out_or_refused_saying_so(server):
    dashboard = requests.get(f"{server.control}/v1/dashboard/fleet", timeout=10)
    wave = requests.post(f"{server.control}/v1/waves", json={"cloud": "example"}, timeout=10)
    caller = requests.put(f"{server.control}/v1/imds/callers/127.0.0.77", json={"machine": "ex-1"}, timeout=10)

    assert dashboard.status_code == 200, dashboard.text
    assert dashboard.json()["machines"]["name"] == []  # no panel: the page shows none of its machines
    assert wave.status_code == 400
    assert "Example has no waves" in wave.json()["error"]["message"]
    assert (caller.status_code, caller.json()["machine"], caller.json()["kind"]) == (200, "ex-1", "example_machine")


def test_the_cli_says_what_the_server_refused(server):
    unknown = cli("--server", server.control, "example", "maintain", "ex-3")
    cli("--server", server.control, "example", "maintain", "ex-1")
    twice = cli("--server", server.control, "example", "maintain", "ex-1")

    assert unknown.returncode == 1
    assert (
        unknown.stderr == "forewarn: no example machine 'ex-3'; did you mean 'ex-2' or 'ex-1'? (NotFound, HTTP 404)\n"
    )
    assert twice.returncode == 1
    assert twice.stderr == "forewarn: example machine 'ex-1' has a reboot announced already (Conflict, HTTP 409)\n"


def test_an_announced_reboot_survives_a_restart_and_still_happens(server):
    requests.post(f"{server.control}/v1/example/maintenance", json={"machine": "ex-2"}, timeout=10).raise_for_status()
    server.stop()

    server.start()

    assert server.key("127.0.0.42") == "REBOOT"
    server.advance("15m")  # the rules' notice: the deadline was set again from the stored reboot
    assert server.key("127.0.0.42") == "NONE"


def test_a_scenario_takes_the_example_step_and_waits_for_the_reboot(tmp_path):
    scenario = tmp_path / "example-reboot.yaml"
    scenario.write_text(SCENARIO)

    run = cli("scenario", "run", str(scenario), "--json")

    assert run.returncode == 0, run.stderr
    timeline = json.loads(run.stdout)
    [action] = timeline["actions"]
    assert (action["do"], action["result"][0]["machine"], action["produced"]) == (
        "example-maintain",
        "ex-9",
        ["reboot-1"],
    )
    assert (timeline["settled"], timeline["end"]) == (True, "2026-04-20T22:16:58Z")  # it waited for the reboot
    # Its observer recorded the machine, and its check of a machine read that.
    assert [entry["state"] for entry in timeline["example_machines"]["ex-9"]] == ["none", "announced", "rebooted"]
    assert [(result["what"], result["passed"]) for result in timeline["expectations"]] == [
        ("example ex-9: states", True)
    ]


def test_only_the_example_package_names_it():
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    outside = [
        name
        for name in listed
        if not name.startswith(("tests/example_cloud/", "docs/"))
        and name != "tests/test_example_cloud.py"
        and (ROOT / name).is_file()
        and "example_cloud" in (ROOT / name).read_text(errors="replace")
    ]
    assert outside == []


def test_the_example_is_a_cloud_to_the_type_checker():
    """``EXAMPLE: Cloud = ExampleCloud()`` type-checks: it has every required part (the others take the defaults)."""
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if mypy is None:
        pytest.skip("mypy is not installed beside this Python")
    checked = subprocess.run(
        [
            mypy,
            "--check-untyped-defs",
            "--no-incremental",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "-p",
            "example_cloud",
        ],
        capture_output=True,
        text=True,
        env={**environment(), "MYPYPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])},
        cwd=ROOT,
        timeout=300,
    )
    assert checked.returncode == 0, checked.stdout


def test_a_reset_empties_the_example_table_too(server):
    requests.post(f"{server.control}/v1/example/maintenance", json={"machine": "ex-1"}, timeout=10).raise_for_status()

    requests.post(f"{server.control}/v1/reset", timeout=10).raise_for_status()

    assert server.key("127.0.0.41") == "NONE"
    assert requests.get(f"{server.control}/v1/example/maintenance", timeout=10).json() == []
