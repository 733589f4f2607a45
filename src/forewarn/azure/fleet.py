"""Azure's section of the fleet file (VMs, availability sets, scale sets, with their scheduled-events policies and
profiles) and Azure's part of the fleet: the VMs and the broadcast scopes that decide who sees which scheduled event.

A *scope* is what Azure calls the Fabric Controller tenant: a standalone VM, an availability set, or one placement
group of a scale set. Every VM of a scope sees the same document, with the scope's own DocumentIncarnation.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any, Literal, NoReturn

from pydantic import Field

from forewarn.azure.names import name_problem
from forewarn.azure.vms import (
    NO_TAGS,
    VM,
    VM_FIELDS,
    NotificationProfile,
    Policy,
    check_os_image_profile,
    check_terminate_profile,
    policies_from_records,
    policy_records,
)
from forewarn.core.durations import parse_duration
from forewarn.core.errors import CoreError, Invalid, NotFound
from forewarn.core.ids import derived_guid
from forewarn.fleet.file import Imds, Strict
from forewarn.fleet.model import Fleet
from forewarn.fleet.section import BuildContext

CLOUD = "azure"
DEFAULT_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"


def azure_fleet(fleet: Fleet) -> AzureFleet:
    """Azure's part of ``fleet``: its VMs, scopes and policies."""
    return fleet.part(CLOUD, AzureFleet)


class AzureFleet:
    """The fleet's VMs, indexed by host, broadcast scope and policy owner. VM names are unique across the fleet."""

    def __init__(self, vms: Iterable[VM] = (), policies: Iterable[Policy] = ()):
        self.vms: dict[str, VM] = {}
        fleet_vms = self.vms
        for vm in vms:
            if vm.name in fleet_vms:
                raise ValueError(f"duplicate VM name {vm.name!r}")
            fleet_vms[vm.name] = vm
        self.policies = {policy.owner: policy for policy in policies}  # as deployed; the engine keeps them current
        self.vms_by_host: dict[str, list[VM]] = {}
        self.vms_by_scope: dict[str, list[VM]] = {}
        # A standalone VM and an availability set are their own scope: their lists are the scope's (one list, not two)
        self.vms_by_owner: dict[str, list[VM]] = {}
        by_host, by_scope, by_owner = self.vms_by_host, self.vms_by_scope, self.vms_by_owner
        for vm in fleet_vms.values():
            on_host = by_host.get(vm.host)
            if on_host is None:
                on_host = by_host[vm.host] = []
            on_host.append(vm)
            members = by_scope.get(vm.scope)
            if members is None:
                members = by_scope[vm.scope] = []
                if vm.scope is vm.policy_owner:
                    by_owner[vm.policy_owner] = members
            members.append(vm)
            if vm.scope is not vm.policy_owner:
                by_owner.setdefault(vm.policy_owner, []).append(vm)
        # Built on first use: most servers never need them, and at a million VMs each is tens of megabytes.
        self._vm_positions: dict[str, int] | None = None
        self._owners_by_name: dict[str, list[str]] | None = None

    machine_kind = "vm"

    @property
    def machines(self) -> Mapping[str, VM]:
        return self.vms

    def also_named(self, name: str) -> VM | None:
        return None

    def vm(self, name: str) -> VM:
        try:
            return self.vms[name]
        except KeyError:
            raise NotFound(f"no VM named {name!r} in the fleet", name=name, known=self.vms.keys()) from None

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

    def summary(self) -> dict[str, int]:
        return {"azure_vms": len(self.vms), "scopes": len(self.vms_by_scope)}

    def described(self, counted: Callable[[int, str], str]) -> str:
        return f"{counted(len(self.vms), 'Azure VM')} in {counted(len(self.vms_by_scope), 'scope')}"

    def to_records(self) -> dict[str, Any]:
        """The VMs in columns (format 2), one list per field, the repeated text (hosts, subscriptions, groups,
        locations, sizes, sets) as indexes into one table of strings, and a field that is the same for every VM as
        that one value: a million VMs come to tens of megabytes of JSON that loads in about a second, instead of a
        million objects of nineteen keys each."""
        return {"vms": _vm_columns(list(self.vms.values())), "policies": policy_records(self.policies.values())}

    @classmethod
    def from_records(cls, records: Mapping[str, Any]) -> AzureFleet:
        """From :meth:`to_records`, or from the records of a database written before format 2 (one mapping per
        VM)."""
        vms = records["vms"]
        return cls(
            vms=[VM(**vm) for vm in vms] if isinstance(vms, list) else _vms_from_columns(vms),
            policies=policies_from_records(records.get("policies", [])),
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AzureFleet)
            and list(self.vms.values()) == list(other.vms.values())
            and self.policies == other.policies
        )


