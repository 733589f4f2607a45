"""The fleet: hosts, and each cloud's machines (its part of the fleet), by cloud name.

A cloud's part is its own (``forewarn/<cloud>/fleet.py``: Azure's VMs with their broadcast scopes and policies, EC2's
and Compute Engine's instances), reached by that cloud's typed accessor. What the fleet knows of every machine is
:class:`Machine`: its name, its host and where its metadata server is reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar


@dataclass(frozen=True)
class Host:
    name: str


class Machine(Protocol):
    """A VM or instance, as the fleet and the metadata listener know it."""

    @property
    def fleet_name(self) -> str:
        """Its name in the fleet, unique across every cloud's machines (an EC2 instance: its id)."""
        ...

    @property
    def name(self) -> str:
        """As its users read it (an EC2 instance: its Name tag, else its id)."""
        ...

    @property
    def host(self) -> str: ...

    @property
    def interruptible(self) -> bool:
        """Whether the cloud may take it back at short notice (Spot; Compute Engine's preemptible too)."""
        ...

    @property
    def imds_address(self) -> str | None: ...

    @property
    def imds_port(self) -> int | None: ...


class FleetPart(Protocol):
    """One cloud's machines in the fleet. Built by the cloud's fleet section (``fleet/section.py``); an empty part
    is its class called with no arguments."""

    @property
    def machines(self) -> Mapping[str, Machine]:
        """Every machine of the part by its fleet name, in the fleet file's order."""
        ...

    @property
    def machine_kind(self) -> str:
        """What the part's machines are called where a word for all clouds' machines is wanted (a scenario's
        ``vms`` and ``instances``): ``vm`` or ``instance``."""
        ...

    def also_named(self, name: str) -> Machine | None:
        """The machine called ``name`` by another name than its fleet name (an EC2 instance's Name tag, when no
        other instance has it), or None."""
        ...

    def to_records(self) -> dict[str, Any]:
        """The part's keys of the fleet's records (plain data for the store)."""
        ...

    def summary(self) -> dict[str, int]:
        """What ``forewarn fleet validate --json`` counts of the part (``azure_vms``, ``scopes``, ...)."""
        ...

    def described(self, counted: Callable[[int, str], str]) -> str:
        """The part's counts in words (``counted(3, "Azure VM")``: ``3 Azure VMs``)."""
        ...


Part = TypeVar("Part", bound=FleetPart)


class Fleet:
    """An immutable, indexed view of hosts and each cloud's machines. Names are unique across the whole fleet."""

    def __init__(
        self, hosts: Iterable[Host], parts: Mapping[str, FleetPart] | None = None, default_vm: str | None = None
    ):
        self.hosts: dict[str, Host] = {h.name: h for h in hosts}
        self.parts: dict[str, FleetPart] = dict(parts or {})
        fleet_hosts = self.hosts
        earlier: list[Mapping[str, Machine]] = []
        for part in self.parts.values():
            machines = part.machines
            for machine in machines.values():
                if machine.host not in fleet_hosts:
                    fleet_hosts[machine.host] = Host(machine.host)
            for name in machines if earlier else ():
                if any(name in other for other in earlier):
                    raise ValueError(f"duplicate instance {name!r}")
            earlier.append(machines)
        if default_vm is not None and self.machine(default_vm) is None:
            raise ValueError(f"default_vm {default_vm!r} is not a VM or instance of the fleet")
        self.default_vm = default_vm
        self._host_list: list[str] = []
        self._host_positions: dict[str, int] | None = None  # built on first use: most servers never need it

    def part(self, cloud: str, kind: type[Part]) -> Part:
        """The machines of the cloud named ``cloud`` (an empty part when the fleet has none)."""
        found = self.parts.get(cloud)
        if found is None:
            found = self.parts[cloud] = kind()
        if not isinstance(found, kind):
            raise TypeError(f"the fleet's part of {cloud} is a {type(found).__name__}, not a {kind.__name__}")
        return found

    def machine(self, name: str) -> Machine | None:
        """The machine whose fleet name is ``name``, of whichever cloud."""
        for part in self.parts.values():
            found = part.machines.get(name)
            if found is not None:
                return found
        return None

    def machine_called(self, name: str) -> Machine | None:
        """The machine ``name`` names: its fleet name, or another name of its own (an EC2 Name tag)."""
        found = self.machine(name)
        for part in self.parts.values() if found is None else ():
            found = part.also_named(name)
            if found is not None:
                break
        return found

    def machines(self) -> Iterator[Machine]:
        for part in self.parts.values():
            yield from part.machines.values()

    def names(self) -> Iterator[str]:
        for part in self.parts.values():
            yield from part.machines

    def next_host(self, current: str) -> str:
        """Where a VM or instance moved off ``current`` goes: the next host of the fleet after it (a spare host in a
        one-host fleet). Azure redeploys and EC2 reboot migrations and restarts after an instance-stop share it."""
        if len(self.hosts) == 1:
            return f"{current}-spare"
        if self._host_positions is None:
            self._host_list = list(self.hosts)
            self._host_positions = {name: index for index, name in enumerate(self._host_list)}
        index = self._host_positions.get(current, -1)
        return self._host_list[(index + 1) % len(self._host_list)]

    def to_records(self) -> dict[str, Any]:
        """Plain data for the store: the hosts, the default VM and each part's own keys; ``fleet/section.py``'s
        ``stored_fleet`` is its inverse."""
        records: dict[str, Any] = {
            "format": FLEET_FORMAT,
            "hosts": [h.name for h in self.hosts.values()],
            "default_vm": self.default_vm,
        }
        for part in self.parts.values():
            records.update(part.to_records())
        return records

    def __eq__(self, other: object) -> bool:
        """The same hosts, machines in the same order, the same default VM and each part's own state."""
        if not isinstance(other, Fleet) or list(self.hosts) != list(other.hosts) or self.default_vm != other.default_vm:
            return False
        clouds = {*self.parts, *other.parts}
        return all(self._part_or_empty(cloud, other) == other._part_or_empty(cloud, self) for cloud in clouds)

    def _part_or_empty(self, cloud: str, other: Fleet) -> FleetPart:
        found = self.parts.get(cloud)
        return found if found is not None else type(other.parts[cloud])()


FLEET_FORMAT = 2
