"""A private ``forewarn serve`` for one scenario run: in-memory database, free loopback ports, fixed seed."""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from forewarn.scenarios.spec import Scenario
from forewarn.scenarios.testnet import free_ports

DEFAULT_SEED = "forewarn-scenario"


#: Starts of a server tried, each on newly chosen ports, before "Address already in use" is final: a port found
#: free can be bound by someone else (another test worker, another scenario run) before the server binds it.
START_TRIES = 3


class ServerError(Exception):
    """The private server did not start; the message carries the end of its log."""


class PortTaken(ServerError):
    """The server could not listen: one of its ports was taken between the choice and the bind."""


class ForkedServe:
    """A ``forewarn serve`` forked from a process that imported the server once (multiprocessing's forkserver), with
    the part of ``subprocess.Popen``'s interface that callers use. Its own process, session, log and environment, as
    a started one has; what it skips is the interpreter's start and the imports, about 0.45 s of CPU of a 0.5 s start
    (FastAPI's import alone is 0.22 s)."""

    def __init__(self, process: multiprocessing.process.BaseProcess):
        self._process = process
        self.args = ["forewarn", "serve"]

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self._process.exitcode

    def send_signal(self, number: int) -> None:
        if self._process.exitcode is None:
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:  # exited and reaped by the forking process since the check
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_preloaded: multiprocessing.context.ForkServerContext | None = None


def preload_servers() -> None:
    """From now on, this process's :func:`launch_serve` forks each server from a process that has imported the server
    once, instead of starting an interpreter for it: for test suites, which start hundreds. A single start gains
    nothing (the forking process imports as much), so the CLI does not."""
    global _preloaded
    if _preloaded is None:
        # The forking process imports the server from the first `forewarn` on its path, and multiprocessing does not
        # hand it this process's sys.path: without this, a checkout tested with another checkout's installed
        # forewarn (a git worktree beside the editable install) would fork servers of the other checkout's code.
        os.environ["PYTHONPATH"] = _with_package_root(os.environ.get("PYTHONPATH"))
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["forewarn.cli.main", "forewarn.cli.serve", "forewarn.server.preload"])
        _preloaded = context


def _with_package_root(python_path: str | None) -> str:
    """``python_path`` with the directory holding this `forewarn` first (once)."""
    package_root = str(Path(__file__).resolve().parent.parent.parent)
    rest = [entry for entry in (python_path or "").split(os.pathsep) if entry and entry != package_root]
    return os.pathsep.join([package_root, *rest])


def _serve_in_fork(args: list[str], log_path: str, env: dict[str, str]) -> None:
    """The forked server's life, as ``python -m forewarn serve ARGS`` would live it."""
    os.setsid()
    os.environ.clear()
    os.environ.update(env)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)
    sys.argv = ["forewarn", "serve", *args]
    # by name, as `python -m forewarn` runs it: the package's entry point, already imported by the forking process
    runpy.run_module("forewarn", run_name="__main__", alter_sys=True)