# ---------------------------------------------------------------------------------------------------- the file
class Placement(Strict):
    subscription: str | None = None
    resource_group: str | None = None
    location: str | None = None
    size: str | None = None
    os_type: Literal["Linux", "Windows"] | None = None


class AutomaticApproval(Strict):
    automatically_approve: bool = False


class CentralPublishing(Strict):
    enable: bool = False
    # "Scheduled Events in Event Grid": "During the preview, the only supported value is 2020-07-01".
    scheduled_events_api_version: Literal["2020-07-01"] = "2020-07-01"


class PublishingTargets(Strict):
    event_grid_and_resource_graph: CentralPublishing = Field(default_factory=CentralPublishing)


class ScheduledEventsPolicySpec(Strict):
    """scheduledEventsPolicy: user-initiated operations approved automatically ("Scheduled Events for Azure
    Virtual Machines"), and central
    publishing to Event Grid and Resource Graph ("Scheduled Events in Event Grid")."""

    user_initiated_reboot: AutomaticApproval = Field(default_factory=AutomaticApproval)
    user_initiated_redeploy: AutomaticApproval = Field(default_factory=AutomaticApproval)
    scheduled_events_additional_publishing_targets: PublishingTargets = Field(default_factory=PublishingTargets)


class NotificationProfileSpec(Strict):
    enable: bool = False
    not_before_timeout: str = "PT5M"


class ScheduledEventsProfileSpec(Strict):
    """scheduledEventsProfile of a scale set's model ("Terminate notification for Azure Virtual Machine Scale Set
    instances")."""

    terminate_notification_profile: NotificationProfileSpec = Field(default_factory=NotificationProfileSpec)
    os_image_notification_profile: NotificationProfileSpec = Field(
        default_factory=lambda: NotificationProfileSpec(not_before_timeout="PT15M")
    )


class AvailabilitySetSpec(Strict):
    name: str = Field(min_length=1)
    subscription: str | None = None
    resource_group: str | None = None
    fault_domains: int = Field(default=2, ge=1, le=3)
    update_domains: int = Field(default=5, ge=1, le=20)
    scheduled_events_policy: ScheduledEventsPolicySpec | None = None


class VMSpec(Placement):
    name: str = Field(min_length=1)
    host: str | None = None
    availability_set: str | None = None
    zone: str | None = None
    fault_domain: int | None = Field(default=None, ge=0)
    update_domain: int | None = Field(default=None, ge=0)
    spot: bool = False
    vm_id: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    imds: Imds | None = None
    scheduled_events_policy: ScheduledEventsPolicySpec | None = None  # standalone VMs only


class ScaleSetSpec(Placement):
    name: str = Field(min_length=1)
    instances: int = Field(ge=0, le=1_000_000)
    hosts: list[str] = Field(default_factory=list)
    zones: list[str] = Field(default_factory=list)
    spot: bool = False
    placement_group_size: int = Field(default=100, ge=1)
    fault_domains: int = Field(default=5, ge=1, le=5)
    update_domains: int = Field(default=5, ge=1, le=20)
    tags: dict[str, str] = Field(default_factory=dict)
    imds: Imds | None = None  # the first instance's address or port; later instances count up from it
    scheduled_events_policy: ScheduledEventsPolicySpec | None = None
    scheduled_events_profile: ScheduledEventsProfileSpec | None = None


@dataclass(frozen=True)
class AzureFleetSection:
    """Azure's keys of the fleet file."""

    def spec_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {
            "availability_sets": (list[AvailabilitySetSpec], Field(default_factory=list)),
            "vms": (list[VMSpec], Field(default_factory=list)),
            "scale_sets": (list[ScaleSetSpec], Field(default_factory=list)),
        }

    def default_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {
            **{key: (field.annotation, field) for key, field in Placement.model_fields.items()},
            "zone": (str | None, None),
        }

    def build(self, spec: Any, context: BuildContext) -> AzureFleet:
        vms = _vms(spec, context)
        return AzureFleet(vms, _policies(spec, vms, context.fail))

    def from_records(self, records: Mapping[str, Any]) -> AzureFleet:
        return AzureFleet.from_records(records)


def _vms(spec: Any, context: BuildContext) -> list[VM]:
    """Every VM of the file: the standalone ones and those of availability sets, then each scale set's."""
    vms: list[VM] = []
    _standalone_vms(spec, _availability_sets(spec, context), context, vms)
    for index, scale_set in enumerate(spec.scale_sets):
        _scale_set_vms(scale_set, ("scale_sets", index), spec.defaults, context, vms)
    _claim(vms, context)
    return vms


