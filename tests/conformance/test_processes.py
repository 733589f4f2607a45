"""What a handler's process is given: its machine, its metadata URL and its own directory for the case, in its
arguments and its environment; the probes get the same."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forewarn.conformance.processes import HandlerProcess, port_names, probe
from helpers import takes_ctrl_c


def test_the_handler_gets_its_machine_url_and_directory(tmp_path):
    state_dir = tmp_path / "WestNO_0.state"
    state_dir.mkdir()
    argv = ["agent", "--endpoint", "{metadata_url}", "--state", "{state_dir}/state.json", "--name", "{machine}"]
    handler = HandlerProcess(argv, "WestNO_0", "http://127.0.0.1:9", tmp_path / "WestNO_0.log", state_dir)
    assert handler.command == [
        "agent",
        "--endpoint",
        "http://127.0.0.1:9",
        "--state",
        f"{state_dir}/state.json",
        "--name",
        "WestNO_0",
    ]
    assert handler.env["FOREWARN_STATE_DIR"] == str(state_dir) and handler.env["FOREWARN_MACHINE"] == "WestNO_0"


def test_a_probe_sees_the_machines_directory(tmp_path: Path):
    state_dir = tmp_path / "WestNO_0.state"
    state_dir.mkdir()
    drained = 'test -f "$FOREWARN_STATE_DIR/drained"'
    assert not probe(drained, "WestNO_0", "http://127.0.0.1:9", state_dir)
    (state_dir / "drained").touch()
    assert probe(drained, "WestNO_0", "http://127.0.0.1:9", state_dir)


def test_a_port_placeholder_is_the_cases_port_for_that_name(tmp_path):
    argv = ["agent", "--peer", "vm-a=http://127.0.0.1:{port:vm-a}", "--peer", "vm-b=http://127.0.0.1:{port:vm-b}"]
    assert port_names([*argv, "{port:vm-a}"]) == ["vm-a", "vm-b"]
    ports = {"vm-a": 20001, "vm-b": 20002}
    for machine in ("vm-a", "vm-b"):  # every machine of the case gets the same list
        handler = HandlerProcess(argv, machine, "http://127.0.0.1:9", tmp_path / "log", tmp_path, ports=ports)
        assert handler.command[2:5:2] == ["vm-a=http://127.0.0.1:20001", "vm-b=http://127.0.0.1:20002"]


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name: state, parent, process group, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def group_members(group: int) -> list[int]:
    """The processes of process group ``group`` that run (a zombie, ended but not yet reaped by whoever adopted it,
    does not)."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            fields = stat_fields(int(entry.name)) if entry.name.isdigit() else []
        except (FileNotFoundError, ProcessLookupError):  # ended while listed
            continue
        if fields and int(fields[2]) == group and fields[0] != "Z":
            members.append(int(entry.name))
    return members


@pytest.mark.parametrize(
    "stop, status",
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGKILL, -signal.SIGKILL)],
    ids=["SIGTERM", "Ctrl-C", "SIGKILL"],
)
def test_a_signal_stops_the_run_and_its_handlers(tmp_path, stop, status):
    """A CI runner's cancel (SIGTERM), Ctrl-C, or a hard kill (SIGKILL, which the battery cannot handle: each handler's
    guard is told by the kernel that the battery ended): `forewarn conformance run` ends, its cases under way (two,
    side by side) ended, and each handler's whole process group gone: the shell, and the job it left in the
    background, not left running."""
    logs = tmp_path / "logs"
    # the shell and the job it leaves in the background; then the shell becomes a second job
    handler = 'sleep 600 & echo $$ $! > "$FOREWARN_STATE_DIR/pids"; exec sleep 600'
    argv = [sys.executable, "-m", "forewarn", "conformance", "run", "--cloud", "azure", "--jobs", "2"]
    argv += ["--cases", "own-freeze,own-reboot,own-redeploy", "--logs", str(logs), "--", "sh", "-c", handler]
    run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=takes_ctrl_c)
    pid_files = [logs / case / "WestNO_0.state" / "pids" for case in ("own-freeze", "own-reboot")]
    deadline = time.monotonic() + 60
    while not all(file.exists() and len(file.read_text().split()) == 2 for file in pid_files):
        assert time.monotonic() < deadline and run.poll() is None, run.stderr.read() if run.stderr else ""
        time.sleep(0.1)
    groups = []
    for file in pid_files:
        shell, job = (int(pid) for pid in file.read_text().split())
        group = int(stat_fields(shell)[2])
        assert {shell, job} <= set(group_members(group)), "the handler and its job run in a group of their own"
        groups.append(group)
    run.send_signal(stop)
    assert run.wait(60) == status
    deadline = time.monotonic() + 10
    while any(group_members(group) for group in groups) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for group in groups for pid in group_members(group)]
    assert not (logs / "own-redeploy").exists()  # no case started after the signal


def test_a_handler_that_cannot_run_exits_127_and_says_why(tmp_path):
    handler = HandlerProcess(
        ["/nonexistent/handler", "--flag"], "WestNO_0", "http://127.0.0.1:9", tmp_path / "log", tmp_path
    )
    handler.start()
    assert handler.process is not None and handler.process.wait(30) == 127
    assert handler.exited() == 127
    assert "cannot run /nonexistent/handler:" in (tmp_path / "log").read_text()


def handler_status(handler: HandlerProcess) -> int:
    deadline = time.monotonic() + 30
    while (status := handler.exited()) is None:
        assert time.monotonic() < deadline, "the handler's exit was not reported"
        time.sleep(0.05)
    return status


@pytest.mark.parametrize("ending, status", [("exit 3", 3), ("kill -TERM $$", -signal.SIGTERM)], ids=["exit", "signal"])
def test_a_handlers_end_is_reported_at_once_and_the_job_it_left_is_stopped_with_the_run(tmp_path, ending, status):
    """The handler's status comes as it ends (as a return code: minus the signal that ended it), while the job its
    shell left in the background still runs; the battery's stop ends that job too."""
    script = f'sleep 600 & echo $! > "$FOREWARN_STATE_DIR/job"; {ending}'
    handler = HandlerProcess(["sh", "-c", script], "WestNO_0", "http://127.0.0.1:9", tmp_path / "log", tmp_path)
    handler.start()
    try:
        assert handler_status(handler) == status
        job = int((tmp_path / "job").read_text())
        assert handler.process is not None and running(job) and int(stat_fields(job)[2]) == handler.process.pid
    finally:
        handler.stop()
    assert handler.process.returncode is not None and not running(job)


def running(pid: int) -> bool:
    try:
        return stat_fields(pid)[0] != "Z"
    except FileNotFoundError:
        return False
