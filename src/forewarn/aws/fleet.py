"""EC2's section of the fleet file (``ec2_instances``) and EC2's part of the fleet: its instances."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import Field

from forewarn.aws.fleet_queues import QueuePath, build_queue_path, queue_path_fields
from forewarn.aws.model import Ec2Instance
from forewarn.aws.names import name_tag_problem
from forewarn.core.errors import NotFound
from forewarn.core.ids import derived_guid
from forewarn.fleet.file import Imds, Strict
from forewarn.fleet.model import Fleet
from forewarn.fleet.section import BuildContext

CLOUD = "aws"


def ec2_fleet(fleet: Fleet) -> Ec2Fleet:
    """EC2's part of ``fleet``: its instances."""
    return fleet.part(CLOUD, Ec2Fleet)


class Ec2Fleet:
    """The fleet's EC2 instances, by instance id, and the queue path the fleet file declares (aws/fleet_queues.py)."""

    def __init__(self, instances: Iterable[Ec2Instance] = (), queue_path: QueuePath | None = None):
        self.queue_path = queue_path or QueuePath()
        self.instances: dict[str, Ec2Instance] = {}
        for instance in instances:
            if instance.instance_id in self.instances:
                raise ValueError(f"duplicate instance {instance.instance_id!r}")
            self.instances[instance.instance_id] = instance

    machine_kind = "instance"

    @property
    def machines(self) -> Mapping[str, Ec2Instance]:
        return self.instances

    def instance(self, instance_id: str) -> Ec2Instance:
        try:
            return self.instances[instance_id]
        except KeyError:
            raise NotFound(
                f"The instance ID '{instance_id}' does not exist", name=instance_id, known=self.instances.keys()
            ) from None

    def also_named(self, name: str) -> Ec2Instance | None:
        """The instance whose Name tag is ``name``, when no other instance has it."""
        named = [instance for instance in self.instances.values() if instance.name == name]
        return named[0] if len(named) == 1 else None

    def summary(self) -> dict[str, int]:
        return {"ec2_instances": len(self.instances), **(self.queue_path.summary() if self.queue_path else {})}

    def described(self, counted: Callable[[int, str], str]) -> str:
        path = self.queue_path
        if not path:
            return counted(len(self.instances), "EC2 instance")
        parts = [counted(len(path.queues), "SQS queue"), counted(len(path.rules), "EventBridge rule")]
        parts.append(counted(len(path.hooks), "lifecycle hook"))
        return f"{counted(len(self.instances), 'EC2 instance')} ({', '.join(parts)})"

    def to_records(self) -> dict[str, Any]:
        return {"ec2": [asdict(instance) for instance in self.instances.values()], **self.queue_path.to_records()}

    @classmethod
    def from_records(cls, records: Mapping[str, Any]) -> Ec2Fleet:
        instances = (Ec2Instance(**instance) for instance in records.get("ec2", []))
        return cls(instances, QueuePath.from_records(records))

    def __eq__(self, other: object) -> bool:
        """The same instances in the same order, and the same queue path (the component's start state both)."""
        return (
            isinstance(other, Ec2Fleet)
            and list(self.instances.values()) == list(other.instances.values())
            and self.queue_path == other.queue_path
        )


class Ec2Spec(Strict):
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


@dataclass(frozen=True)
class Ec2FleetSection:
    """EC2's keys of the fleet file."""

    def spec_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {"ec2_instances": (list[Ec2Spec], Field(default_factory=list)), **queue_path_fields()}

    def default_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {
            "aws_account_id": (str | None, Field(default=None, pattern=r"^\d{12}$")),
            "aws_region": (str | None, Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")),
            "availability_zone": (str | None, None),
        }

    def build(self, spec: Any, context: BuildContext) -> Ec2Fleet:
        instances = _instances(spec, context)
        groups = {instance.auto_scaling_group for instance in instances if instance.auto_scaling_group}
        return Ec2Fleet(instances, build_queue_path(spec, context, groups))

    def from_records(self, records: Mapping[str, Any]) -> Ec2Fleet:
        return Ec2Fleet.from_records(records)


def _instances(spec: Any, context: BuildContext) -> list[Ec2Instance]:
    fail, names = context.fail, context.names
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
            context.check_host(item.host, path + ("host",))
        tags = dict(item.tags)
        if item.name is not None:
            tags.setdefault("Name", item.name)
        if item.imds is not None:
            context.claim_imds(path, item.imds.address, item.imds.port, instance_id)
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