def _availability_sets(spec: Any, context: BuildContext) -> dict[str, AvailabilitySetSpec]:
    avsets: dict[str, AvailabilitySetSpec] = {}
    for index, avset_spec in enumerate(spec.availability_sets):
        if avset_spec.name in avsets:
            context.fail(("availability_sets", index, "name"), f"duplicate availability set {avset_spec.name!r}")
        avsets[avset_spec.name] = avset_spec
    return avsets


def _placement(item: Placement, defaults: Any, avset: AvailabilitySetSpec | None = None) -> dict:
    subscription = item.subscription or (avset and avset.subscription) or defaults.subscription
    return {
        "subscription_id": subscription or DEFAULT_SUBSCRIPTION,
        "resource_group": item.resource_group
        or (avset and avset.resource_group)
        or defaults.resource_group
        or "forewarn-rg",
        "location": item.location or defaults.location or "eastus",
        "size": item.size or defaults.size or "Standard_D2s_v3",
        "os_type": item.os_type or defaults.os_type or "Linux",
    }


def _standalone_vms(spec: Any, avsets: dict[str, AvailabilitySetSpec], context: BuildContext, vms: list[VM]) -> None:
    defaults = spec.defaults
    avset_members: dict[str, int] = {}
    for index, item in enumerate(spec.vms):
        path = ("vms", index)
        problem = name_problem(item.name, item.os_type or defaults.os_type)
        if problem is not None:
            context.fail(path + ("name",), problem)
        avset: AvailabilitySetSpec | None = None
        if item.availability_set is not None:
            avset = avsets.get(item.availability_set)
            if avset is None:
                avset = AvailabilitySetSpec(name=item.availability_set)
                avsets[item.availability_set] = avset
        host = item.host or f"{item.name}-host"
        if item.host is not None:
            context.check_host(item.host, path + ("host",))
        common = _placement(item, defaults, avset)
        member_index = avset_members.get(item.availability_set or "", 0)
        if avset is not None:
            avset_members[avset.name] = member_index + 1
        fault_domain = (
            item.fault_domain if item.fault_domain is not None else (member_index % avset.fault_domains if avset else 0)
        )
        update_domain = (
            item.update_domain
            if item.update_domain is not None
            else (member_index % avset.update_domains if avset else 0)
        )
        if avset is not None and fault_domain >= avset.fault_domains:
            context.fail(
                path + ("fault_domain",), f"availability set {avset.name!r} has {avset.fault_domains} fault domains"
            )
        if avset is not None and update_domain >= avset.update_domains:
            context.fail(
                path + ("update_domain",), f"availability set {avset.name!r} has {avset.update_domains} update domains"
            )
        vms.append(
            VM(
                name=item.name,
                host=host,
                zone=item.zone if item.zone is not None else (defaults.zone or ""),
                fault_domain=fault_domain,
                update_domain=update_domain,
                spot=item.spot,
                vm_id=item.vm_id
                or derived_guid("vmId", common["subscription_id"], common["resource_group"], item.name).lower(),
                availability_set=item.availability_set,
                tags=dict(item.tags) if item.tags else NO_TAGS,
                imds_address=item.imds.address if item.imds else None,
                imds_port=item.imds.port if item.imds else None,
                **common,
            )
        )


def _scale_set_vms(scale_set: ScaleSetSpec, path: tuple, defaults: Any, context: BuildContext, vms: list[VM]) -> None:
    problem = name_problem(scale_set.name, scale_set.os_type or defaults.os_type, "a scale set name")
    if problem is not None:
        context.fail(path + ("name",), problem)
    for host_index, host in enumerate(scale_set.hosts):
        context.check_host(host, path + ("hosts", host_index))
    common = _placement(scale_set, defaults)
    subscription_id, resource_group = common["subscription_id"], common["resource_group"]
    zone = defaults.zone or ""
    tags = dict(scale_set.tags) if scale_set.tags else NO_TAGS  # one mapping for the whole set
    for instance in range(scale_set.instances):
        name = f"{scale_set.name}_{instance}"
        address = port = None
        if scale_set.imds and scale_set.imds.address:
            address = str(ipaddress.ip_address(scale_set.imds.address) + instance)
        if scale_set.imds and scale_set.imds.port:
            port = scale_set.imds.port + instance
            if port > 65535:
                context.fail(path + ("imds", "port"), f"instance {instance} would need port {port}")
        vms.append(
            VM(
                name=name,
                host=scale_set.hosts[instance % len(scale_set.hosts)]
                if scale_set.hosts
                else f"{scale_set.name}-host-{instance}",
                zone=scale_set.zones[instance % len(scale_set.zones)] if scale_set.zones else zone,
                fault_domain=instance % scale_set.fault_domains,
                update_domain=instance % scale_set.update_domains,
                spot=scale_set.spot,
                vm_id=derived_guid("vmId", subscription_id, resource_group, name).lower(),
                scale_set=scale_set.name,
                instance_id=sys.intern(str(instance)),  # instances 0, 1, ... of every set share their ids
                placement_group=instance // scale_set.placement_group_size,
                tags=tags,
                imds_address=address,
                imds_port=port,
                **common,
            )
        )


