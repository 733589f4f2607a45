"""Reading fleet files (YAML) into a :class:`~forewarn.fleet.model.Fleet`.

Every problem is reported with the file, the line and what is wrong, e.g.
``fleet.yaml:12: vms[3].host: host 'host-9' is not declared under hosts``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import UnionType
from typing import Any, Literal, NoReturn, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from forewarn import yamlfile
from forewarn.aws.model import Ec2Instance
from forewarn.aws.names import name_tag_problem
from forewarn.azure.names import name_problem
from forewarn.azure.vms import (
    NO_TAGS,
    NotificationProfile,
    Policy,
    check_os_image_profile,
    check_terminate_profile,
)
from forewarn.core.durations import parse_duration
from forewarn.core.errors import CoreError, did_you_mean
from forewarn.core.ids import derived_guid
from forewarn.fleet.model import VM, Fleet, Host
from forewarn.gcp.model import (
    NAME,
    GceInstance,
    OnHostMaintenance,
    ProvisioningModel,
    TerminationAction,
    check_scheduling,
)
from forewarn.yamlfile import YamlFileError, line_of, where

DEFAULT_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
DEMO_FLEET = "demo"


class FleetFileError(Exception):
    """A fleet file was refused; the message names the file, the line and the problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Imds(_Strict):
    address: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            ipaddress.ip_address(value)
        return value


class Placement(_Strict):
    subscription: str | None = None
    resource_group: str | None = None
    location: str | None = None
    size: str | None = None
    os_type: Literal["Linux", "Windows"] | None = None


