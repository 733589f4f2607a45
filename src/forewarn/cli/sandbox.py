"""``forewarn sandbox``: run programs as VMs and EC2 instances of a running server, at 169.254.169.254."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click

from forewarn.cli.common import CONTEXT, JSON_OPTION, fail, print_table

SERVER_GONE_AFTER = 30.0  # seconds without an answer from the server before `up` removes its sandboxes
EXEC_CONTEXT = {**CONTEXT, "ignore_unknown_options": True, "allow_interspersed_args": False}


@click.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples (as root: namespaces need it):
  forewarn sandbox exec WestNO_0 -- python3 agent.py     # the agent's http://169.254.169.254 is forewarn, as WestNO_0
  forewarn sandbox exec i-0a1b2c3d4e5f60718 -- curl -s http://169.254.169.254/latest/meta-data/instance-id
  forewarn sandbox up WestNO_0 WestNO_1                  # two VMs, kept until `down`
  forewarn sandbox shell WestNO_0                        # a shell as WestNO_0
  forewarn sandbox list
  forewarn sandbox down --all
Docs: docs/sandbox.md.""",
)
def sandbox():
    """Run any program as a VM or EC2 instance of the fleet, unmodified.

    Each machine gets a network namespace in which 169.254.169.254:80 (and [fd00:ec2::254]:80 for an EC2 instance)
    is the server's metadata endpoint answering as that machine, metadata.google.internal resolves to
    169.254.169.254, and no other address is reachable. Needs root and iproute2.

    The server is the one --server names (default http://127.0.0.1:8170, env FOREWARN_SERVER), on this host.
    Programs run as root, like forewarn itself: put `runuser -u USER --` before one to run it as USER."""


def _root(ctx: click.Context) -> tuple[str, str | None]:
    params = ctx.find_root().params
    return params["server"], params.get("control_token")


def _sandbox_failure(error: Exception) -> NoReturn:
    fail(str(error))


@sandbox.command(name="exec", context_settings=EXEC_CONTEXT)
@click.argument("machine")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def sandbox_exec(ctx, machine, command):
    """Run COMMAND as MACHINE (a VM name or an EC2 instance id); its exit status is this command's.

    \b
    Joins MACHINE's sandbox when `up` made one; else makes one for the command's lifetime and removes it when the
    command exits or this process is stopped (SIGTERM and SIGHUP are passed on to the command).
    Put `--` before a command that has options of its own.
    \b
    Examples:
      forewarn sandbox exec WestNO_0 -- python3 sample.py
      forewarn sandbox exec WestNO_0 -- curl -s -H Metadata:true \\
          'http://169.254.169.254/metadata/instance/compute/name?api-version=2021-02-01&format=text'"""
    sys.exit(_run_as(ctx, machine, list(command)))


@sandbox.command(name="shell", context_settings=CONTEXT)
@click.argument("machine")
@click.pass_context
def sandbox_shell(ctx, machine):
    """An interactive shell ($SHELL, else /bin/sh) as MACHINE; FOREWARN_VM names it inside.

    \b
    Example:
      forewarn sandbox shell WestNO_0
      # then: curl -s -H Metadata:true 'http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01'"""
    sys.exit(_run_as(ctx, machine, [os.environ.get("SHELL") or "/bin/sh", "-i"]))


def _run_as(ctx: click.Context, machine: str, command: list[str]) -> int:
    from forewarn.sandbox import Sandbox, SandboxError, namespaces
    from forewarn.sandbox.manager import joinable

    server, token = _root(ctx)
    child = _Child(machine)
    try:
        with child.signals():
            held = joinable(machine, server, token)
            if held is not None:
                return child.run(namespaces.exec_prefix(held.namespace, hang_up_with_parent=True) + command)
            with Sandbox(server, token) as own:
                vm = own.up(machine)
                return child.run(namespaces.exec_prefix(vm.namespace, hang_up_with_parent=True) + command)
    except SandboxError as error:
        _sandbox_failure(error)
    except _Stopped as stopped:
        return 128 + stopped.signum


class _Stopped(Exception):
    def __init__(self, signum: int):
        self.signum = signum


class _Child:
    """The program, run with SIGTERM and SIGHUP passed on to it and Ctrl-C outlasted (the terminal sends it to the
    program too), so that the sandbox is removed after the program is done. A signal that comes before the program
    runs stops the set-up, which removes what it made."""

    def __init__(self, machine: str):
        self.machine = machine
        self.process: subprocess.Popen | None = None

    @contextmanager
    def signals(self) -> Iterator[None]:
        def handle(signum: int, _frame: Any) -> None:
            if self.process is None:
                raise _Stopped(signum)
            self.process.send_signal(signum)

        previous = {number: signal.signal(number, handle) for number in (signal.SIGTERM, signal.SIGHUP)}
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, handle)
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def run(self, argv: list[str]) -> int:
        try:
            self.process = subprocess.Popen(argv, env={**os.environ, "FOREWARN_VM": self.machine})
        except OSError as error:
            fail(f"cannot run {argv[-1]}: {error.strerror}")
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        code = self.process.wait()
        return 128 - code if code < 0 else code


def _print_records(rows: list[dict]) -> None:
    if not rows:
        click.echo("no sandboxes")
        return
    table = [("MACHINE", "KIND", "NAMESPACE", "OWNER PID", "SERVER")]
    table += [(r["machine"], r["kind"], r["namespace"], str(r["owner_pid"]), r["server"]) for r in rows]
    print_table(table)


