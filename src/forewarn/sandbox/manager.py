"""The sandbox's Python API: run programs as VMs and EC2 instances of a running forewarn, at the real metadata
addresses.

    from forewarn.sandbox import Sandbox

    with Sandbox("http://127.0.0.1:8170") as sandbox:
        vm = sandbox.up("WestNO_0")
        vm.run(["curl", "-s", "-H", "Metadata:true",
                "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"])

Each machine gets a network namespace (namespaces.py) whose only way out is the relay (relay.py) to the server's
metadata listener; the server knows the machine by the relay's address, which the sandbox registers through the
control API (``PUT /v1/imds/callers/{address}``). Leaving the ``with`` block (or ``close()``) removes every
namespace this object made; a process killed before that leaves namespaces the next sandbox removes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from forewarn.net.control_client import BadJson, ControlClient, Refused, Unreachable
from forewarn.sandbox import namespaces
from forewarn.sandbox.namespaces import Record, SandboxError, SandboxUnavailable
from forewarn.sandbox.relay import Relay

DEFAULT_SERVER = "http://127.0.0.1:8170"


class VmNamespace:
    """One machine's namespace: run programs in it as that VM or instance."""

    def __init__(self, record: Record, registered_as: str, setup_seconds: float | None = None):
        self.machine = record.machine
        self.registered_as = registered_as  # the server's name for it: a VM name or an instance id
        self.kind = record.kind
        self.namespace = record.namespace
        self.relay_address = record.relay_address
        self.setup_seconds = setup_seconds

    def __repr__(self) -> str:
        return f"VmNamespace({self.machine!r}, namespace={self.namespace!r})"

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed with what runs it in the namespace (``ip netns exec NAME``)."""
        return [*namespaces.exec_prefix(self.namespace), *argv]

    def environment(self, env: dict[str, str] | None = None) -> dict[str, str]:
        return {**(os.environ if env is None else env), "FOREWARN_VM": self.machine}

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """``subprocess.run(argv, **kwargs)`` inside the namespace (FOREWARN_VM names the machine)."""
        kwargs["env"] = self.environment(kwargs.get("env"))
        return subprocess.run(self.command(argv), **kwargs)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """``subprocess.Popen(argv, **kwargs)`` inside the namespace."""
        kwargs["env"] = self.environment(kwargs.get("env"))
        return subprocess.Popen(self.command(argv), **kwargs)


class Sandbox:
    """Namespaces for machines of the forewarn whose control API is at ``server``, and the relay that serves them.

    ``tag`` goes into the namespace names (``forewarn-TAG-WestNO_0``) so that several sandboxes can hold the same
    machine name at once (two servers with one fleet, pytest-xdist workers); without it the name is
    ``forewarn-WestNO_0``, which the CLI finds. Raises SandboxUnavailable (one sentence: what is missing, how to get
    it) when this process cannot make namespaces."""

    def __init__(self, server: str = DEFAULT_SERVER, token: str | None = None, tag: str | None = None):
        _require()
        namespaces.check_tag(tag)
        self.server = server.rstrip("/")
        self.tag = tag
        self._headers = {"Authorization": f"Bearer {token}"} if token else None
        self._client = ControlClient(self.server, timeout=10, headers=self._headers)
        self._relay: Relay | None = None
        self._closing = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._unreachable_since: float | None = None
        self._vms: dict[str, VmNamespace] = {}
        with namespaces.locked():
            remove_stale()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def vms(self) -> dict[str, VmNamespace]:
        return dict(self._vms)

    def vm(self, machine: str) -> VmNamespace:
        try:
            return self._vms[machine]
        except KeyError:
            raise SandboxError(f"{machine} is not up in this sandbox (up: {', '.join(self._vms) or 'none'})") from None

    def up(self, machine: str, relay_to: tuple[str, int] | None = None) -> VmNamespace:
        """A namespace for ``machine`` (a VM's name, an EC2 instance's id or Name tag), ready when this returns: inside it,
        169.254.169.254:80 (and [fd00:ec2::254]:80 for an EC2 instance) is the server's metadata endpoint as
        ``machine``, metadata.google.internal resolves to 169.254.169.254, and nothing else is reachable.
        ``relay_to`` (an IPv4 host and port): relay there instead, to something that stands between the machine and
        the server and answers as the machine (the conformance battery's observing proxy)."""
        if machine in self._vms:
            return self._vms[machine]
        started = time.perf_counter()
        with namespaces.locked():
            remove_stale()
            address = namespaces.free_relay_address({record.relay_address for record in namespaces.records()})
            # The server says who the machine is (an instance's Name tag is not its identity): the namespace is
            # named after that.
            registered = self._request("PUT", f"/v1/imds/callers/{address}", {"machine": machine})
            if relay_to is not None:
                registered = {**registered, "imds": {"host": relay_to[0], "port": relay_to[1]}}
            try:
                record = self._claim(machine, registered, address)
            except BaseException:
                self._unregister(address)
                raise
            if isinstance(record, VmNamespace):  # this sandbox has it already, asked by another of its names
                return record
            try:
                self._make(record, registered["imds"])
            except BaseException:
                namespaces.remove(record.namespace)
                self._unregister(address)
                raise
        vm = VmNamespace(record, record.identity, time.perf_counter() - started)
        self._vms[machine] = vm
        return vm

    def _claim(self, machine: str, registered: dict[str, Any], address: str) -> Record | VmNamespace:
        """The record of ``machine``'s new namespace, written; or this sandbox's namespace for it. Refused when another
        process holds the namespace."""
        identity, kind = registered["machine"], registered["kind"]
        target = _relay_target(registered["imds"])
        name = namespaces.namespace_name(identity, self.tag)
        mine = next((vm for vm in self._vms.values() if vm.namespace == name), None)
        if mine is not None:
            self._unregister(address)
            return mine
        held = namespaces.find(name)
        if held is not None:
            raise SandboxError(
                f"{machine} already has a sandbox ({name}, made by process {held.owner_pid} for the server at "
                f"{held.server}): `forewarn sandbox down {machine}` removes it"
            )
        pid, start = namespaces.own_identity()
        imds = f"{target[0]}:{target[1]}"
        record = Record(name, machine, identity, kind, self.server, imds, address, pid, start, self.tag)
        namespaces.write_record(record)
        return record

    def _make(self, record: Record, imds: dict[str, Any]) -> None:
        namespaces.create(record.namespace, ec2=record.kind == "ec2_instance")
        addresses = [namespaces.METADATA_V4]
        if record.kind == "ec2_instance":
            addresses.append(namespaces.METADATA_V6)
        listeners = namespaces.listening_sockets(record.namespace, addresses)
        if self._relay is None:
            self._relay = Relay()
            self._watchdog = threading.Thread(target=self._keep_registered, name="forewarn sandbox watch")
            self._watchdog.daemon = True
            self._watchdog.start()
        self._relay.add(record.namespace, listeners, _relay_target(imds), record.relay_address)

    def down(self, machine: str) -> float:
        """Remove ``machine``'s namespace (programs still in it lose their way out) and its registration; the
        seconds it took."""
        vm = self._vms.pop(machine, None)
        if vm is None:
            return 0.0
        started = time.perf_counter()
        if self._relay is not None:
            self._relay.remove(vm.namespace)
        with namespaces.locked():
            record = namespaces.find(vm.namespace)
            if record is not None and record.owner_pid == os.getpid():
                namespaces.remove(vm.namespace)
        self._unregister(vm.relay_address)
        return time.perf_counter() - started

    def close(self) -> None:
        """Remove every namespace this sandbox made."""
        for machine in list(self._vms):
            self.down(machine)
        self._closing.set()
        if self._watchdog is not None:
            self._watchdog.join(5)
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        self._client.close()

    def server_unreachable_for(self) -> float:
        """For how many seconds the server has not answered the watch (0 while it answers)."""
        since = self._unreachable_since
        return 0.0 if since is None else time.monotonic() - since

    def _keep_registered(self, every: float = 1.0) -> None:
        """Every second, make sure the server still knows each relay address: a restarted server has forgotten
        them (registrations live in its memory), and its VMs' programs would be nobody to it."""
        with ControlClient(self.server, timeout=2, headers=self._headers) as client:
            while not self._closing.wait(every):
                vms = list(self._vms.values())
                if not vms:
                    continue
                try:
                    known = {caller["address"]: caller["machine"] for caller in client.get("/v1/imds/callers")}
                    self._unreachable_since = None
                    for vm in vms:
                        if known.get(vm.relay_address) != vm.registered_as:
                            client.request(
                                "PUT", f"/v1/imds/callers/{vm.relay_address}", json_body={"machine": vm.registered_as}
                            )
                except Unreachable:
                    if self._unreachable_since is None:
                        self._unreachable_since = time.monotonic()
                except (Refused, BadJson, KeyError, TypeError):
                    pass  # a server of another kind, or a fleet without the machine any more: nothing to restore

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        try:
            return self._client.request(method, path, json_body=body)
        except Unreachable:
            raise SandboxError(
                f"cannot reach forewarn's control API at {self.server}: start `forewarn serve`, or name its control "
                "API with --server (env FOREWARN_SERVER)"
            ) from None
        except Refused as error:
            if error.status == 404 and error.code is None:
                raise SandboxError(
                    f"the server at {self.server} has no sandbox support (no /v1/imds/callers)"
                ) from None
            raise SandboxError(error.message or str(error)) from None

    def _unregister(self, address: str) -> None:
        try:
            self._client.request("DELETE", f"/v1/imds/callers/{address}")
        except (Unreachable, Refused):
            pass  # the server is gone or restarted: nothing registered is left to remove


def _require() -> None:
    reason = namespaces.unavailable_reason()
    if reason is not None:
        raise SandboxUnavailable(reason)


def _relay_target(imds: dict[str, Any]) -> tuple[str, int]:
    host, port = _listener(imds)
    if ":" in host:
        raise SandboxError(
            f"the server's metadata listener is on {host}: the sandbox relays over IPv4 loopback, so start the server "
            "with an IPv4 --imds-host (the default, 127.0.0.1, works)"
        )
    return host, port


def _listener(imds: dict[str, Any]) -> tuple[str, int]:
    host = imds["host"]
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # listening everywhere: its loopback, from which the relay's address is reachable
    return host, int(imds["port"])


def remove_stale() -> list[str]:
    """Remove the namespaces whose owner is gone (killed, crashed), and ``forewarn-`` namespaces with no record; the
    names removed. Call under ``namespaces.locked()``."""
    removed = []
    for record in namespaces.records():
        if not record.owner_alive():
            namespaces.remove(record.namespace)
            _forget(record)
            removed.append(record.namespace)
    known = {record.namespace for record in namespaces.records()}
    for name in namespaces.existing_namespaces():
        if name not in known:
            namespaces.remove(name)
            removed.append(name)
    return removed


def _forget(record: Record) -> None:
    """The server's registration of a removed namespace's relay address, if that server still runs."""
    try:
        with ControlClient(record.server, timeout=2) as client:
            client.request("DELETE", f"/v1/imds/callers/{record.relay_address}")
    except (Unreachable, Refused):
        pass


def sandboxes() -> list[Record]:
    """Every sandbox namespace of this machine, once stale ones are removed."""
    _require()
    if not namespaces.RECORDS.exists():
        return []
    with namespaces.locked():
        remove_stale()
        return namespaces.records()


def sandboxes_of(machine: str) -> list[Record]:
    """The untagged sandboxes (the CLI's) of ``machine``, by the name they were made with or by the server's name for
    the machine (an instance's Name tag or its id)."""
    return [record for record in sandboxes() if record.tag is None and machine in (record.machine, record.identity)]


def joinable(machine: str, server: str, token: str | None = None) -> Record | None:
    """``machine``'s sandbox when there is one and it speaks as that machine to the server at ``server``; None when
    there is none. A sandbox of ``machine`` made for another server, or one that the server knows as another machine,
    is refused with what to do: a program run in it would not be who it was told it is."""
    found = sandboxes_of(machine)
    problems = []
    for record in found:
        problem = owner_problem(record, server.rstrip("/"), token)
        if problem is None:
            return record
        problems.append(
            f"{machine}'s sandbox {record.namespace} (process {record.owner_pid}) {problem}: "
            f"`forewarn sandbox down {machine}` removes it"
        )
    if problems:
        raise SandboxError("; ".join(problems))
    return None


def owner_problem(record: Record, server: str, token: str | None = None, wait: float = 3.0) -> str | None:
    """Why a program run in ``record``'s namespace would not be its machine to the server at ``server``, or None.
    The server is asked: it must know the namespace's relay address as the record's machine, and listen for
    metadata where the relay goes. A server that restarted learns the address again within a second from the
    sandbox's owner (its watch), so a missing address is waited for ``wait`` seconds."""
    if record.namespace != namespaces.namespace_name(record.identity, record.tag):
        return f"is not named after {record.identity} (a record not written by this forewarn)"
    if record.server != server:
        return f"was made for the server at {record.server}, not for the one at {server} (--server)"
    headers = {"Authorization": f"Bearer {token}"} if token else None
    deadline = time.monotonic() + wait
    with ControlClient(server, timeout=10, headers=headers) as client:
        while True:
            try:
                callers = {caller["address"]: caller for caller in client.get("/v1/imds/callers")}
            except Unreachable:
                return f"cannot be checked: the server at {server} does not answer"
            except (Refused, BadJson) as error:
                return f"cannot be checked: the server at {server} answered {error}"
            caller = callers.get(record.relay_address)
            if caller is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    if caller is None:
        return f"is unknown to the server at {server} (it has no registration for relay address {record.relay_address})"
    if caller["machine"] != record.identity:
        return f"speaks as {caller['machine']} to the server at {server}, not as {record.identity}"
    listener = "{}:{}".format(*_listener(caller["imds"])) if caller.get("imds") else "nowhere"
    if listener != record.imds:
        return f"relays to {record.imds}, while the server at {server} serves metadata at {listener}"
    return None


def take_down(namespace: str, wait: float = 10.0) -> bool:
    """Remove a namespace whoever owns it: its owner is asked (SIGTERM) when it owns nothing else, so that it exits;
    else the namespace goes at once. False when there is no such sandbox."""
    _require()
    with namespaces.locked():
        record = namespaces.find(namespace)
        if record is None:
            return False
        if not record.owner_alive() or record.owner_pid == os.getpid():
            namespaces.remove(namespace)
            _forget(record)
            return True
        others = [r for r in namespaces.records() if r.owner_pid == record.owner_pid and r.namespace != namespace]
        if others:
            namespaces.remove(namespace)
            _forget(record)
            return True
    os.kill(record.owner_pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and record.owner_alive():
        time.sleep(0.02)
    with namespaces.locked():
        if namespaces.find(namespace) is not None:
            namespaces.remove(namespace)
            _forget(record)
    return True
