"""Amazon EC2 scheduled events: instances, their events, and the rules of the AWS page "Scheduled events for your
instances".

An EC2 event belongs to one instance (there are no broadcast scopes): it is *active* from the moment it is scheduled,
its impact happens at NotBefore (the platform's choice within NotBefore..NotAfter), and it then becomes *completed*
(description prefixed ``[Completed] ``), or *canceled* before it starts (``[Canceled] ``).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from forewarn.core.bounds import MAX_EC2_DEADLINE, MAX_EVENT_LENGTH, MAX_NOTICE, check_duration
from forewarn.core.errors import Invalid


class Ec2Code(str, enum.Enum):
    INSTANCE_REBOOT = "instance-reboot"  # in-place reboot; the host is maintained
    SYSTEM_REBOOT = "system-reboot"  # reboot migration to a new host
    SYSTEM_MAINTENANCE = "system-maintenance"  # brief network or power impact
    INSTANCE_RETIREMENT = "instance-retirement"  # EBS root: stopped; instance store root: terminated
    INSTANCE_STOP = "instance-stop"  # stopped; moves to a new host when started again (EBS root only)


# "After a scheduled event is completed, it can still be described for up to a week" (the EC2 user guide, "Scheduled
# events for your instances"): DescribeInstanceStatus shows an ended event that long.
EVENT_HISTORY = timedelta(days=7)


class Ec2EventState(str, enum.Enum):
    ACTIVE = "active"
    COMPLETED = "completed"
    CANCELED = "canceled"


class InstanceState(str, enum.Enum):
    """EC2 instance states, with their API codes."""

    PENDING = "pending"
    RUNNING = "running"
    SHUTTING_DOWN = "shutting-down"
    TERMINATED = "terminated"
    STOPPING = "stopping"
    STOPPED = "stopped"

    @property
    def code(self) -> int:
        return {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}[
            self.value
        ]


INSTANCE_ID = re.compile(r"^i-[0-9a-f]{17}$")


_DIRECTIONS = {
    "east": "e",
    "west": "w",
    "north": "n",
    "south": "s",
    "central": "c",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
    "gov": "g",
    "iso": "i",
    "isob": "ib",
}


def _region_code(region: str) -> str:
    """us-east-1 → use1, ap-southeast-2 → apse2, us-gov-west-1 → usgw1 (the prefixes of real zone IDs)."""
    parts = region.split("-")
    return parts[0] + "".join(_DIRECTIONS.get(part, part[:1]) for part in parts[1:-1]) + parts[-1]


@lru_cache(maxsize=4096)  # read for every instance of every DescribeInstanceStatus page
def availability_zone_id(zone: str) -> str:
    """A zone ID derived from the zone name: the zone's letter gives its number (us-east-1a → use1-az1).

    Real accounts map names to IDs in a per-account shuffle (the docs' us-east-1a is use1-az4); without an account to
    copy from, the identity order is the choice. Local Zones: us-west-2-lax-1a → usw2-lax1-az1."""
    match = re.match(r"^([a-z]+(?:-[a-z]+)+-\d+)(?:-([a-z]+)-(\d+))?([a-z])$", zone)
    if match is None:
        return f"{zone}-az1"
    region, local, local_number, letter = match.groups()
    base = _region_code(region) + (f"-{local}{local_number}" if local else "")
    return f"{base}-az{ord(letter) - ord('a') + 1}"


@dataclass(frozen=True)
class Ec2Instance:
    """An instance as deployed (the fleet file's ``ec2_instances``)."""

    instance_id: str
    instance_type: str
    root_device: str  # "ebs" or "instance-store"
    availability_zone: str
    host: str
    account_id: str
    spot: bool = False
    auto_scaling_group: str | None = None
    dedicated_host: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    ami_id: str = "ami-0abcdef1234567890"
    private_ip: str = "10.0.0.10"
    imds_address: str | None = None
    imds_port: int | None = None

    @property
    def region(self) -> str:
        return self.availability_zone[:-1] if self.availability_zone[-1:].isalpha() else self.availability_zone

    @property
    def fleet_name(self) -> str:
        """The instance's name in the fleet: its id (its Name tag need not be unique)."""
        return self.instance_id

    @property
    def interruptible(self) -> bool:
        return self.spot

    @property
    def name(self) -> str:
        return self.tags.get("Name", self.instance_id)

    @property
    def arn(self) -> str:
        return f"arn:aws:ec2:{self.region}:{self.account_id}:instance/{self.instance_id}"


@dataclass(frozen=True)
class Ec2Event:
    event_id: str  # instance-event- and 17 hex digits
    seq: int
    instance_id: str
    code: Ec2Code
    description: str
    not_before: datetime
    not_after: datetime | None
    not_before_deadline: datetime | None
    state: Ec2EventState
    created_at: datetime
    started_at: datetime | None = None
    ends_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def shown_description(self) -> str:
        """What IMDS and the API show: completed and canceled events carry a prefix (the same page)."""
        if self.state is Ec2EventState.COMPLETED:
            return "[Completed] " + self.description
        if self.state is Ec2EventState.CANCELED:
            return "[Canceled] " + self.description
        return self.description


@dataclass(frozen=True)
class Ec2State:
    """What an instance is going through now."""

    instance_id: str
    state: InstanceState
    host: str
    launched_at: datetime
    booted_at: datetime
    origin: str | None = None  # for a replacement launched by its Auto Scaling group: the instance it replaced
    impacted_by: str | None = None
    impact_until: datetime | None = None
    lifecycle_state: str = "InService"  # Auto Scaling target-lifecycle-state
    spot_action: str | None = None  # terminate | stop | hibernate
    spot_action_time: datetime | None = None
    rebalance_at: datetime | None = None
    move_on_start: bool = False  # instance-stop: the next start moves it to a new host
    terminated_at: datetime | None = None

    @property
    def gone(self) -> bool:
        return self.state in (InstanceState.TERMINATED, InstanceState.SHUTTING_DOWN)


@dataclass(frozen=True)
class Ec2Rules:
    """Defaults where the docs give typical values; every one can be overridden per event."""

    # Health: maintenance "generally pushed out approximately two weeks before the start time".
    notice: timedelta = timedelta(days=14)
    # The docs' example window is two hours (20:00 to 22:00); stop and retirement events often have no NotAfter.
    window: dict[Ec2Code, timedelta | None] = field(
        default_factory=lambda: {
            Ec2Code.INSTANCE_REBOOT: timedelta(hours=2),
            Ec2Code.SYSTEM_REBOOT: timedelta(hours=2),
            Ec2Code.SYSTEM_MAINTENANCE: timedelta(hours=2),
            Ec2Code.INSTANCE_RETIREMENT: None,
            Ec2Code.INSTANCE_STOP: None,
        }
    )
    # The docs' example deadline is about three weeks after NotBefore; reboot and maintenance events carry one, stop
    # and retirement events usually do not (the user guide's examples).
    deadline: dict[Ec2Code, timedelta | None] = field(
        default_factory=lambda: {
            Ec2Code.INSTANCE_REBOOT: timedelta(days=21),
            Ec2Code.SYSTEM_REBOOT: timedelta(days=21),
            Ec2Code.SYSTEM_MAINTENANCE: timedelta(days=21),
            Ec2Code.INSTANCE_RETIREMENT: None,
            Ec2Code.INSTANCE_STOP: None,
        }
    )
    # How long the impact lasts before the event completes: our choices ("seconds" for an in-place reboot,
    # "minutes" for a reboot migration).
    impact: dict[Ec2Code, timedelta] = field(
        default_factory=lambda: {
            Ec2Code.INSTANCE_REBOOT: timedelta(seconds=30),
            Ec2Code.SYSTEM_REBOOT: timedelta(minutes=5),
            Ec2Code.SYSTEM_MAINTENANCE: timedelta(minutes=2),
            Ec2Code.INSTANCE_RETIREMENT: timedelta(minutes=1),
            Ec2Code.INSTANCE_STOP: timedelta(minutes=1),
        }
    )
    spot_notice: timedelta = timedelta(minutes=2)  # "two-minute warning"
    # ModifyInstanceEventStartTime (its API reference and the user guide's limitations): not within 5 minutes of the
    # current start, at least 60 minutes from now.
    reschedule_freeze: timedelta = timedelta(minutes=5)
    reschedule_min_lead: timedelta = timedelta(minutes=60)

    def check(self) -> None:
        """Refuse (``Invalid``) a rule outside the bounds every event is held to."""
        check_ec2_rules(self)


def check_ec2_rules(rules: Ec2Rules) -> None:
    """The server's EC2 rules within the bounds every event is held to."""
    check_duration(rules.notice, "the EC2 notice", MAX_NOTICE)
    check_duration(rules.spot_notice, "the Spot interruption notice", MAX_NOTICE)
    for code in rules.impact:
        check_duration(rules.impact[code], f"the {code.value} impact", MAX_EVENT_LENGTH)
        window, deadline = rules.window.get(code), rules.deadline.get(code)
        if window is not None:
            check_duration(window, f"the {code.value} window", MAX_EVENT_LENGTH)
        if deadline is not None:
            check_duration(deadline, f"the {code.value} deadline", MAX_EC2_DEADLINE)


DESCRIPTIONS = {
    Ec2Code.SYSTEM_REBOOT: "The instance is scheduled for a reboot",  # docs' example
    Ec2Code.INSTANCE_REBOOT: "The instance is scheduled for a reboot",
    Ec2Code.SYSTEM_MAINTENANCE: "The instance is scheduled for maintenance",
    Ec2Code.INSTANCE_STOP: "The instance is running on degraded hardware",  # real sample (telegraf#8611)
    Ec2Code.INSTANCE_RETIREMENT: "The instance is running on degraded hardware",
}


def check_code_applies(code: Ec2Code, instance: Ec2Instance) -> None:
    if code is Ec2Code.INSTANCE_STOP and instance.root_device != "ebs":
        raise Invalid(
            f"instance-stop applies only to instances with an EBS root volume; {instance.instance_id} "
            "has an instance-store root"
        )


@dataclass(frozen=True)
class NotificationAttributes:
    """Which instance tags scheduled-event notifications carry (Register/DeregisterInstanceEventNotification-
    Attributes; per Region in AWS, for the whole fleet here)."""

    include_all: bool = False
    keys: tuple[str, ...] = ()

    def tags_of(self, instance: Ec2Instance) -> dict[str, str]:
        if self.include_all:
            return dict(instance.tags)
        return {key: value for key, value in instance.tags.items() if key in self.keys}
