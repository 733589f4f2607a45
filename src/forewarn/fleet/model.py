"""The fleet: hosts, VMs and the broadcast scopes that decide who sees which scheduled event.

A *scope* is what Azure calls the Fabric Controller tenant: a standalone VM, an availability set, or one placement
group of a scale set. Every VM of a scope sees the same document, with the scope's own DocumentIncarnation.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any

from forewarn.aws.model import Ec2Instance
from forewarn.azure.vms import NO_TAGS, VM, VM_FIELDS, Policy, policies_from_records, policy_records
from forewarn.core.errors import Invalid, NotFound
from forewarn.gcp.model import GceInstance, gce_from_record, gce_record

# VM is the Azure component's (azure/vms.py); it is named here too, where the fleet is.
__all__ = ["VM", "Fleet", "Host"]


@dataclass(frozen=True)
class Host:
    name: str


class Fleet:
    """An immutable, indexed view of hosts and VMs. VM names are unique across the whole fleet."""

    def __init__(
        self,
        hosts: Iterable[Host],
        vms: Iterable[VM],
        default_vm: str | None = None,
        policies: Iterable[Policy] = (),
        ec2: Iterable[Ec2Instance] = (),
        gce: Iterable[GceInstance] = (),
    ):
        self.hosts: dict[str, Host] = {h.name: h for h in hosts}
        self.vms: dict[str, VM] = {}
        fleet_vms = self.vms
        fleet_hosts = self.hosts
        for vm in vms:
            name = vm.name
            if name in fleet_vms:
                raise ValueError(f"duplicate VM name {name!r}")
            if vm.host not in fleet_hosts:
                fleet_hosts[vm.host] = Host(vm.host)
            fleet_vms[name] = vm
        self.ec2: dict[str, Ec2Instance] = {}
        for instance in ec2:
            if instance.instance_id in self.ec2 or instance.instance_id in self.vms:
                raise ValueError(f"duplicate instance {instance.instance_id!r}")
            if instance.host not in self.hosts:
                self.hosts[instance.host] = Host(instance.host)
            self.ec2[instance.instance_id] = instance
        self.gce: dict[str, GceInstance] = {}
        for gce_instance in gce:
            name = gce_instance.name
            if name in self.gce or name in self.ec2 or name in self.vms:
                raise ValueError(f"duplicate instance {name!r}")
            if gce_instance.host not in self.hosts:
                self.hosts[gce_instance.host] = Host(gce_instance.host)
            self.gce[name] = gce_instance
        if (
            default_vm is not None
            and default_vm not in self.vms
            and default_vm not in self.ec2
            and default_vm not in self.gce
        ):
            raise ValueError(f"default_vm {default_vm!r} is not a VM or instance of the fleet")
        self.default_vm = default_vm
        self.policies = {policy.owner: policy for policy in policies}  # as deployed; the engine keeps them current
        self.vms_by_host: dict[str, list[VM]] = {name: [] for name in self.hosts}
        self.vms_by_scope: dict[str, list[VM]] = {}
        # A standalone VM and an availability set are their own scope: their lists are the scope's (one list, not two)
        self.vms_by_owner: dict[str, list[VM]] = {}
        by_host, by_scope, by_owner = self.vms_by_host, self.vms_by_scope, self.vms_by_owner
        for vm in fleet_vms.values():
            by_host[vm.host].append(vm)
            members = by_scope.get(vm.scope)
            if members is None:
                members = by_scope[vm.scope] = []
                if vm.scope is vm.policy_owner:
                    by_owner[vm.policy_owner] = members
            members.append(vm)
            if vm.scope is not vm.policy_owner:
                by_owner.setdefault(vm.policy_owner, []).append(vm)
        # Built on first use: most servers never need them, and at a million VMs each is tens of megabytes.
        self._host_list: list[str] = []
        self._host_positions: dict[str, int] | None = None
        self._vm_positions: dict[str, int] | None = None
        self._owners_by_name: dict[str, list[str]] | None = None

    def vm(self, name: str) -> VM:
        try:
            return self.vms[name]
        except KeyError:
            raise NotFound(f"no VM named {name!r} in the fleet", name=name, known=self.vms.keys()) from None

    def instance(self, instance_id: str) -> Ec2Instance:
        try:
            return self.ec2[instance_id]
        except KeyError:
            raise NotFound(
                f"The instance ID '{instance_id}' does not exist", name=instance_id, known=self.ec2.keys()
            ) from None

    def host_vms(self, name: str) -> list[VM]:
        if name not in self.hosts:
            raise NotFound(f"no host named {name!r} in the fleet", name=name, known=self.hosts.keys())
        return self.vms_by_host[name]

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

    def position(self, name: str) -> int:
        """Where a VM stands in the fleet's order (the order of the file), for reading groups of VMs in that order."""
        if self._vm_positions is None:
            self._vm_positions = {vm: index for index, vm in enumerate(self.vms)}
        return self._vm_positions[name]

    def owner(self, name: str) -> str:
        """The policy owner called ``name``: a scale set, an availability set or a standalone VM, by its name or
        by its full key (``vmss:SUBSCRIPTION/GROUP/NAME``) when the name alone is ambiguous."""
        if name in self.vms_by_owner:
            return name
        vm = self.vms.get(name)
        if vm is not None and vm.policy_owner.rsplit("/", 1)[-1] != name:
            kind = "scale set" if vm.scale_set else "availability set"
            raise Invalid(f"{name} is in {kind} {vm.scale_set or vm.availability_set}, which decides for all its VMs")
        if self._owners_by_name is None:
            self._owners_by_name = {}
            for owner in self.vms_by_owner:
                self._owners_by_name.setdefault(owner.rsplit("/", 1)[-1], []).append(owner)
        found = sorted(self._owners_by_name.get(name, ()))
        if not found:
            raise NotFound(
                f"no scale set, availability set or VM named {name!r} in the fleet",
                name=name,
                known=self._owners_by_name.keys(),
            )
        if len(found) > 1:
            raise NotFound(f"{name!r} is ambiguous; use one of {', '.join(found)}")
        return found[0]

    @property
    def scopes(self) -> list[str]:
        return list(self.vms_by_scope)

    def to_records(self) -> dict[str, Any]:
        """Plain data for the store; :meth:`from_records` is its inverse.

        The VMs are written in columns (format 2), one list per field, the repeated text (hosts, subscriptions,
        groups, locations, sizes, sets) as indexes into one table of strings, and a field that is the same for every
        VM as that one value: a million VMs come to tens of megabytes of JSON that loads in about a second, instead of
        a million objects of nineteen keys each."""
        return {
            "format": FLEET_FORMAT,
            "hosts": [h.name for h in self.hosts.values()],
            "vms": _vm_columns(list(self.vms.values())),
            "default_vm": self.default_vm,
            "policies": policy_records(self.policies.values()),
            "ec2": [asdict(instance) for instance in self.ec2.values()],
            "gce": [gce_record(instance) for instance in self.gce.values()],
        }

    @classmethod
    def from_records(cls, records: dict[str, Any]) -> Fleet:
        """A fleet from :meth:`to_records`, or from the records of a database written before format 2 (one mapping
        per VM)."""
        vms = records["vms"]
        return cls(
            hosts=[Host(name) for name in records["hosts"]],
            vms=[VM(**vm) for vm in vms] if isinstance(vms, list) else _vms_from_columns(vms),
            default_vm=records.get("default_vm"),
            policies=policies_from_records(records.get("policies", [])),
            ec2=[Ec2Instance(**instance) for instance in records.get("ec2", [])],
            gce=[gce_from_record(instance) for instance in records.get("gce", [])],
        )

    def __eq__(self, other: object) -> bool:
        """The same hosts, VMs and instances in the same order, the same default VM and deployed policies."""
        return (
            isinstance(other, Fleet)
            and list(self.hosts) == list(other.hosts)
            and list(self.vms.values()) == list(other.vms.values())
            and self.default_vm == other.default_vm
            and self.policies == other.policies
            and list(self.ec2.values()) == list(other.ec2.values())
            and list(self.gce.values()) == list(other.gce.values())
        )


