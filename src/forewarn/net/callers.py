"""Which machine is asking: the metadata endpoints answer as the VM (Azure) or instance (EC2, Compute Engine) behind
the connection.

In order: the connection arrived on a VM's own port (``imds.port``); the caller's address is a VM's
``imds.address`` (network namespaces, or clients that bind their source address); the address the caller dialled is
a VM's ``imds.address`` (loopback: a VM's client dials ``http://127.0.0.10:PORT``); the fleet's ``default_vm``.
"""

from __future__ import annotations

from forewarn.aws.model import Ec2Instance
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

    def resolve(self, local: tuple[str, int], peer: tuple[str, int]) -> Machine:
        """The VM or EC2 instance behind a connection that arrived on ``local`` from ``peer``."""
        key = (local[0], local[1], peer[0])
        found = self._cache.get(key)
        if found is not None:
            return found
        found = (
            self._by_port.get(local[1])
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
