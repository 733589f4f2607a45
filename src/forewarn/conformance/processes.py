"""The handler's processes (one per machine) and the user's probes.

The command gets the machine's metadata endpoint three ways, so that an unmodified handler can use whichever it
reads: ``{metadata_url}`` and ``{machine}`` in its arguments are replaced; ``FOREWARN_METADATA_URL`` and
``FOREWARN_MACHINE`` are set; and ``HTTP_PROXY`` points at the same observing proxy, for a handler that hard-codes
http://169.254.169.254 and whose HTTP client honours it. For a case with an ``endpoint`` (a queue-mode handler),
the same URL leads to that port of the server instead; ``{endpoint_url}`` (``FOREWARN_ENDPOINT_URL``) names it in
either case, and the case's own placeholders (``{queue_url}``, ``FOREWARN_QUEUE_URL``) come the same two ways.

Each machine of a case also has a directory of its own, its disk for that case (``{state_dir}``,
``FOREWARN_STATE_DIR``): empty when the case starts, kept across the battery's kill and restart. A handler that keeps
its state in a file starts each case as a new machine would, although the reset server gives the events of
different cases the same ids; the probes get the same directory, to check a marker the handler's drain leaves there.

Handlers that talk to each other (an agent asking its peers whether they drained) need addresses no other case
running at the same time holds: ``{port:NAME}`` is a free port drawn for NAME in this run of the case, the same in
every machine's command, so one peers list (``--peer vm-a=http://127.0.0.1:{port:vm-a}``) serves every machine."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy")
BYPASS_VARIABLES = ("NO_PROXY", "no_proxy")
SANDBOX_URL = "http://169.254.169.254"  # the metadata address inside a sandbox (docs/sandbox.md)
PORT_PLACEHOLDER = re.compile(r"\{port:([^{}]+)\}")
# A handler runs in a session of its own, under a guard that ends its whole process group when the battery ends, even
# killed outright (guard.py); the guard reports the handler's exit status on a pipe the moment the handler ends.
GUARD = Path(__file__).with_name("guard.py")


def handler_environment(
    machine: str, metadata_url: str, state_dir: Path, proxied: bool = True, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``proxied``: ``HTTP_PROXY`` points at the metadata URL; else no proxy is set at all (in a sandbox, where
    the metadata address itself reaches the machine's endpoint, and nothing else is reachable). ``extra``: the
    case's other placeholders, each as ``FOREWARN_<NAME>``."""
    left_out = BYPASS_VARIABLES if proxied else (*BYPASS_VARIABLES, *PROXY_VARIABLES)
    env = {k: v for k, v in os.environ.items() if k not in left_out}
    env.update({"FOREWARN_MACHINE": machine, "FOREWARN_METADATA_URL": metadata_url})
    env["FOREWARN_STATE_DIR"] = str(state_dir)
    env["FOREWARN_ENDPOINT_URL"] = metadata_url
    env.update((f"FOREWARN_{name.upper()}", value) for name, value in (extra or {}).items())
    if proxied:
        env.update(dict.fromkeys(PROXY_VARIABLES, metadata_url))
    return env


def resolved(placeholders: Mapping[str, str], endpoint_url: str) -> dict[str, str]:
    """A case's placeholders with ``{endpoint_url}`` in their values replaced."""
    return {name: value.replace("{endpoint_url}", endpoint_url) for name, value in placeholders.items()}


def port_names(command: Sequence[str]) -> list[str]:
    """The names of the ``{port:NAME}`` placeholders of ``command``, each once, in order."""
    return list(dict.fromkeys(name for part in command for name in PORT_PLACEHOLDER.findall(part)))


def expanded(
    command: Sequence[str],
    machine: str,
    metadata_url: str,
    state_dir: Path,
    ports: dict[str, int] | None = None,
    extra: Mapping[str, str] | None = None,
) -> list[str]:
    given = {"{metadata_url}": metadata_url, "{machine}": machine, "{state_dir}": str(state_dir)}
    given.update({f"{{port:{name}}}": str(port) for name, port in (ports or {}).items()})
    given["{endpoint_url}"] = metadata_url
    given.update((f"{{{name}}}", value) for name, value in (extra or {}).items())
    parts = []
    for part in command:
        for placeholder, value in given.items():
            part = part.replace(placeholder, value)
        parts.append(part)
    return parts


class HandlerProcess:
    """One machine's handler: started, killed and started again by the runner; its output goes to a log file."""

    def __init__(
        self,
        command: Sequence[str],
        machine: str,
        metadata_url: str,
        log: Path,
        state_dir: Path,
        inside: Sequence[str] = (),
        ports: dict[str, int] | None = None,
        placeholders: Mapping[str, str] | None = None,
    ):
        """``inside``: what runs the command in the machine's sandbox (``ip netns exec NAME``); the command then
        gets the sandbox's metadata address, and no proxy. ``ports``: the case's ``{port:NAME}`` values;
        ``placeholders``: the case's own (cases.py)."""
        url = SANDBOX_URL if inside else metadata_url
        extra = resolved(placeholders or {}, url)
        self.command = [*inside, *expanded(command, machine, url, state_dir, ports, extra)]
        self.env = handler_environment(machine, url, state_dir, proxied=not inside, extra=extra)
        self.machine = machine
        self.log = log
        self.process: subprocess.Popen | None = None
        self.report: int | None = None  # the guard's pipe: the handler's exit status, written when it ends
        self.status: int | None = None
        self.killed_by_us = False

    def start(self) -> None:
        self.close_report()
        self.killed_by_us = False
        self.status = None
        self.report, write_end = os.pipe()
        os.set_blocking(self.report, False)
        guarded = [sys.executable, "-I", str(GUARD), str(os.getpid()), str(write_end), *self.command]
        try:
            with self.log.open("ab") as out:
                self.process = subprocess.Popen(
                    guarded,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    pass_fds=(write_end,),
                )
        finally:
            os.close(write_end)

    def exited(self) -> int | None:
        """The exit status of a handler that ended on its own, else None. Its group may live on (a shell's
        background job) until the battery stops it."""
        if self.process is None or self.killed_by_us:
            return None
        if self.status is None and self.report is not None:
            try:
                given = os.read(self.report, 64)
            except BlockingIOError:
                return None
            if given:
                self.status = int(given)
            elif self.process.poll() is not None:  # the guard ended without a word: killed itself
                self.status = self.process.returncode
            if self.status is not None:
                self.close_report()
        return self.status

    def signal(self, name: str) -> None:
        """The signal to the handler's whole group, which may take 10 s to end, then is killed."""
        if self.process is not None and self.process.poll() is None:
            self.killed_by_us = True
            self.end_group(getattr(signal, name), 10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.killed_by_us = True
            self.end_group(signal.SIGTERM, 3)
        self.close_report()

    def end_group(self, number: int, grace: float) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, number)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def close_report(self) -> None:
        if self.report is not None:
            os.close(self.report)
            self.report = None


def probe(command: str, machine: str, metadata_url: str, state_dir: Path) -> bool:
    """Whether the user's probe says yes (exits 0) for ``machine`` now."""
    env = handler_environment(machine, metadata_url, state_dir)
    try:
        return subprocess.run(command, shell=True, env=env, capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def wait_a_little(seconds: float) -> None:
    time.sleep(max(0.0, seconds))