class Defaults(Placement):
    zone: str | None = None
    aws_account_id: str | None = Field(default=None, pattern=r"^\d{12}$")
    availability_zone: str | None = None  # EC2 instances
    gcp_project: str | None = Field(default=None, pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
    gce_zone: str | None = None  # Compute Engine instances


class GceScheduling(_Strict):
    """An instance's scheduling, as the Compute Engine API names it."""

    on_host_maintenance: Literal["MIGRATE", "TERMINATE"] | None = None  # default: MIGRATE (TERMINATE for Spot, GPUs)
    automatic_restart: bool | None = None  # default: true (false for Spot and preemptible)
    provisioning_model: Literal["STANDARD", "SPOT"] = "STANDARD"
    preemptible: bool = False
    instance_termination_action: Literal["STOP", "DELETE"] | None = None  # Spot and preemptible: default STOP


class GceGpus(_Strict):
    count: int = Field(ge=1, le=16)
    type: str = "nvidia-tesla-t4"


class GceSpec(_Strict):
    name: str = Field(min_length=1, max_length=63)
    id: str | None = Field(default=None, pattern=r"^[1-9][0-9]{0,19}$")
    project: str | None = Field(default=None, pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
    zone: str | None = None
    machine_type: str = "n2-standard-2"
    host: str | None = None
    sole_tenant_node: str | None = None
    scheduling: GceScheduling = Field(default_factory=GceScheduling)
    gpus: GceGpus | None = None
    imds: Imds | None = None


class Ec2Spec(_Strict):
    id: str | None = Field(default=None, pattern=r"^i-[0-9a-f]{17}$")
    name: str | None = None  # the Name tag; the id is derived from it when no id is given
    instance_type: str = "m5.large"
    root_device: Literal["ebs", "instance-store"] = "ebs"
    availability_zone: str | None = None
    host: str | None = None
    dedicated_host: str | None = Field(default=None, pattern=r"^h-[0-9a-f]{17}$")
    spot: bool = False
    auto_scaling_group: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    ami_id: str = Field(default="ami-0abcdef1234567890", pattern=r"^ami-[0-9a-f]{8,17}$")
    imds: Imds | None = None


class AutomaticApproval(_Strict):
    automatically_approve: bool = False


class CentralPublishing(_Strict):
    enable: bool = False
    # "Scheduled Events in Event Grid": "During the preview, the only supported value is 2020-07-01".
    scheduled_events_api_version: Literal["2020-07-01"] = "2020-07-01"


class PublishingTargets(_Strict):
    event_grid_and_resource_graph: CentralPublishing = Field(default_factory=CentralPublishing)


class ScheduledEventsPolicySpec(_Strict):
    """scheduledEventsPolicy: user-initiated operations approved automatically ("Scheduled Events for Azure
    Virtual Machines"), and central
    publishing to Event Grid and Resource Graph ("Scheduled Events in Event Grid")."""

    user_initiated_reboot: AutomaticApproval = Field(default_factory=AutomaticApproval)
    user_initiated_redeploy: AutomaticApproval = Field(default_factory=AutomaticApproval)
    scheduled_events_additional_publishing_targets: PublishingTargets = Field(default_factory=PublishingTargets)


class NotificationProfileSpec(_Strict):
    enable: bool = False
    not_before_timeout: str = "PT5M"


class ScheduledEventsProfileSpec(_Strict):
    """scheduledEventsProfile of a scale set's model ("Terminate notification for Azure Virtual Machine Scale Set
    instances")."""

    terminate_notification_profile: NotificationProfileSpec = Field(default_factory=NotificationProfileSpec)
    os_image_notification_profile: NotificationProfileSpec = Field(
        default_factory=lambda: NotificationProfileSpec(not_before_timeout="PT15M")
    )


class HostSpec(_Strict):
    name: str = Field(min_length=1)


class AvailabilitySetSpec(_Strict):
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


class FleetSpec(_Strict):
    defaults: Defaults = Field(default_factory=Defaults)
    default_vm: str | None = None
    hosts: list[HostSpec] = Field(default_factory=list)
    availability_sets: list[AvailabilitySetSpec] = Field(default_factory=list)
    vms: list[VMSpec] = Field(default_factory=list)
    scale_sets: list[ScaleSetSpec] = Field(default_factory=list)
    ec2_instances: list[Ec2Spec] = Field(default_factory=list)
    gce_instances: list[GceSpec] = Field(default_factory=list)
    # Event Grid topics and subscriptions (docs/azure-eventgrid.md): not the fleet, so not in the Fleet; checked by the
    # Event Grid surface, which owns their format.
    event_grid: dict[str, Any] | None = None


@dataclass(frozen=True)
class FleetDocument:
    """A fleet file: the fleet, and the sections other parts of forewarn read from it."""

    fleet: Fleet
    event_grid: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------------------- loading
def load_fleet(source: str | Path) -> Fleet:
    """Load a fleet file, or the built-in demo fleet when ``source`` is ``demo``."""
    return load_fleet_document(source).fleet


def load_fleet_document(source: str | Path) -> FleetDocument:
    return read_fleet_file(source).parse()


@dataclass(frozen=True)
class FleetFile:
    """A fleet file's text, read but not parsed yet: its ``digest`` is enough to recognize a file already stored."""

    text: str
    filename: str

    @property
    def digest(self) -> str:
        """The SHA-256 of the file's text: the same bytes, the same fleet (parsing a million VMs takes 20 s, hashing
        their file a fraction of a second)."""
        return hashlib.sha256(self.text.encode()).hexdigest()

    def parse(self) -> FleetDocument:
        return parse_fleet_document(self.text, self.filename)


def read_fleet_file(source: str | Path) -> FleetFile:
    """Read a fleet file (or the built-in demo fleet when ``source`` is ``demo``) without parsing it."""
    if str(source) == DEMO_FLEET:
        return FleetFile(resources.files("forewarn.data").joinpath("demo-fleet.yaml").read_text(), "demo-fleet.yaml")
    try:
        return FleetFile(yamlfile.read_text(source, "fleet file"), str(source))
    except YamlFileError as error:
        raise FleetFileError(str(error)) from None


def parse_fleet(text: str, filename: str = "<fleet>") -> Fleet:
    return parse_fleet_document(text, filename).fleet


def parse_fleet_document(text: str, filename: str = "<fleet>") -> FleetDocument:
    try:
        return _parse_fleet_document(text, filename, all_lines=False)
    except FleetFileError:
        # Parsed without the line of every value (a million-VM file has millions of them): parse again with them,
        # to report the problem at its line.
        return _parse_fleet_document(text, filename, all_lines=True)


def _parse_fleet_document(text: str, filename: str, all_lines: bool) -> FleetDocument:
    try:
        document = yamlfile.parse(text, filename, lines=all_lines)
    except YamlFileError as error:
        raise FleetFileError(str(error)) from None
    data, lines = document.data, document.lines
    if data is None:
        raise FleetFileError(
            f"{filename}:1: the fleet file is empty; a fleet file is a mapping with keys hosts, "
            "vms, scale_sets, ... (docs/fleet.md)"
        )
    if not isinstance(data, dict):
        raise FleetFileError(
            f"{filename}:1: a fleet file is a mapping with keys hosts, vms, scale_sets, ...; "
            f"this one is a {_kind(data)}"
        )
    try:
        spec = FleetSpec.model_validate(data)
    except ValidationError as error:
        problems = []
        for problem in error.errors():
            path = tuple(problem["loc"])
            message = problem["msg"]
            if problem["type"] == "extra_forbidden":
                message = f"unknown key {path[-1]!r}{did_you_mean(str(path[-1]), keys_at(path[:-1]))}"
            problems.append(f"{filename}:{line_of(path, lines)}: {where(path)}: {message}")
        raise FleetFileError("\n".join(problems)) from None
    document.data = data = None  # validated into spec: let it go before the VMs are built (hundreds of MB at 1M VMs)
    return FleetDocument(_build(spec, filename, lines), spec.event_grid)


def keys_at(path: tuple) -> list[str]:
    """The keys a fleet file's mapping at ``path`` (as pydantic locates it: keys and list indexes) may have; empty
    for a path that is not one of the file's mappings of known keys."""
    annotation: Any = FleetSpec
    for step in path:
        annotation = _optional_inner(annotation)
        if isinstance(step, str) and _is_spec(annotation) and step in annotation.model_fields:
            annotation = annotation.model_fields[step].annotation
        elif isinstance(step, int) and get_origin(annotation) is list:
            [annotation] = get_args(annotation)
        else:
            return []
    annotation = _optional_inner(annotation)
    return list(annotation.model_fields) if _is_spec(annotation) else []


def _optional_inner(annotation: Any) -> Any:
    """``X`` of ``X | None``; any other annotation as it is."""
    if get_origin(annotation) in (Union, UnionType):
        others = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(others) == 1:
            return others[0]
    return annotation


def _is_spec(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _kind(data) -> str:
    return "list" if isinstance(data, list) else "single value"


def _build(spec: FleetSpec, filename: str, lines: dict[tuple, int]) -> Fleet:
    def fail(path: tuple, message: str) -> NoReturn:
        raise FleetFileError(f"{filename}:{line_of(path, lines)}: {where(path)}: {message}")

    defaults = spec.defaults
    declared_hosts: dict[str, Host] = {}
    for index, host_spec in enumerate(spec.hosts):
        if host_spec.name in declared_hosts:
            fail(("hosts", index, "name"), f"duplicate host {host_spec.name!r}")
        declared_hosts[host_spec.name] = Host(host_spec.name)
    avsets: dict[str, AvailabilitySetSpec] = {}
    for index, avset_spec in enumerate(spec.availability_sets):
        if avset_spec.name in avsets:
            fail(("availability_sets", index, "name"), f"duplicate availability set {avset_spec.name!r}")
        avsets[avset_spec.name] = avset_spec
    avset_members: dict[str, int] = {}

    def placement(item: Placement, avset: AvailabilitySetSpec | None = None) -> dict:
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

    def check_host(name: str, path: tuple) -> None:
        if declared_hosts and name not in declared_hosts:
            fail(path, f"host {name!r} is not declared under hosts")

    vms: list[VM] = []
    for index, item in enumerate(spec.vms):
        path = ("vms", index)
        problem = name_problem(item.name, item.os_type or defaults.os_type)
        if problem is not None:
            fail(path + ("name",), problem)
        avset: AvailabilitySetSpec | None = None
        if item.availability_set is not None:
            avset = avsets.get(item.availability_set)
            if avset is None:
                avset = AvailabilitySetSpec(name=item.availability_set)
                avsets[item.availability_set] = avset
        host = item.host or f"{item.name}-host"
        if item.host is not None:
            check_host(item.host, path + ("host",))
        common = placement(item, avset)
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
            fail(path + ("fault_domain",), f"availability set {avset.name!r} has {avset.fault_domains} fault domains")
        if avset is not None and update_domain >= avset.update_domains:
            fail(
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

    for index, scale_set in enumerate(spec.scale_sets):
        path = ("scale_sets", index)
        problem = name_problem(scale_set.name, scale_set.os_type or defaults.os_type, "a scale set name")
        if problem is not None:
            fail(path + ("name",), problem)
        for host_index, host in enumerate(scale_set.hosts):
            check_host(host, path + ("hosts", host_index))
        common = placement(scale_set)
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
                    fail(path + ("imds", "port"), f"instance {instance} would need port {port}")
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

    names: dict[str, int] = {}
    addresses: dict[str, str] = {}
    ports: dict[int, str] = {}
    for vm in vms:
        if vm.name in names:
            raise FleetFileError(f"{filename}: duplicate VM name {vm.name!r}; VM names must be unique in a fleet")
        names[vm.name] = 1
        if vm.imds_address is not None:
            if vm.imds_address in addresses:
                raise FleetFileError(
                    f"{filename}: VMs {addresses[vm.imds_address]!r} and {vm.name!r} share imds address {vm.imds_address}"
                )
            addresses[vm.imds_address] = vm.name
        if vm.imds_port is not None:
            if vm.imds_port in ports:
                raise FleetFileError(
                    f"{filename}: VMs {ports[vm.imds_port]!r} and {vm.name!r} share imds port {vm.imds_port}"
                )
            ports[vm.imds_port] = vm.name
    policies = _policies(spec, vms, fail)
    instances = _ec2_instances(spec, check_host, fail, addresses, ports, names)
    gce = _gce_instances(spec, check_host, fail, addresses, ports, names)
    if spec.default_vm is not None and spec.default_vm not in names:
        fail(("default_vm",), f"{spec.default_vm!r} is not a VM, EC2 or Compute Engine instance of this fleet")
    machines = [vm.name for vm in vms] + [instance.instance_id for instance in instances] + [i.name for i in gce]
    if not machines:
        raise FleetFileError(
            f"{filename}:1: the fleet has no VM and no instance; declare vms, scale_sets "
            "(with instances), ec2_instances or gce_instances"
        )
    default_vm = spec.default_vm or (machines[0] if len(machines) == 1 else None)
    return Fleet(
        hosts=declared_hosts.values(), vms=vms, default_vm=default_vm, policies=policies, ec2=instances, gce=gce
    )


def _gce_instances(spec: FleetSpec, check_host, fail, addresses: dict, ports: dict, names: dict) -> list[GceInstance]:
    defaults = spec.defaults
    found: list[GceInstance] = []
    for index, item in enumerate(spec.gce_instances):
        path = ("gce_instances", index)
        if not NAME.match(item.name):
            fail(
                path + ("name",),
                "a Compute Engine name is 1-63 lowercase letters, digits and hyphens, starting with a letter and not "
                f"ending with a hyphen (RFC 1035): {item.name!r} is not",
            )
        if item.name in names:
            fail(path + ("name",), f"duplicate name {item.name!r}")
        names[item.name] = 1
        if item.host is not None:
            check_host(item.host, path + ("host",))
        scheduling = item.scheduling
        interruptible = scheduling.preemptible or scheduling.provisioning_model == "SPOT"
        gpus = item.gpus.count if item.gpus else 0
        on_host_maintenance = OnHostMaintenance(
            scheduling.on_host_maintenance or ("TERMINATE" if interruptible or gpus else "MIGRATE")
        )
        automatic_restart = (
            scheduling.automatic_restart if scheduling.automatic_restart is not None else not interruptible
        )
        try:
            check_scheduling(on_host_maintenance, automatic_restart, interruptible, gpus, item.name)
        except CoreError as error:
            fail(path + ("scheduling",), str(error))
        if scheduling.instance_termination_action is not None and not interruptible:
            fail(path + ("scheduling",), "instance_termination_action applies to Spot and preemptible instances only")
        if item.imds is not None:
            for what, key, seen in (("address", item.imds.address, addresses), ("port", item.imds.port, ports)):
                if key is not None and key in seen:
                    fail(path + ("imds", what), f"imds {what} {key} is already {seen[key]!r}'s")
                if key is not None:
                    seen[key] = item.name
        project = item.project or defaults.gcp_project or "forewarn-project"
        found.append(
            GceInstance(
                name=item.name,
                instance_id=item.id
                or str(
                    10**18
                    + int(derived_guid("gce-instance", project, item.name)[:16].replace("-", ""), 16) % (9 * 10**18)
                ),
                project=project,
                zone=item.zone or defaults.gce_zone or "us-central1-a",
                machine_type=item.machine_type,
                host=item.host or f"{item.name}-host",
                on_host_maintenance=on_host_maintenance,
                automatic_restart=automatic_restart,
                provisioning_model=ProvisioningModel(scheduling.provisioning_model),
                preemptible=scheduling.preemptible,
                termination_action=(
                    TerminationAction(scheduling.instance_termination_action or "STOP") if interruptible else None
                ),
                gpus=gpus,
                gpu_type=item.gpus.type if item.gpus else None,
                sole_tenant_node=item.sole_tenant_node,
                internal_ip=f"10.128.{index // 240}.{2 + index % 240}",
                imds_address=item.imds.address if item.imds else None,
                imds_port=item.imds.port if item.imds else None,
            )
        )
    return found


def _ec2_instances(spec: FleetSpec, check_host, fail, addresses: dict, ports: dict, names: dict) -> list[Ec2Instance]:
    defaults = spec.defaults
    found: list[Ec2Instance] = []
    for index, item in enumerate(spec.ec2_instances):
        path = ("ec2_instances", index)
        if item.id is None and item.name is None:
            fail(path, "give the instance an id (i- and 17 hex digits) or a name")
        for where_named, value in ((("name",), item.name), (("tags", "Name"), item.tags.get("Name"))):
            problem = None if value is None else name_tag_problem(value)
            if problem is not None:
                fail(path + where_named, problem)
        instance_id = item.id or f"i-{derived_guid('ec2-instance', item.name).replace('-', '').lower()[:17]}"
        if instance_id in names:
            fail(path, f"duplicate instance {instance_id}")
        names[instance_id] = 1
        if item.host is not None:
            check_host(item.host, path + ("host",))
        tags = dict(item.tags)
        if item.name is not None:
            tags.setdefault("Name", item.name)
        if item.imds is not None:
            for what, key, seen in (("address", item.imds.address, addresses), ("port", item.imds.port, ports)):
                if key is not None and key in seen:
                    fail(path + ("imds", what), f"imds {what} {key} is already {seen[key]!r}'s")
                if key is not None:
                    seen[key] = instance_id
        found.append(
            Ec2Instance(
                instance_id=instance_id,
                instance_type=item.instance_type,
                root_device=item.root_device,
                availability_zone=item.availability_zone or defaults.availability_zone or "us-east-1a",
                host=item.host or f"{instance_id}-host",
                account_id=defaults.aws_account_id or "123456789012",
                spot=item.spot,
                auto_scaling_group=item.auto_scaling_group,
                dedicated_host=item.dedicated_host,
                tags=tags,
                ami_id=item.ami_id,
                private_ip=f"10.0.{index // 240}.{10 + index % 240}",
                imds_address=item.imds.address if item.imds else None,
                imds_port=item.imds.port if item.imds else None,
            )
        )
    return found


def _policies(spec: FleetSpec, vms: list[VM], fail) -> list[Policy]:
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
