"""The fleet: hosts, VMs and the broadcast scopes that decide who sees which scheduled event.

A *scope* is what Azure calls the Fabric Controller tenant: a standalone VM, an availability set, or one placement
group of a scale set. Every VM of a scope sees the same document, with the scope's own DocumentIncarnation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from forewarn.aws.model import Ec2Instance
from forewarn.azure.vms import VM, Policy, policies_from_records, policy_records
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
        for vm in vms:
            if vm.name in self.vms:
                raise ValueError(f"duplicate VM name {vm.name!r}")
            if vm.host not in self.hosts:
                self.hosts[vm.host] = Host(vm.host)
            self.vms[vm.name] = vm
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
        self.vms_by_owner: dict[str, list[VM]] = {}
        for vm in self.vms.values():
            self.vms_by_host[vm.host].append(vm)
            self.vms_by_scope.setdefault(vm.scope, []).append(vm)
            self.vms_by_owner.setdefault(vm.policy_owner, []).append(vm)
        # The hosts' order, once: next_host runs at every migration and restart (a wave moves every instance).
        self._host_order = list(self.hosts)
        self._host_position = {name: position for position, name in enumerate(self._host_order)}

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
        hosts = self._host_order
        if len(hosts) == 1:
            return f"{current}-spare"
        return hosts[(self._host_position.get(current, -1) + 1) % len(hosts)]

    def owner(self, name: str) -> str:
        """The policy owner called ``name``: a scale set, an availability set or a standalone VM, by its name or
        by its full key (``vmss:SUBSCRIPTION/GROUP/NAME``) when the name alone is ambiguous."""
        if name in self.vms_by_owner:
            return name
        vm = self.vms.get(name)
        if vm is not None and vm.policy_owner.rsplit("/", 1)[-1] != name:
            kind = "scale set" if vm.scale_set else "availability set"
            raise Invalid(f"{name} is in {kind} {vm.scale_set or vm.availability_set}, which decides for all its VMs")
        found = sorted({owner for owner in self.vms_by_owner if owner.rsplit("/", 1)[-1] == name})
        if not found:
            raise NotFound(
                f"no scale set, availability set or VM named {name!r} in the fleet",
                name=name,
                known={owner.rsplit("/", 1)[-1] for owner in self.vms_by_owner},
            )
        if len(found) > 1:
            raise NotFound(f"{name!r} is ambiguous; use one of {', '.join(found)}")
        return found[0]

    @property
    def scopes(self) -> list[str]:
        return list(self.vms_by_scope)

    def to_records(self) -> dict[str, Any]:
        """Plain data for the store; :meth:`from_records` is its inverse."""
        return {
            "hosts": [h.name for h in self.hosts.values()],
            "vms": [asdict(vm) for vm in self.vms.values()],
            "default_vm": self.default_vm,
            "policies": policy_records(self.policies.values()),
            "ec2": [asdict(instance) for instance in self.ec2.values()],
            "gce": [gce_record(instance) for instance in self.gce.values()],
        }

    @classmethod
    def from_records(cls, records: dict[str, Any]) -> Fleet:
        return cls(
            hosts=[Host(name) for name in records["hosts"]],
            vms=[VM(**vm) for vm in records["vms"]],
            default_vm=records.get("default_vm"),
            policies=policies_from_records(records.get("policies", [])),
            ec2=[Ec2Instance(**instance) for instance in records.get("ec2", [])],
            gce=[gce_from_record(instance) for instance in records.get("gce", [])],
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fleet) and self.to_records() == other.to_records()