FLEET_FORMAT = 2
# Text fields with few distinct values across a fleet: written as indexes into the records' table of strings.
_CODED = frozenset(
    (
        "host",
        "subscription_id",
        "resource_group",
        "location",
        "zone",
        "size",
        "availability_set",
        "scale_set",
        "instance_id",
        "os_type",
    )
)


def _column(values: list[Any]) -> list[Any] | dict[str, Any]:
    """A column's values, or ``{"same": value}`` when every VM has the same one."""
    if values and values.count(values[0]) == len(values):
        return {"same": values[0]}
    return values


def _vm_columns(vms: list[VM]) -> dict[str, Any]:
    strings: dict[str, int] = {}
    tag_sets: dict[tuple[tuple[str, str], ...], int] = {}
    columns: dict[str, Any] = {}
    for name in VM_FIELDS:
        values = list(map(attrgetter(name), vms))
        if name in _CODED:
            values = [None if value is None else strings.setdefault(value, len(strings)) for value in values]
        elif name == "tags":
            values = [tag_sets.setdefault(tuple(sorted(tags.items())), len(tag_sets)) for tags in values]
        columns[name] = _column(values)
    return {
        "count": len(vms),
        "strings": list(strings),
        "tags": [dict(items) for items in tag_sets],
        "columns": columns,
    }


def _vms_from_columns(block: dict[str, Any]) -> list[VM]:
    count = block["count"]
    strings: list[str] = [sys.intern(text) for text in block["strings"]]
    tag_sets: list[dict[str, str]] = [tags or NO_TAGS for tags in block["tags"]]
    columns: list[Iterable[Any]] = []
    for name in VM_FIELDS:
        column = block["columns"][name]
        if isinstance(column, dict):
            column = [column["same"]]
            repeated = True
        else:
            repeated = False
        if name in _CODED:
            column = [None if index is None else strings[index] for index in column]
        elif name == "tags":
            column = [tag_sets[index] for index in column]
        columns.append(repeat(column[0], count) if repeated else column)
    return [VM(*row) for row in zip(*columns)]
