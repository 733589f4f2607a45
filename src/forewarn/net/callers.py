"""Which machine is asking: the metadata endpoints answer as the VM (Azure) or instance (EC2, Compute Engine) behind
the connection.

In order: the caller's address was registered for a machine while the server runs (``forewarn sandbox`` does, for
the relay that carries a namespace's connections: ``PUT /v1/imds/callers/{address}``); the connection arrived on a
VM's own port (``imds.port``); the caller's address is a VM's
``imds.address`` (network namespaces, or clients that bind their source address); the address the caller dialled is
a VM's ``imds.address`` (loopback: a VM's client dials ``http://127.0.0.10:PORT``); the fleet's ``default_vm``.
"""

from __future__ import annotations

import ipaddress
from itertools import chain

from forewarn.aws.model import Ec2Instance
from forewarn.core.errors import Invalid, NotFound
from forewarn.fleet.model import VM, Fleet
from forewarn.gcp.model import GceInstance

Machine = VM | Ec2Instance | GceInstance


class UnknownCaller(Exception):
    pass


class CallerResolver:
    def __init__(self, fleet: Fleet, shared_ports: set[int]):
        machines: list[Machine] = [*fleet.vms.values(), *fleet.ec2.values(), *fleet.gce.values()]
        self._by_port = {m.imds_port: m for m in machines if m.imds_port is not None}
        # A VM port that is also the shared listening port identifies nobody by itself.
        for port in shared_ports:
            self._by_port.pop(port, None)
        self._by_address = {m.imds_address: m for m in machines if m.imds_address is not None}
        default = fleet.default_vm
        self._default: Machine | None = None
        if default:
            self._default = fleet.vms.get(default) or fleet.ec2.get(default) or fleet.gce.get(default)
        self._cache: dict[tuple[str, int, str], Machine] = {}
        self._fleet = fleet
        self._instances = list(fleet.ec2.values())
        self._registered: dict[str, Machine] = {}

    def register(self, address: str, name: str) -> Machine:
        """From now on, a connection from ``address`` is the machine ``name``: a VM name, an EC2 instance id (or its
        Name tag when no other instance has it), a Compute Engine instance's name. Registering an address again moves it to the new
        machine."""
        fleet = self._fleet
        machine: Machine | None = fleet.vms.get(name) or fleet.ec2.get(name) or fleet.gce.get(name)
        if machine is None:  # an EC2 instance by its Name tag, when no other instance has that name
            named = [instance for instance in self._instances if instance.name == name]
            machine = named[0] if len(named) == 1 else None
        if machine is None:
            raise NotFound(
                f"no VM, EC2 instance or Compute Engine instance named {name!r} in the fleet",
                name=name,
                known=chain(fleet.vms, fleet.ec2, fleet.gce),
            )
        self._registered[canonical_address(address)] = machine
        self._cache.clear()
        return machine

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
        return found

    def _registered_caller(self, peer: str) -> Machine | None:
        found = self._registered.get(peer)
        if found is None and peer.startswith("::ffff:"):  # an IPv4 caller on a dual-stack listener
            found = self._registered.get(peer[7:])
        return found


def canonical_address(address: str) -> str:
    """``address`` as a listener reports a peer (``0127.0.0.1`` and ``FD00::1`` are refused or lowered)."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        raise Invalid(f"{address!r} is not an IP address") from None