def launch_serve(
    args: list[str], log_path: Path, control_url: str, timeout: float = 30.0
) -> subprocess.Popen | ForkedServe:
    """Start ``forewarn serve ARGS`` as a subprocess logging to ``log_path`` (appended), and return once its control
    API answers ``/healthz``. Raises :class:`ServerError` with the end of the log if it exits or stays silent."""
    env = dict(os.environ)
    env.pop("FOREWARN_CONTROL_TOKEN", None)  # the server's options are the caller's args, not this shell's token
    env["PYTHONPATH"] = _with_package_root(env.get("PYTHONPATH"))
    args = [*args, "--exit-with-parent"]  # not one server left behind by a runner or a test process killed
    process: subprocess.Popen | ForkedServe
    if _preloaded is not None:
        # daemon: a server left running when this process exits is stopped with it, not waited for
        forked = _preloaded.Process(target=_serve_in_fork, args=(args, str(log_path), env), daemon=True)
        forked.start()
        process = ForkedServe(forked)
    else:
        with open(log_path, "ab") as log:
            # Its own session: a Ctrl-C at the terminal reaches the runner, which still reads the final state from
            # the server before it stops it.
            process = subprocess.Popen(
                [sys.executable, "-m", "forewarn", "serve", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
    deadline = time.monotonic() + timeout
    try:
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    tail = _log_tail(log_path)
                    failure = PortTaken if "Address already in use" in tail else ServerError
                    raise failure(f"the server exited with status {process.returncode}:\n{tail}")
                try:
                    if answered_by(client.get(f"{control_url}/healthz"), process):
                        return process
                except httpx.TransportError:
                    pass
                time.sleep(0.03)
    except BaseException:  # interrupted while waiting: in its own session, nothing else would stop it
        stop_process(process)
        raise
    stop_process(process)
    raise ServerError(f"the server did not answer within {timeout:g} s:\n{_log_tail(log_path)}")


def answered_by(health: httpx.Response, process: subprocess.Popen | ForkedServe) -> bool:
    """Whether ``process`` gave this ``/healthz`` answer. Ports are chosen free, but another starter (a test worker, a
    scenario run) can choose one of them too and bind it first: this server then exits ("Address already in use"),
    and the other one's ``/healthz`` on the same port must not pass for it."""
    if health.status_code != 200:
        return False
    try:
        body = health.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("pid") == process.pid


def stop_process(process: subprocess.Popen | ForkedServe, grace: float = 10.0) -> None:
    """SIGTERM, and SIGKILL if the process has not exited ``grace`` seconds later: a caller that is stopping must
    not fail (or hang) on a server that will not."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _log_tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").strip().splitlines()[-20:])
    except OSError:
        return ""


class PrivateServer:
    """``forewarn serve`` as a subprocess with the scenario's fleet: ``--db :memory:``, a manual clock (or a real
    one at ``speed``), the scenario's start time and server settings. Use as a context manager."""

    def __init__(
        self,
        scenario: Scenario,
        clock: str = "manual",
        speed: float = 1.0,
        seed: str = DEFAULT_SEED,
        startup_timeout: float = 30.0,
    ):
        self.scenario = scenario
        self.clock = clock
        self.speed = speed
        self.seed = seed
        self.startup_timeout = startup_timeout
        self.port, self.imds_port, self.ec2_port = 0, 0, 0  # chosen at each try of start()
        self.process: subprocess.Popen | ForkedServe | None = None
        self.workdir: Path | None = None

    @property
    def control(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ec2(self) -> str:
        return f"http://127.0.0.1:{self.ec2_port}"

    @property
    def imds(self) -> str:
        return f"http://127.0.0.1:{self.imds_port}"

    def args(self, fleet_file: Path) -> list[str]:
        args = [
            "--fleet",
            str(fleet_file),
            "--db",
            ":memory:",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--imds-host",
            "127.0.0.1",
            "--imds-port",
            str(self.imds_port),
            "--arm-port",
            "0",
            "--ec2-port",
            str(self.ec2_port),
            "--gce-port",
            "0",
            "--clock",
            self.clock,
            "--seed",
            self.seed,
            "--log-level",
            "warning",
        ]
        if self.clock == "real":
            args += ["--speed", f"{self.speed:g}"]
        if self.scenario.start is not None:
            args += ["--start", self.scenario.start.isoformat().replace("+00:00", "Z")]
        return args + self.scenario.server_args()

    def start(self) -> PrivateServer:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"forewarn-scenario-{self.scenario.name}-"))
        fleet_file = self.workdir / "fleet.yaml"
        fleet_file.write_text(self.scenario.fleet_text)
        for attempt in range(1, START_TRIES + 1):
            self.port, self.imds_port, self.ec2_port = free_ports(3)
            try:
                self.process = launch_serve(
                    self.args(fleet_file), self.workdir / "server.log", self.control, self.startup_timeout
                )
                return self
            except ServerError as error:
                if isinstance(error, PortTaken) and attempt < START_TRIES:
                    continue
                self.stop()
                raise ServerError(str(error).replace("the server", "the private server", 1)) from None
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> PrivateServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
