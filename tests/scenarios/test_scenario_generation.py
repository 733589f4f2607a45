"""Generated scenarios and long runs: reproducible generation, large fleets, deadlines passed in one move,
interrupted runs and their partial timeline, progress output."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from forewarn.scenarios import load_scenario
from forewarn.scenarios import server as private_server
from forewarn.scenarios.api import Api
from forewarn.scenarios.runner import RunInterrupted, Runner, RunOptions, StopRequest, run_scenario
from helpers import ROOT, child_processes
from scenario_running import cli, failures


class CountingApi(Api):
    """The runner's client, counting its requests by method and path."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests: list[tuple[str, str]] = []

    def _send(self, method, url, **kwargs):
        self.requests.append((method, url.split("/", 3)[-1]))
        return super()._send(method, url, **kwargs)


def generated(tmp_path, vms: int, duration: str, per_hour: str, observe: str, seed: str = "1") -> str:
    fleet = tmp_path / "fleet.yaml"
    if not fleet.exists():
        cli(
            "fleet",
            "generate",
            "--vms",
            str(vms),
            "--vms-per-host",
            "10",
            "--spot-share",
            "0.5",
            "--seed",
            "g",
            "--out",
            str(fleet),
        )
    out = tmp_path / f"random-{seed}.yaml"
    cli(
        "scenario",
        "generate",
        "--fleet",
        str(fleet),
        "--seed",
        seed,
        "--per-hour",
        per_hour,
        "--observe",
        observe,
        "--duration",
        duration,
        "--start",
        "2026-04-20T00:00:00Z",
        "--out",
        str(out),
    )
    return str(out)


def test_a_large_fleet_costs_no_more_requests_per_step_than_a_small_one(tmp_path):
    """2,000 VMs: after a step or a move the runner reads only what the journal says changed, never every VM, and
    deadlines that concern nothing it records are passed in one move. (Before: 20 documents, all 2,000 VM rows and
    the clock after every move: 12,663 requests for these 118 steps, 524 of them all 2,000 VM rows.)"""
    from forewarn.scenarios.server import PrivateServer

    scenario = load_scenario(generated(tmp_path, 2000, "3h", "40", "20")).resolve("realistic")
    with PrivateServer(scenario) as private:
        api = CountingApi(private.control, private.ec2)
        try:
            timeline = Runner(scenario, api).run()
        finally:
            api.close()
    assert timeline["aborted"] is None and timeline["settled"], failures(timeline)
    steps = len(scenario.steps)
    assert steps > 80 and not [a for a in timeline["actions"] if "error" in a]
    full_reads = [path for method, path in api.requests if path == "v1/vms"]
    assert len(full_reads) <= 3, len(full_reads)  # at the start, and once the run's events are over
    assert len(api.requests) < 15 * steps, (len(api.requests), steps)  # 1,226 when written


def test_passing_deadlines_in_one_move_records_the_same_timeline(tmp_path):
    path = generated(tmp_path, 120, "4h", "30", "3")
    every = run_scenario(load_scenario(path).resolve("realistic"), options=RunOptions(every_deadline=True))
    fewer = run_scenario(load_scenario(path).resolve("realistic"))
    assert every["aborted"] is None and fewer["aborted"] is None and every["settled"] and fewer["settled"]
    for key in ("vms", "vm_states", "instances", "actions", "approvals", "events", "end"):
        assert every[key] == fewer[key], key
    assert fewer["moves"] < every["moves"] * 0.8, (fewer["moves"], every["moves"])


@pytest.mark.parametrize("signal_name, status", [("SIGTERM", 143), ("SIGINT", 130)])
def test_an_interrupted_run_writes_a_partial_timeline(tmp_path, signal_name, status):
    import signal

    path = generated(tmp_path, 120, "2d", "60", "120")  # thousands of steps: far from over when interrupted
    out = tmp_path / "timeline.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "forewarn", "scenario", "run", path, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    try:
        for line in process.stdout:  # the live timeline: under way once a step has created events ("-> IDs")
            if "> " in line and " -> " in line:
                break
        (server_pid,) = child_processes(process.pid)
        process.send_signal(getattr(signal, signal_name))
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == status, stderr
    assert "Traceback" not in stderr and "progress: step" in stderr
    assert f"interrupted: interrupted by {signal_name} at +" in stdout and "(partial)" in stdout
    timeline = json.loads(out.read_text())
    assert timeline["partial"] is True and timeline["interrupted"] == signal_name and not timeline["passed"]
    assert 0 < len(timeline["actions"]) < len(load_scenario(path).data["steps"])
    assert timeline["events"] and all(event["journal"] for event in timeline["events"])
    # The private server was stopped. Not "its URL is unreachable": in a parallel run another test's server may
    # take the freed port at once.
    assert not Path(f"/proc/{server_pid}").exists()
    assert not out.with_name(out.name + ".partial").exists()


def test_a_stop_whose_exception_was_lost_still_stops_the_run_at_its_next_move(tmp_path):
    """A signal handler's exception is lost where the signal lands in a finalizer, and was lost in library code that
    catches Exception (a Ctrl-C that never stopped the run): the request is kept, and the runner checks it."""
    stop = StopRequest()
    with pytest.raises(RunInterrupted):
        try:
            stop.request("SIGINT")
        except Exception:  # what click's isatty did with the handler's exception
            pass
    timeline = run_scenario(
        load_scenario(generated(tmp_path, 20, "4h", "30", "3")).resolve(), options=RunOptions(stop=stop)
    )
    assert timeline["partial"] is True and timeline["interrupted"] == "SIGINT"
    assert timeline["aborted"].startswith("interrupted by SIGINT at +00:00:00, after 0 of")


def test_a_private_server_whose_port_was_taken_meanwhile_starts_on_other_ports(monkeypatch):
    """Two scenario runs at once (two CI jobs, two test workers) can draw the same free port: the second to bind
    it tries again on new ports instead of failing the run."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        drawn, free_ports = [], private_server.free_ports

        def first_draw_taken(count):
            ports = free_ports(count)
            drawn.append(ports)
            return [taken.getsockname()[1], *ports[1:]] if len(drawn) == 1 else ports

        monkeypatch.setattr(private_server, "free_ports", first_draw_taken)
        timeline = run_scenario(load_scenario("user-reboot").resolve("fast"))
    assert timeline["passed"] is True and len(drawn) == 2


def test_progress_goes_to_stderr_and_json_is_quiet(tmp_path):
    result = cli("scenario", "run", "user-reboot", "--timing", "fast", "--out", str(tmp_path / "t.json"))
    assert "progress: step 1/1" in result.stderr and "progress:" not in result.stdout
    as_json = cli("scenario", "run", "user-reboot", "--timing", "fast", "--json")
    assert json.loads(as_json.stdout)["passed"] is True
    assert "progress:" not in as_json.stderr and "#3" not in as_json.stderr
    quiet = cli("scenario", "run", "user-reboot", "--timing", "fast", "-q", "--out", str(tmp_path / "q.json"))
    assert "progress:" not in quiet.stderr


def test_progress_on_a_terminal_is_one_line_rewritten_in_place(tmp_path):
    import os
    import pty

    main, terminal = pty.openpty()
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "forewarn",
                "scenario",
                "run",
                "user-reboot",
                "--timing",
                "fast",
                "--out",
                str(tmp_path / "t.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=terminal,
            timeout=120,
            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        )
        os.close(terminal)
        written = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            written += chunk
    finally:
        os.close(main)
    assert result.returncode == 0
    text = written.decode()
    assert "\r\x1b[Kprogress: step 1/1" in text and text.rstrip().endswith("(done)"), repr(text)