def _claim(vms: list[VM], context: BuildContext) -> None:
    """The VMs' names, metadata addresses and ports, unique across the fleet."""
    names, addresses, ports = context.names, context.addresses, context.ports
    for vm in vms:
        if vm.name in names:
            context.refuse(f"duplicate VM name {vm.name!r}; VM names must be unique in a fleet")
        names[vm.name] = 1
        if vm.imds_address is not None:
            if vm.imds_address in addresses:
                context.refuse(
                    f"VMs {addresses[vm.imds_address]!r} and {vm.name!r} share imds address {vm.imds_address}"
                )
            addresses[vm.imds_address] = vm.name
        if vm.imds_port is not None:
            if vm.imds_port in ports:
                context.refuse(f"VMs {ports[vm.imds_port]!r} and {vm.name!r} share imds port {vm.imds_port}")
            ports[vm.imds_port] = vm.name


def _policies(spec: Any, vms: list[VM], fail: Callable[[tuple, str], NoReturn]) -> list[Policy]:
    """The policies and profiles the file sets, checked like the management API checks them."""
    # Only the owners the file gives a policy or profile to are looked for among the VMs (most fleets give none).
    wanted = {("vm", item.name) for item in spec.vms if item.scheduled_events_policy is not None}
    wanted |= {("avset", item.name) for item in spec.availability_sets if item.scheduled_events_policy is not None}
    wanted |= {
        ("vmss", item.name)
        for item in spec.scale_sets
        if item.scheduled_events_policy is not None or item.scheduled_events_profile is not None
    }
    owners: dict[tuple[str, str], str] = {}  # (kind, name) -> owner key
    members: dict[str, list[VM]] = {}
    for vm in vms if wanted else ():
        kind, name = (
            ("vmss", vm.scale_set)
            if vm.scale_set
            else (("avset", vm.availability_set) if vm.availability_set else ("vm", vm.name))
        )
        if (kind, name) in wanted:
            owners.setdefault((kind, name), vm.policy_owner)
            members.setdefault(vm.policy_owner, []).append(vm)
    found: list[Policy] = []

    def policy(path, kind, name, spec_policy, spec_profile=None):
        owner = owners.get((kind, name))
        if owner is None or (spec_policy is None and spec_profile is None):
            return
        terminate = os_image = NotificationProfile()
        try:
            if spec_profile is not None:
                terminate = _profile(spec_profile.terminate_notification_profile)
                os_image = _profile(spec_profile.os_image_notification_profile)
                check_terminate_profile(terminate, spot=any(vm.spot for vm in members[owner]))
                check_os_image_profile(os_image, members[owner][0].size)
        except CoreError as error:
            fail(path + ("scheduled_events_profile",), str(error))
        found.append(
            Policy(
                owner,
                auto_approve_reboot=bool(spec_policy and spec_policy.user_initiated_reboot.automatically_approve),
                auto_approve_redeploy=bool(spec_policy and spec_policy.user_initiated_redeploy.automatically_approve),
                terminate=terminate,
                os_image=os_image,
                publish_central=bool(
                    spec_policy
                    and spec_policy.scheduled_events_additional_publishing_targets.event_grid_and_resource_graph.enable
                ),
            )
        )

    for index, item in enumerate(spec.vms):
        if item.scheduled_events_policy is not None and item.availability_set is not None:
            fail(
                ("vms", index, "scheduled_events_policy"),
                f"VM {item.name} is in availability set {item.availability_set}; set the policy there",
            )
        policy(("vms", index), "vm", item.name, item.scheduled_events_policy)
    for index, avset in enumerate(spec.availability_sets):
        policy(("availability_sets", index), "avset", avset.name, avset.scheduled_events_policy)
    for index, scale_set in enumerate(spec.scale_sets):
        policy(
            ("scale_sets", index),
            "vmss",
            scale_set.name,
            scale_set.scheduled_events_policy,
            scale_set.scheduled_events_profile,
        )
    return found


def _profile(spec: NotificationProfileSpec) -> NotificationProfile:
    return NotificationProfile(spec.enable, parse_duration(spec.not_before_timeout))


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
