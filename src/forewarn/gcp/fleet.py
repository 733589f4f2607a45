"""Compute Engine's section of the fleet file (``gce_instances``) and its part of the fleet: its instances."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from forewarn.core.errors import CoreError
from forewarn.core.ids import derived_guid
from forewarn.fleet.file import Imds, Strict
from forewarn.fleet.model import Fleet
from forewarn.fleet.section import BuildContext
from forewarn.gcp.model import (
    NAME,
    GceInstance,
    OnHostMaintenance,
    ProvisioningModel,
    TerminationAction,
    check_scheduling,
    gce_from_record,
    gce_record,
)

CLOUD = "gcp"
PROJECT = r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$"


def gce_fleet(fleet: Fleet) -> GceFleet:
    """Compute Engine's part of ``fleet``: its instances."""
    return fleet.part(CLOUD, GceFleet)


class GceFleet:
    """The fleet's Compute Engine instances, by name."""

    def __init__(self, instances: Iterable[GceInstance] = ()):
        self.instances: dict[str, GceInstance] = {}
        for instance in instances:
            if instance.name in self.instances:
                raise ValueError(f"duplicate instance {instance.name!r}")
            self.instances[instance.name] = instance

    machine_kind = "instance"

    @property
    def machines(self) -> Mapping[str, GceInstance]:
        return self.instances

    def also_named(self, name: str) -> GceInstance | None:
        return None

    def summary(self) -> dict[str, int]:
        return {"gce_instances": len(self.instances)}

    def described(self, counted: Callable[[int, str], str]) -> str:
        return counted(len(self.instances), "Compute Engine instance")

    def to_records(self) -> dict[str, Any]:
        return {"gce": [gce_record(instance) for instance in self.instances.values()]}

    @classmethod
    def from_records(cls, records: Mapping[str, Any]) -> GceFleet:
        return cls(gce_from_record(instance) for instance in records.get("gce", []))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GceFleet) and list(self.instances.values()) == list(other.instances.values())


class GceScheduling(Strict):
    """An instance's scheduling, as the Compute Engine API names it."""

    on_host_maintenance: Literal["MIGRATE", "TERMINATE"] | None = None  # default: MIGRATE (TERMINATE for Spot, GPUs)
    automatic_restart: bool | None = None  # default: true (false for Spot and preemptible)
    provisioning_model: Literal["STANDARD", "SPOT"] = "STANDARD"
    preemptible: bool = False
    instance_termination_action: Literal["STOP", "DELETE"] | None = None  # Spot and preemptible: default STOP


class GceGpus(Strict):
    count: int = Field(ge=1, le=16)
    type: str = "nvidia-tesla-t4"


class GceSpec(Strict):
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


@dataclass(frozen=True)
class GceFleetSection:
    """Compute Engine's keys of the fleet file."""

    def spec_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {"gce_instances": (list[GceSpec], Field(default_factory=list))}

    def default_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {"gcp_project": (str | None, Field(default=None, pattern=PROJECT)), "gce_zone": (str | None, None)}

    def build(self, spec: Any, context: BuildContext) -> GceFleet:
        return GceFleet(_instances(spec, context))

    def from_records(self, records: Mapping[str, Any]) -> GceFleet:
        return GceFleet.from_records(records)


def _instances(spec: Any, context: BuildContext) -> list[GceInstance]:
    fail, names = context.fail, context.names
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
            context.check_host(item.host, path + ("host",))
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
            context.claim_imds(path, item.imds.address, item.imds.port, item.name)
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
