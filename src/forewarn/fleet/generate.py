"""Large fleets for waves and benchmarks: a fleet file written from a seed, the same file for the same arguments.

The mix follows what a region's tenants run: most VMs in scale sets (some large, spanning several placement groups),
a good share in availability sets, the rest standalone, a few of those Spot; several subscriptions; hosts shared by
tenants. Scale sets are written as one entry with ``instances: N``, so a 100,000-VM file stays small; VMs in
availability sets and standalone VMs are written one per entry, as a user would.

Compute Engine instances (``--gce N``) are written one per entry after the VMs, on the same hosts, spread over a few
zones and projects: most of them standard instances that live-migrate, a share with a GPU (which Compute Engine
terminates for maintenance instead) and a share of Spot VMs. Their choices come after every VM's from the seed, so a
fleet without them is the same file as before. EC2 instances (``ec2``, from Python: the benchmarks' very large
fleets) come last the same way: named ``ec2-NNNNN`` (the id derived from the name), on the same hosts, over a few
availability zones, a share of them Spot.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import yaml

from forewarn.core.words import counted

LOCATIONS = ("eastus", "westeurope", "southeastasia")
SIZES = ("Standard_D2s_v3", "Standard_D4s_v5", "Standard_E8s_v5", "Standard_F4s_v2")
GCE_ZONES = ("us-central1-a", "us-central1-b", "us-central1-c", "europe-west1-b", "asia-southeast1-a")
GCE_MACHINE_TYPES = ("e2-standard-2", "n2-standard-4", "n2-standard-8", "c3-standard-4")
GCE_GPU = ("g2-standard-8", "nvidia-l4")  # machine type and accelerator of a GPU instance
EC2_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "eu-west-1a")
EC2_TYPES = ("m6i.large", "c6i.xlarge", "r6i.large", "t3.medium")


@dataclass(frozen=True)
class FleetShape:
    vms: int
    vms_per_host: int = 10
    subscriptions: int = 0  # 0: one per 10,000 VMs (at least one)
    scale_set_share: float = 0.6
    availability_set_share: float = 0.3
    spot_share: float = 0.05  # of the standalone VMs
    seed: str = "forewarn"
    gce: int = 0  # Compute Engine instances
    gce_gpu_share: float = 0.05
    gce_spot_share: float = 0.1
    ec2: int = 0  # EC2 instances
    ec2_spot_share: float = 0.1

    def checked(self) -> FleetShape:
        if not all(0 <= count <= 1_000_000 for count in (self.vms, self.gce, self.ec2)):
            raise ValueError("--vms, --gce and ec2 must each be between 0 and 1,000,000")
        if self.vms + self.gce + self.ec2 == 0:
            raise ValueError("the fleet needs at least one machine: give --vms or --gce")
        if not 0 <= self.ec2_spot_share <= 1:
            raise ValueError("the EC2 Spot share must be between 0 and 1")
        if not (0 <= self.gce_gpu_share and 0 <= self.gce_spot_share and self.gce_gpu_share + self.gce_spot_share <= 1):
            raise ValueError("the GCE GPU and Spot shares must be between 0 and 1 and add up to 1 at most")
        if not 1 <= self.vms_per_host <= 1000:
            raise ValueError("--vms-per-host must be between 1 and 1000")
        if not (
            0 <= self.scale_set_share
            and 0 <= self.availability_set_share
            and self.scale_set_share + self.availability_set_share <= 1
        ):
            raise ValueError(
                "the scale-set and availability-set shares must be between 0 and 1 and add up to 1 at most"
            )
        if not 0 <= self.spot_share <= 1:
            raise ValueError("the Spot share must be between 0 and 1")
        if self.subscriptions < 0:
            raise ValueError("--subscriptions cannot be negative")
        return self


def generate_fleet(shape: FleetShape) -> dict:
    """The fleet file's content as plain data (hosts, availability_sets, vms, scale_sets, and gce_instances when
    asked for). The random choices are drawn in a fixed order (subscriptions, scale sets, availability sets,
    standalone VMs, then Compute Engine and EC2 instances), so the same shape gives the same file."""
    shape = shape.checked()
    rng = random.Random(shape.seed)
    hosts = HostCursor(max(1, -(-(shape.vms + shape.gce + shape.ec2) // shape.vms_per_host)))
    placement = Placement(random_subscriptions(rng, shape.subscriptions or max(1, shape.vms // 10_000)), rng)
    in_scale_sets = round(shape.vms * shape.scale_set_share)
    in_availability_sets = round(shape.vms * shape.availability_set_share)
    standalone = shape.vms - in_scale_sets - in_availability_sets

    scale_sets = scale_sets_of(in_scale_sets, rng, hosts, placement)
    availability_sets, vms = availability_sets_of(in_availability_sets, rng, hosts, placement)
    vms += standalone_vms(standalone, shape.spot_share, rng, hosts, placement)
    content: dict[str, Any] = {
        "hosts": [{"name": name} for name in hosts.names],
        "availability_sets": availability_sets,
        "vms": vms,
        "scale_sets": scale_sets,
    }
    if shape.gce:
        content["gce_instances"] = _gce_instances(shape, rng, hosts.next)
    if shape.ec2:
        content["ec2_instances"] = _ec2_instances(shape, rng, hosts.next)
    return content


class HostCursor:
    """The hosts machines go to in turn: tenants share hosts, and every host fills up evenly."""

    def __init__(self, count: int):
        self.names = [f"host-{i:05d}" for i in range(count)]
        self._cursor = 0

    def next(self, count: int) -> list[str]:
        """The hosts of the next ``count`` machines (each host once, when there are fewer hosts than machines)."""
        host_count = len(self.names)
        chosen = [self.names[(self._cursor + i) % host_count] for i in range(min(count, host_count))]
        self._cursor = (self._cursor + count) % host_count
        return chosen


def random_subscriptions(rng: random.Random, count: int) -> list[str]:
    """``count`` subscription ids, GUIDs of version 4."""
    return [
        f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4{rng.getrandbits(12):03x}-"
        f"{8 + rng.getrandbits(2):x}{rng.getrandbits(12):03x}-{rng.getrandbits(48):012x}"
        for _ in range(count)
    ]


@dataclass(frozen=True)
class Placement:
    """Where the ``index``-th scale set, availability set or standalone VM lives, and its size (drawn)."""

    subscriptions: list[str]
    rng: random.Random

    def __call__(self, index: int) -> dict:
        return {
            "subscription": self.subscriptions[index % len(self.subscriptions)],
            "resource_group": f"rg-{index % 7:02d}",
            "location": LOCATIONS[index % len(LOCATIONS)],
            "size": self.rng.choice(SIZES),
        }


def scale_sets_of(count: int, rng: random.Random, hosts: HostCursor, placement: Placement) -> list[dict[str, Any]]:
    """Scale sets of assorted sizes holding ``count`` VMs in all, every third one zonal."""
    scale_sets: list[dict[str, Any]] = []
    left = count
    while left > 0:
        size = min(left, rng.choice((2, 5, 10, 20, 50, 100, 100, 250, 500, 1000)))
        index = len(scale_sets)
        scale_sets.append(
            {
                "name": f"vmss-{index:04d}",
                "instances": size,
                "hosts": hosts.next(size),
                **({"zones": ["1", "2", "3"]} if index % 3 == 0 else {}),
                **placement(index),
            }
        )
        left -= size
    return scale_sets


def availability_sets_of(
    count: int, rng: random.Random, hosts: HostCursor, placement: Placement
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Availability sets holding ``count`` VMs in all, and those VMs (one entry each, on distinct hosts while there
    are enough)."""
    availability_sets: list[dict[str, Any]] = []
    vms: list[dict[str, Any]] = []
    left = count
    while left > 0:
        size = min(left, rng.choice((2, 3, 3, 5, 8, 12, 20)))
        index = len(availability_sets)
        common = placement(index)
        availability_sets.append(
            {
                "name": f"avset-{index:04d}",
                "subscription": common["subscription"],
                "resource_group": common["resource_group"],
                "fault_domains": rng.choice((2, 3)),
                "update_domains": rng.choice((5, 5, 10, 20)),
            }
        )
        member_hosts = hosts.next(size) * (size // len(hosts.names) + 1)
        for member, host in enumerate(member_hosts[:size]):
            vms.append(
                {
                    "name": f"avset-{index:04d}-vm{member}",
                    "host": host,
                    "availability_set": f"avset-{index:04d}",
                    **common,
                }
            )
        left -= size
    return availability_sets, vms


def standalone_vms(
    count: int, spot_share: float, rng: random.Random, hosts: HostCursor, placement: Placement
) -> list[dict[str, Any]]:
    vms: list[dict[str, Any]] = []
    for index in range(count):
        vm = {"name": f"vm-{index:05d}", "host": hosts.next(1)[0], **placement(index)}
        if rng.random() < spot_share:
            vm["spot"] = True
        vms.append(vm)
    return vms


def _ec2_instances(shape: FleetShape, rng: random.Random, next_hosts) -> list[dict[str, Any]]:
    instances: list[dict[str, Any]] = []
    for index in range(shape.ec2):
        instance: dict[str, Any] = {
            "name": f"ec2-{index:05d}",
            "instance_type": rng.choice(EC2_TYPES),
            "availability_zone": EC2_ZONES[index % len(EC2_ZONES)],
            "host": next_hosts(1)[0],
        }
        if rng.random() < shape.ec2_spot_share:
            instance["spot"] = True
        instances.append(instance)
    return instances


def _gce_instances(shape: FleetShape, rng: random.Random, next_hosts) -> list[dict[str, Any]]:
    """Standard instances keep Compute Engine's scheduling defaults (MIGRATE, automatic restart); GPU and Spot ones
    get theirs from the fleet file's rules (TERMINATE; Spot without automatic restart), so none is written here."""
    projects = [f"forewarn-{index:04d}" for index in range(shape.subscriptions or max(1, shape.gce // 10_000))]
    instances: list[dict[str, Any]] = []
    for index in range(shape.gce):
        instance: dict[str, Any] = {
            "name": f"gce-{index:05d}",
            "project": projects[index % len(projects)],
            "zone": GCE_ZONES[index % len(GCE_ZONES)],
            "host": next_hosts(1)[0],
        }
        draw = rng.random()
        if draw < shape.gce_gpu_share:
            instance["machine_type"], gpu_type = GCE_GPU
            instance["gpus"] = {"count": 1, "type": gpu_type}
        else:
            instance["machine_type"] = rng.choice(GCE_MACHINE_TYPES)
            if draw < shape.gce_gpu_share + shape.gce_spot_share:
                instance["scheduling"] = {"provisioning_model": "SPOT"}
        instances.append(instance)
    return instances


def fleet_yaml(shape: FleetShape) -> str:
    content = generate_fleet(shape)
    command = (
        f"forewarn fleet generate --vms {shape.vms} --vms-per-host {shape.vms_per_host} "
        f"--subscriptions {shape.subscriptions} --scale-set-share {shape.scale_set_share} "
        f"--availability-set-share {shape.availability_set_share} --spot-share {shape.spot_share} "
        f"--seed {shape.seed}"
    )
    gce = ""
    if shape.gce:
        command += f" --gce {shape.gce} --gce-gpu-share {shape.gce_gpu_share} --gce-spot-share {shape.gce_spot_share}"
        gce = f", {shape.gce} Compute Engine instances"
    if shape.ec2:  # no CLI option: benchmarks ask for them from Python
        command += f" (and from Python: ec2={shape.ec2}, ec2_spot_share={shape.ec2_spot_share})"
        gce += f", {shape.ec2} EC2 instances"
    header = (
        f"# Generated by `{command}`: {counted(len(content['hosts']), 'host')}, {counted(len(content['scale_sets']), 'scale set')}, "
        f"{len(content['availability_sets'])} availability sets{gce}.\n"
    )
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return header + yaml.dump(content, Dumper=dumper, sort_keys=False, default_flow_style=None, width=120)
