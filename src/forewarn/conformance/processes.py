"""The handler's processes (one per machine) and the user's probes.

The command gets the machine's metadata endpoint three ways, so that an unmodified handler can use whichever it
reads: ``{metadata_url}`` and ``{machine}`` in its arguments are replaced; ``FOREWARN_METADATA_URL`` and
``FOREWARN_MACHINE`` are set; and ``HTTP_PROXY`` points at the same observing proxy, for a handler that hard-codes
http://169.254.169.254 and whose HTTP client honours it.

Each machine of a case also has a directory of its own, its disk for that case (``{state_dir}``,
``FOREWARN_STATE_DIR``): empty when the case starts, kept across the battery's kill and restart. A handler that keeps
its state in a file starts each case as a new machine would, although the reset server gives the events of
different cases the same ids; the probes get the same directory, to check a marker the handler's drain leaves there."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy")
BYPASS_VARIABLES = ("NO_PROXY", "no_proxy")


def handler_environment(machine: str, metadata_url: str, state_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in BYPASS_VARIABLES}
    env.update({"FOREWARN_MACHINE": machine, "FOREWARN_METADATA_URL": metadata_url})
    env["FOREWARN_STATE_DIR"] = str(state_dir)
    env.update(dict.fromkeys(PROXY_VARIABLES, metadata_url))
    return env


def expanded(command: Sequence[str], machine: str, metadata_url: str, state_dir: Path) -> list[str]:
    given = {"{metadata_url}": metadata_url, "{machine}": machine, "{state_dir}": str(state_dir)}
    parts = []
    for part in command:
        for placeholder, value in given.items():
            part = part.replace(placeholder, value)
        parts.append(part)
    return parts


class HandlerProcess:
    """One machine's handler: started, killed and started again by the runner; its output goes to a log file."""

    def __init__(self, command: Sequence[str], machine: str, metadata_url: str, log: Path, state_dir: Path):
        self.command = expanded(command, machine, metadata_url, state_dir)
        self.env = handler_environment(machine, metadata_url, state_dir)
        self.machine = machine
        self.log = log
        self.process: subprocess.Popen | None = None
        self.killed_by_us = False

    def start(self) -> None:
        self.killed_by_us = False
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def exited(self) -> int | None:
        """The exit status of a process that ended on its own, else None."""
        if self.process is None or self.killed_by_us:
            return None
        return self.process.poll()

    def signal(self, name: str) -> None:
        if self.process is not None and self.process.poll() is None:
            self.killed_by_us = True
            os.killpg(self.process.pid, getattr(signal, name))
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.killed_by_us = True
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(3)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def probe(command: str, machine: str, metadata_url: str, state_dir: Path) -> bool:
    """Whether the user's probe says yes (exits 0) for ``machine`` now."""
    env = handler_environment(machine, metadata_url, state_dir)
    try:
        return subprocess.run(command, shell=True, env=env, capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def wait_a_little(seconds: float) -> None:
    time.sleep(max(0.0, seconds))
