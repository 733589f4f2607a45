"""Network namespaces for the sandbox, through iproute2's ``ip``, and the records that say who owns each one.

A sandbox namespace has one interface, its loopback, which carries the metadata addresses (169.254.169.254, and
fd00:ec2::254 for an EC2 instance). Nothing else is configured: no other interface, no route, so a packet for any
other address fails in the namespace itself ("Network is unreachable"). The only way out is the listening socket
the relay holds on those addresses (relay.py).

Each namespace is named ``forewarn-[TAG-]READABLE-HASH`` after the machine's identity (the server's name for it: a VM
name, an EC2 instance id, a Compute Engine instance name) and has a record in ``/run/forewarn-sandbox/`` (the owner's
pid and its start time, the machine as asked and its identity, the server and its metadata listener, the relay's
address), written before the namespace is made, under a lock. A namespace whose owner is gone (killed, crashed) is
removed by the next sandbox that starts.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

PREFIX = "forewarn-"
METADATA_V4 = "169.254.169.254"
METADATA_V6 = "fd00:ec2::254"
METADATA_PORT = 80
HOSTS = f"""127.0.0.1 localhost
::1 localhost ip6-localhost ip6-loopback
{METADATA_V4} metadata.google.internal metadata
"""
RECORDS = Path("/run/forewarn-sandbox")
NETNS_DIR = Path("/run/netns")
ETC_NETNS = Path("/etc/netns")
_CLONE_NEWNET = 0x40000000
# The relay's own addresses: one per namespace, on the host's loopback (all of 127/8 is local on Linux).
_RELAY_NET = "127.253"
_RELAY_SLOTS = 250 * 250
# A namespace name is a file name under /run/netns and /etc/netns, and its record's under RECORDS (NAME_MAX, 255
# bytes): the prefix, a tag of at most 32, a readable part of at most 40 and 16 hex digits keep it under 100.
_TAG = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_READABLE_LENGTH = 40
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class SandboxError(Exception):
    """The sandbox could not do what was asked; the message says what and what to do."""


class SandboxUnavailable(SandboxError):
    """This machine or user cannot run the sandbox (not root, no iproute2, no network namespaces)."""


@dataclass(frozen=True)
class Record:
    namespace: str
    machine: str  # as asked: a VM name, an EC2 instance id or Name tag, a Compute Engine instance name
    identity: str  # the server's name for it (an instance's id), from which the namespace is named
    kind: str  # "vm", "ec2_instance" or "gce_instance"
    server: str  # the control API that registered the relay address
    imds: str  # host:port of that server's metadata listener, where the relay goes
    relay_address: str
    owner_pid: int
    owner_start: str
    tag: str | None = None

    def owner_alive(self) -> bool:
        return process_start(self.owner_pid) == self.owner_start


def unavailable_reason() -> str | None:
    """Why the sandbox cannot run here, in one sentence, or None when it can (as far as can be told before trying)."""
    if shutil.which("ip") is None:
        return (
            "the sandbox needs iproute2's `ip` command, which is not on PATH: install iproute2 "
            "(apt-get install iproute2, dnf install iproute)"
        )
    if not _may_make_namespaces():
        return (
            "the sandbox needs root (the CAP_SYS_ADMIN and CAP_NET_ADMIN capabilities) to make network namespaces: "
            "run it with sudo, or as root in CI"
        )
    return None


def _may_make_namespaces() -> bool:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return os.geteuid() == 0
    match = re.search(r"^CapEff:\s*([0-9a-f]+)$", status, re.MULTILINE)
    if match is None:
        return os.geteuid() == 0
    capabilities = int(match.group(1), 16)
    return bool(capabilities & (1 << 21)) and bool(capabilities & (1 << 12))  # CAP_SYS_ADMIN, CAP_NET_ADMIN


def check_tag(tag: str | None) -> None:
    if tag is not None and _TAG.fullmatch(tag) is None:
        raise SandboxError(f"a sandbox tag is 1-32 letters, digits, underscores, periods and hyphens, not {tag!r}")


def namespace_name(identity: str, tag: str | None = None) -> str:
    """``forewarn-WestNO_0-7c6a0d8e1f2b3a49`` (or ``forewarn-TAG-WestNO_0-...``) for the machine the server calls
    ``identity``: its characters that are safe in a file name (others become ``-``), at most 40 of them, then the
    first 16 hex digits of the SHA-256 of the exact identity, so that names that read alike (``rel x``, ``rel-x``)
    never share a namespace."""
    check_tag(tag)
    readable = _UNSAFE.sub("-", identity)[:_READABLE_LENGTH]
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{PREFIX}{tag}-{readable}-{digest}" if tag else f"{PREFIX}{readable}-{digest}"


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), which tells it from a later process that reuses
    its pid; None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def own_identity() -> tuple[int, str]:
    pid = os.getpid()
    return pid, process_start(pid) or ""


def ip(*args: str, stdin: str | None = None) -> None:
    """Run ``ip ARGS``; a failure raises SandboxError with ip's own message."""
    try:
        done = subprocess.run(["ip", *args], input=stdin, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise SandboxUnavailable(unavailable_reason() or "iproute2's `ip` command is missing") from None
    if done.returncode != 0:
        raise SandboxError(f"`ip {' '.join(args)}` failed: {done.stderr.strip() or done.returncode}")


@contextmanager
def locked() -> Iterator[None]:
    """One sandbox process at a time changes records and namespaces."""
    RECORDS.mkdir(mode=0o755, parents=True, exist_ok=True)
    with open(RECORDS / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def records() -> list[Record]:
    found = []
    for path in sorted(RECORDS.glob(f"{PREFIX}*.json")):
        try:
            found.append(Record(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)  # half-written by a process that died while writing it
    return found


def find(namespace: str) -> Record | None:
    return next((record for record in records() if record.namespace == namespace), None)


def write_record(record: Record) -> None:
    path = RECORDS / f"{record.namespace}.json"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(record)))
    temporary.replace(path)


def free_relay_address(taken: set[str]) -> str:
    for slot in range(_RELAY_SLOTS):
        address = f"{_RELAY_NET}.{slot // 250}.{slot % 250 + 1}"
        if address not in taken:
            return address
    raise SandboxError(f"every relay address of {_RELAY_NET}.0.0/16 is taken: remove sandboxes first")


def existing_namespaces() -> list[str]:
    try:
        return sorted(entry.name for entry in NETNS_DIR.iterdir() if entry.name.startswith(PREFIX))
    except FileNotFoundError:
        return []


def create(namespace: str, ec2: bool) -> None:
    """The namespace, its loopback up with the metadata addresses, and its hosts file
    (``metadata.google.internal``). Nothing else: no link, no route."""
    ip("netns", "add", namespace)
    try:
        commands = ["link set lo up", f"addr add {METADATA_V4}/32 dev lo"]
        if ec2:
            commands.append(f"addr add {METADATA_V6}/128 dev lo nodad")
        ip("-n", namespace, "-batch", "-", stdin="\n".join(commands) + "\n")
        etc = ETC_NETNS / namespace
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(HOSTS)
    except BaseException:
        remove(namespace)
        raise


def remove(namespace: str) -> None:
    """The namespace and its /etc/netns files; what is already gone is no error. Processes still in it keep running,
    with no way out at all."""
    if (NETNS_DIR / namespace).exists():
        try:
            ip("netns", "del", namespace)
        except SandboxError:
            if (NETNS_DIR / namespace).exists():
                raise
    shutil.rmtree(ETC_NETNS / namespace, ignore_errors=True)
    (RECORDS / f"{namespace}.json").unlink(missing_ok=True)


def listening_sockets(namespace: str, addresses: list[str], port: int = METADATA_PORT) -> list[socket.socket]:
    """Sockets listening on ``addresses``:``port`` inside ``namespace``, opened by a short-lived thread that enters
    the namespace (setns acts on the calling thread only, so no other thread of this process moves)."""
    opened: list[socket.socket] = []
    failure: list[BaseException] = []

    def work() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            descriptor = os.open(NETNS_DIR / namespace, os.O_RDONLY)
            try:
                if libc.setns(descriptor, _CLONE_NEWNET) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, f"setns into {namespace}: {os.strerror(code)}")
            finally:
                os.close(descriptor)
            for address in addresses:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                listener = socket.socket(family, socket.SOCK_STREAM)
                opened.append(listener)
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind((address, port))
                listener.listen(128)
                listener.setblocking(False)
        except BaseException as error:
            failure.append(error)

    worker = threading.Thread(target=work, name=f"enter {namespace}")
    worker.start()
    worker.join()
    if failure:
        for listener in opened:
            listener.close()
        error = failure[0]
        if isinstance(error, OSError) and error.errno in (errno.EPERM, errno.EACCES):
            raise SandboxUnavailable(unavailable_reason() or str(error)) from error
        raise SandboxError(f"cannot listen in {namespace}: {error}") from error
    return opened


def exec_prefix(namespace: str, hang_up_with_parent: bool = False) -> list[str]:
    """What runs a command inside ``namespace``: ``ip netns exec`` (which also puts /etc/netns/NAME/hosts over
    /etc/hosts). ``hang_up_with_parent``: where util-linux's setpriv exists, the program gets SIGHUP when the thread
    that started it dies (the CLI's, killed: the program does not outlive its sandbox's relay)."""
    prefix = ["ip", "netns", "exec", namespace]
    if hang_up_with_parent and shutil.which("setpriv"):
        prefix += ["setpriv", "--pdeathsig", "HUP"]
    return prefix
