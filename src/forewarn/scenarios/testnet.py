"""Where private servers, tests and benchmarks take their ports and extra loopback addresses from.

By default ports are drawn from the thousands below the kernel's ephemeral range and extra addresses lie in
127.0.0.0/16. ``FOREWARN_TEST_NET`` moves both, for a machine where other services hold part of them:
``FOREWARN_TEST_NET="40000-44999 127.42"`` draws ports from 40000–44999 and gives addresses in 127.42.0.0/16; either
part may be given alone."""

from __future__ import annotations

import os
import random
import re
import socket
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

VARIABLE = "FOREWARN_TEST_NET"
_PORTS = re.compile(r"(\d+)-(\d+)")
_LOOPBACK = re.compile(r"127\.(\d+)")
_MIN_PORTS = 100  # fewer and parallel test workers would keep drawing the same few


class NetSettingError(ValueError):
    """FOREWARN_TEST_NET does not say a port range and a loopback base as documented."""


@dataclass(frozen=True)
class NetSetting:
    """The port range (None: below the ephemeral range) and the second octet of the loopback addresses."""

    ports: tuple[int, int] | None = None
    loopback: int = 0


def net_setting(value: str | None = None) -> NetSetting:
    """The setting read from ``value`` (default: the environment variable)."""
    text = os.environ.get(VARIABLE, "") if value is None else value
    ports: tuple[int, int] | None = None
    loopback = 0
    for token in text.replace(",", " ").split():
        if match := _PORTS.fullmatch(token):
            ports = _port_range(int(match[1]), int(match[2]))
        elif match := _LOOPBACK.fullmatch(token):
            loopback = int(match[1])
            if loopback > 255:
                raise NetSettingError(f"{VARIABLE}: {token!r} is not a loopback network (127.0 to 127.255)")
        else:
            raise NetSettingError(
                f"{VARIABLE}: {token!r} is neither a port range (LOW-HIGH) nor a loopback base (127.N)"
            )
    return NetSetting(ports, loopback)


def _port_range(low: int, high: int) -> tuple[int, int]:
    if not 1024 <= low <= high <= 65535 or high - low + 1 < _MIN_PORTS:
        raise NetSettingError(f"{VARIABLE}: ports {low}-{high} must lie in 1024-65535 and hold at least {_MIN_PORTS}")
    return low, high


def loopback_address(block: int, host: int) -> str:
    """The address ``127.N.block.host`` (N from the setting, 0 by default): a VM's metadata address or a client's
    source address in a test or benchmark."""
    if not 0 <= block <= 255 or not 1 <= host <= 254:
        raise ValueError(f"no loopback address for block {block}, host {host}")
    return f"127.{net_setting().loopback}.{block}.{host}"


def numbered_address(index: int) -> str:
    """The ``index``-th of 62,500 distinct addresses from 127.N.1.1 on, 250 to a block (one per VM of a big fleet)."""
    return loopback_address(1 + index // 250, 1 + index % 250)


def free_ports(count: int, avoid: Collection[int] = ()) -> list[int]:
    """``count`` distinct ports free on every local address now and not in ``avoid`` (ports already given to a
    server not yet started, which are free too until it binds them), for servers about to be started.

    A port from ``bind(("", 0))`` lies in the kernel's ephemeral range, which every outgoing connection draws from
    too: on a busy machine one of them can take the port between this answer and the server's bind ("Address already
    in use"). So ports are drawn at random from the setting's range or, by default and where the ephemeral range is
    known (Linux), from the thousands below it, which only an explicit bind takes. Under pytest-xdist each worker
    draws from a slice of its own (``worker_share``)."""
    chosen = net_setting().ports
    if chosen is None:
        low, _ = _ephemeral_range()
        first = max(10000, low - 20000)
        if low - first < 1000:
            return _kernel_ports(count, avoid)
        chosen = (first, low - 1)
    for first_port, last_port in (worker_share(*chosen), chosen):  # the whole range once this worker's is full
        found = _bindable([port for port in range(first_port, last_port + 1) if port not in avoid], count)
        if found is not None:
            return found
    if net_setting().ports is not None:
        raise OSError(f"{VARIABLE}: not {count} free ports in {chosen[0]}-{chosen[1]}")
    return _kernel_ports(count, avoid)


def worker_share(low: int, high: int, environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """This pytest-xdist worker's slice of the ports ``low``-``high`` (all of them outside xdist).

    That a port is free is only true until a server binds it, which for a server in a process of its own is a second
    or more later: another worker drawing from the same range meanwhile may take it. Workers drawing from slices
    apart never do. A slice narrower than ``_MIN_PORTS`` is not worth it: the whole range is used."""
    worker = re.fullmatch(r"gw(\d+)", environ.get("PYTEST_XDIST_WORKER", ""))
    workers = environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker is None or not workers.isdigit() or int(worker[1]) >= int(workers):
        return low, high
    size = (high - low + 1) // int(workers)
    if size < _MIN_PORTS:
        return low, high
    first = low + int(worker[1]) * size
    return first, first + size - 1


def _bindable(candidates: Sequence[int], count: int) -> list[int] | None:
    chooser = random.SystemRandom()
    held: list[socket.socket] = []
    try:
        for port in chooser.sample(candidates, min(len(candidates), 50 * count)):
            sock = socket.socket()
            try:
                sock.bind(("", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
            if len(held) == count:
                return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()
    return None


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 0, 0


def _kernel_ports(count: int, avoid: Collection[int] = ()) -> list[int]:
    sockets: list[socket.socket] = []  # held, so that the kernel never gives a port twice and this ends
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
            if sock.getsockname()[1] not in avoid:
                ports.append(sock.getsockname()[1])
        return ports
    finally:
        for sock in sockets:
            sock.close()