@sandbox.command(name="up", context_settings=CONTEXT)
@click.argument("machines", nargs=-1, required=True)
@click.option(
    "--foreground",
    is_flag=True,
    help="Stay in the foreground until Ctrl-C or SIGTERM (default: return once ready, the sandboxes staying up).",
)
@JSON_OPTION
@click.pass_context
def sandbox_up(ctx, machines, foreground, as_json):
    """Make sandboxes for MACHINES and keep them until `down`.

    \b
    A background process (its pid in `list`) relays their connections; `exec` and `shell` join them.
    \b
    Examples:
      forewarn sandbox up WestNO_0 WestNO_1
      forewarn sandbox exec WestNO_0 -- python3 agent.py &
      forewarn sandbox exec WestNO_1 -- python3 agent.py &
      forewarn sandbox down WestNO_0 WestNO_1"""
    from forewarn.sandbox import unavailable_reason

    server, token = _root(ctx)
    reason = unavailable_reason()
    if reason is not None:
        fail(reason)
    if foreground:
        _hold(server, token, list(machines), ready=lambda rows: _announce(rows, as_json))
        return
    read_end, write_end = os.pipe()
    pid = os.fork()  # before any thread exists: the child makes the relay's thread
    if pid == 0:
        os.close(read_end)
        os.setsid()
        with open(os.devnull, "r+b") as null:
            for stream in (0, 1, 2):
                os.dup2(null.fileno(), stream)

        def report(payload: dict) -> None:
            os.write(write_end, json.dumps(payload).encode())
            os.close(write_end)

        try:
            _hold(server, token, list(machines), ready=lambda rows: report({"up": rows}), failed=report)
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    answer = json.loads(b"".join(chunks) or b'{"error": "the sandbox process died while starting"}')
    if "error" in answer:
        fail(answer["error"])
    _announce(answer["up"], as_json)


def _announce(rows: list[dict], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    _print_records(rows)
    click.echo(f"run a program as one: forewarn sandbox exec {rows[0]['machine']} -- COMMAND")


def _hold(server: str, token: str | None, machines: list[str], ready, failed=None) -> None:
    """Make the sandboxes, tell ``ready``, and keep them until SIGTERM, SIGINT or SIGHUP (or until `down` took them
    all)."""
    from dataclasses import asdict

    from forewarn.sandbox import Sandbox, SandboxError, namespaces

    stop = []

    def request_stop(signum: int, _frame: Any) -> None:
        stop.append(signum)

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, request_stop)
    try:
        box = Sandbox(server, token)
    except SandboxError as error:
        if failed is None:
            _sandbox_failure(error)
        failed({"error": str(error)})
        return
    with box:
        try:
            vms = [box.up(machine) for machine in machines]
        except SandboxError as error:
            if failed is None:
                _sandbox_failure(error)
            failed({"error": str(error)})
            return
        by_name = {record.namespace: record for record in namespaces.records()}
        rows = [
            {**asdict(by_name[vm.namespace]), "setup_seconds": round(vm.setup_seconds or 0.0, 4)}
            for vm in vms
            if vm.namespace in by_name
        ]
        ready(rows)
        # Until told to stop, or until the server has been gone for a while: nothing is left to relay to, and the
        # namespaces would only stand in the way of the next `up`. A restarted server is given the relay's
        # addresses again (Sandbox's watch).
        while not stop and box.server_unreachable_for() < SERVER_GONE_AFTER:
            time.sleep(0.5)


@sandbox.command(name="down", context_settings=CONTEXT)
@click.argument("machines", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every sandbox of this machine, whoever made it.")
def sandbox_down(machines, everything):
    """Remove the sandboxes of MACHINES (or --all); programs still in them lose their way out.

    \b
    Examples:
      forewarn sandbox down WestNO_0
      forewarn sandbox down --all"""
    from forewarn.sandbox import SandboxError
    from forewarn.sandbox.manager import sandboxes, sandboxes_of, take_down

    if bool(machines) == everything:
        fail("name the machines whose sandboxes to remove, or say --all")
    try:
        present = sandboxes()
        if everything:
            names = [record.namespace for record in present]
        else:
            found = {machine: [record.namespace for record in sandboxes_of(machine)] for machine in machines}
            missing = [machine for machine, held in found.items() if not held]
            if missing:
                up = ", ".join(record.machine for record in present) or "none"
                fail(f"no sandbox for {', '.join(missing)} (up: {up})")
            names = list(dict.fromkeys(name for held in found.values() for name in held))
        for name in names:
            if take_down(name):
                click.echo(f"removed {name}")
        if not names:
            click.echo("no sandboxes")
    except SandboxError as error:
        _sandbox_failure(error)


@sandbox.command(name="list", context_settings=CONTEXT)
@JSON_OPTION
def sandbox_list(as_json):
    """The sandboxes of this machine: machine, namespace, owning process, server."""
    from dataclasses import asdict

    from forewarn.sandbox import SandboxError
    from forewarn.sandbox.manager import sandboxes

    try:
        rows = [asdict(record) for record in sandboxes()]
    except (SandboxError, PermissionError) as error:
        _sandbox_failure(error)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        _print_records(rows)
