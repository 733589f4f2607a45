"""forewarn-agent as a real process beside a real forewarn server, with hooks that write what they saw to a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests

from forewarn.scenarios.testnet import free_ports

ROOT = Path(__file__).resolve().parents[1]
AGENT_SOURCE = ROOT / "agent" / "src"
WAIT = 30.0


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT) -> object:
    """Until ``condition()`` is true (its value returned); the agent is another process, so its effects are
    observed, never assumed after a sleep."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class AgentProcess:
    def __init__(
        self,
        tmp_path: Path,
        name: str,
        endpoint: str,
        *args: str,
        hook: str | None = None,
        env: dict | None = None,
        listen: bool = True,  # False: no --listen, the agent finds its port itself (its own entry of the peers list)
    ):
        self.name = name
        self.env = env or {}
        self.state = tmp_path / f"{name}.state.json"
        self.hooks_log = tmp_path / f"{name}.hooks.log"
        self.log_path = tmp_path / f"{name}.agent.log"
        [self.port] = free_ports(1)
        self.hook = hook or f"{sys.executable} {ROOT / 'tests' / 'agent' / 'hook.py'} {self.hooks_log}"
        self.args = [
            "--endpoint",
            endpoint,
            "--state",
            str(self.state),
            *(["--listen", f"127.0.0.1:{self.port}"] if listen else []),
            "--on-drain",
            self.hook,
            "--on-restore",
            self.hook,
            *args,
        ]
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *more: str) -> AgentProcess:
        env = dict(os.environ, PYTHONPATH=str(AGENT_SOURCE), **self.env)
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "forewarn_agent", *self.args, *more], stderr=log, stdout=log, env=env
            )
        wait_for(self._answers, f"agent {self.name} to listen")
        return self

    def _answers(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log_path.read_text()
        try:
            health = requests.get(self.url + "/healthz", timeout=1)
            # this agent's answer, not that of a process that took the port first (this one then exits)
            return health.status_code == 200 and health.json().get("pid") == self.process.pid
        except requests.RequestException:
            return False

    def hooks(self) -> list[dict]:
        if not self.hooks_log.exists():
            return []
        return [json.loads(line) for line in self.hooks_log.read_text().splitlines() if line.strip()]

    def phases(self) -> list[tuple[str, str]]:
        return [(hook["phase"], hook["kind"]) for hook in self.hooks() if hook.get("done")]

    def polls(self) -> int:
        text = requests.get(self.url + "/metrics", timeout=2).text
        return sum(
            int(float(line.split()[-1])) for line in text.splitlines() if line.startswith("forewarn_agent_polls")
        )

    def drained(self, event_id: str) -> bool:
        return bool(requests.get(f"{self.url}/v1/events/{event_id}", timeout=2).json()["drained"])

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
