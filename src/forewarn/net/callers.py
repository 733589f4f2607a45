"""Which machine is asking: the metadata endpoints answer as the VM (Azure) or instance (EC2, Compute Engine) behind
the connection.

In order: the caller's address was registered for a machine while the server runs (``forewarn sandbox`` does, for
the relay that carries a namespace's connections: ``PUT /v1/imds/callers/{address}``); the connection arrived on a
VM's own port (``imds.port``); the caller's address is a VM's
``imds.address`` (network namespaces, or clients that bind their source address); the address the caller dialled is
a VM's ``imds.address`` (loopback: a VM's client dials ``http://127.0.0.10:PORT``); the fleet's ``default_vm``.

A server may serve the machines of some hosts only (``serve_hosts``: ``forewarn serve --hosts``), as each host's own
metadata service does: a machine that runs on another host now is a caller it does not know.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Callable

from forewarn.core.errors import Conflict, Invalid, NotFound
from forewarn.fleet.model import Fleet, Machine

__all__ = ["CallerResolver", "Machine", "OtherHost", "UnknownCaller", "canonical_address", "machine_name"]


class UnknownCaller(Exception):
    pass


class OtherHost(UnknownCaller):
    """The caller is a machine of the fleet, on a host this server does not serve (``serve_hosts``)."""


class CallerResolver:
    def __init__(self, fleet: Fleet, shared_ports: set[int]):
        machines = list(fleet.machines())
        self._by_port = {m.imds_port: m for m in machines if m.imds_port is not None}
        # A VM port that is also the shared listening port identifies nobody by itself.
        for port in shared_ports:
            self._by_port.pop(port, None)
        self._by_address = {m.imds_address: m for m in machines if m.imds_address is not None}
        default = fleet.default_vm
        self._default: Machine | None = None
        if default:
            self._default = fleet.machine(default)
        self._cache: dict[tuple[str, int, str], Machine] = {}
        self._fleet = fleet
        self._registered: dict[str, Machine] = {}
        self._hosts: str | None = None  # a glob over host names: only the machines on them are served
        self._host_of: Callable[[Machine], str] = lambda machine: machine.host
        self._served_hosts: dict[str, bool] = {}

    def serve_hosts(self, pattern: str, host_of: Callable[[Machine], str]) -> None:
        """Answer only for the machines on hosts whose name matches ``pattern`` (a glob: ``host-0[1-4]``,
        ``rack-7-*``); ``host_of(machine)``: the host it runs on now (a redeploy moves a VM to another host)."""
        self._hosts = pattern
        self._host_of = host_of
        self._served_hosts = {}

    def serves(self, local: tuple[str, int], peer: tuple[str, int]) -> bool:
        """Whether the caller behind a connection is served here: False only for a machine on another host."""
        try:
            self.resolve(local, peer)
        except UnknownCaller as error:
            return not isinstance(error, OtherHost)
        return True

    def register(self, address: str, name: str) -> Machine:
        """From now on, a connection from ``address`` is the machine ``name``: a VM name, an EC2 instance id (or its
        Name tag when no other instance has it), a Compute Engine instance's name. Registering an address again moves it to the new
        machine.

        Refused: an address every program on this machine connects from (the unspecified addresses, ``127.0.0.1``
        and ``::1``), which would make every local client that machine; and another machine's ``imds.address``
        from the fleet file, which would take that machine's identity from its own clients. Other loopback
        addresses (the sandbox's ``127.253.x.y``) are used only by a client that binds them."""
        canonical = _registrable(address)
        fleet = self._fleet
        machine = fleet.machine_called(name)
        if machine is None:
            raise NotFound(
                f"no VM, EC2 instance or Compute Engine instance named {name!r} in the fleet",
                name=name,
                known=fleet.names(),
            )
        owner = self._fleet_address_owner(canonical)
        if owner is not None and owner is not machine:
            raise Conflict(f"{canonical} is the imds address of {machine_name(owner)} in the fleet file")
        self._registered[canonical] = machine
        self._cache.clear()
        return machine

    def _fleet_address_owner(self, canonical: str) -> Machine | None:
        for address, machine in self._by_address.items():
            if _same_address(address, canonical):
                return machine
        return None

    def unregister(self, address: str) -> bool:
        removed = self._registered.pop(canonical_address(address), None) is not None
        self._cache.clear()
        return removed

    def registered(self) -> dict[str, Machine]:
        return dict(self._registered)

    def resolve(self, local: tuple[str, int], peer: tuple[str, int]) -> Machine:
        """The VM or EC2 instance behind a connection that arrived on ``local`` from ``peer``."""
        key = (local[0], local[1], peer[0])
        found = self._cache.get(key)
        if found is not None:
            if self._hosts is not None:
                self._check_host(found)
            return found
        found = (
            (self._registered_caller(peer[0]) if self._registered else None)
            or self._by_port.get(local[1])
            or self._by_address.get(peer[0])
            or self._by_address.get(local[0])
            or self._default
        )
        if found is None:
            raise UnknownCaller(
                f"no VM of the fleet is reached at {local[0]}:{local[1]} from {peer[0]}; give VMs an imds address "
                "or port in the fleet file, or set default_vm"
            )
        if len(self._cache) < 65536:
            self._cache[key] = found
        if self._hosts is not None:
            self._check_host(found)
        return found

    def _check_host(self, machine: Machine) -> None:
        host = self._host_of(machine)
        served = self._served_hosts.get(host)
        if served is None:
            served = self._served_hosts[host] = fnmatch.fnmatchcase(host, self._hosts or "*")
        if not served:
            raise OtherHost(
                f"{machine_name(machine)} runs on host {host}, whose metadata this server does not serve "
                f"(--hosts {self._hosts})"
            )

    def _registered_caller(self, peer: str) -> Machine | None:
        found = self._registered.get(peer)
        if found is None and peer.startswith("::ffff:"):  # an IPv4 caller on a dual-stack listener
            found = self._registered.get(peer[7:])
        return found


def machine_name(machine: Machine) -> str:
    return machine.fleet_name


#: Addresses a connection comes from whatever machine the program on this host stands for.
_SHARED_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in ("0.0.0.0", "::", "127.0.0.1", "::1"))


def _registrable(address: str) -> str:
    """``address`` canonical, if it may be registered for one machine (``CallerResolver.register``)."""
    canonical = canonical_address(address)
    parsed = ipaddress.ip_address(canonical)
    mapped = parsed.ipv4_mapped if isinstance(parsed, ipaddress.IPv6Address) else None
    if parsed in _SHARED_ADDRESSES or mapped in _SHARED_ADDRESSES:
        raise Invalid(
            f"{canonical} is where every program on this machine connects from, whatever machine it stands for: "
            "register an address of its own (the sandbox uses 127.253.x.y)"
        )
    return canonical


def _same_address(written: str, canonical: str) -> bool:
    try:
        return str(ipaddress.ip_address(written)) == canonical
    except ValueError:
        return False


def canonical_address(address: str) -> str:
    """``address`` as a listener reports a peer (``0127.0.0.1`` and ``FD00::1`` are refused or lowered)."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        raise Invalid(f"{address!r} is not an IP address") from None
