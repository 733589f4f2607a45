"""Google Compute Engine host maintenance: instances, their scheduling, their maintenance events and the rules of
Google's pages "Host maintenance overview", "Query metadata server for maintenance event notices", "Handle GPU host
maintenance events", "Monitor and plan for a host maintenance event", "Simulate a host maintenance event", "Spot VMs"
and "Preemptible VM instances" (docs/gcp.md names what each rule follows).

A maintenance event belongs to one instance. It may be announced ahead (``upcoming-maintenance`` in the metadata
server, ``resourceStatus.upcomingMaintenance`` in the API: a window, a type, whether the user may start it early);
the ``maintenance-event`` key changes 60 seconds before it starts, an hour for instances with GPUs (only for instances
that asked for the key since their last event, and only for those that migrate or carry GPUs); at its start the
instance live-migrates to another host or is terminated (and restarted if ``automaticRestart``); at its end the key is
``NONE`` again.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from forewarn.core.bounds import MAX_EVENT_LENGTH, MAX_NOTICE, check_duration
from forewarn.core.errors import Invalid


class OnHostMaintenance(str, enum.Enum):
    MIGRATE = "MIGRATE"
    TERMINATE = "TERMINATE"


class ProvisioningModel(str, enum.Enum):
    STANDARD = "STANDARD"
    SPOT = "SPOT"


class TerminationAction(str, enum.Enum):
    """What preemption does to a Spot or preemptible instance ("Spot VMs": STOP by default, or DELETE)."""

    STOP = "STOP"
    DELETE = "DELETE"


class MaintenanceKind(str, enum.Enum):
    """What the platform does at the event's start; the ``maintenance-event`` value it shows before."""

    MIGRATE = "MIGRATE_ON_HOST_MAINTENANCE"
    TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"


NONE = "NONE"  # the maintenance-event value when nothing is under way


class MaintenanceType(str, enum.Enum):
    """UpcomingMaintenance.type (the Compute Engine API reference, "UpcomingMaintenance")."""

    SCHEDULED = "SCHEDULED"
    UNSCHEDULED = "UNSCHEDULED"


class EventState(str, enum.Enum):
    PENDING = "pending"  # announced (upcoming maintenance), the instance's notice (60 s; GPUs: 1 h) not given yet
    NOTIFIED = "notified"  # maintenance-event shows it
    ONGOING = "ongoing"  # migrating, or terminated during the maintenance
    COMPLETED = "completed"
    CANCELED = "canceled"


# A set: reading an enum member off its class costs about 100 ns on Python 3.11 (``GceEvent.live``).
LIVE_STATES = frozenset({EventState.PENDING, EventState.NOTIFIED, EventState.ONGOING})


class InstanceStatus(str, enum.Enum):
    """Instance.status values forewarn's instances go through (the API reference's enum)."""

    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    TERMINATED = "TERMINATED"  # stopped: the API calls a stopped instance TERMINATED


NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1035 names, as Compute Engine requires


@dataclass(frozen=True)
class GceInstance:
    """An instance as deployed (the fleet file's ``gce_instances``)."""

    name: str
    instance_id: str  # the API's numeric id (a uint64 in decimal)
    project: str
    zone: str
    machine_type: str
    host: str
    on_host_maintenance: OnHostMaintenance = OnHostMaintenance.MIGRATE
    automatic_restart: bool = True
    provisioning_model: ProvisioningModel = ProvisioningModel.STANDARD
    preemptible: bool = False
    termination_action: TerminationAction | None = None  # Spot and preemptible instances only
    gpus: int = 0
    gpu_type: str | None = None
    sole_tenant_node: str | None = None
    internal_ip: str = "10.128.0.2"
    imds_address: str | None = None
    imds_port: int | None = None

    @property
    def region(self) -> str:
        return self.zone.rsplit("-", 1)[0]

    @property
    def fleet_name(self) -> str:
        return self.name

    @property
    def interruptible(self) -> bool:
        return self.preemptible or self.provisioning_model is ProvisioningModel.SPOT

    @property
    def self_link(self) -> str:
        return f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{self.zone}/instances/{self.name}"


def gce_record(instance: GceInstance) -> dict[str, object]:
    """Plain data for the store's fleet record; :func:`gce_from_record` is its inverse."""
    return {name: value.value if isinstance(value, enum.Enum) else value for name, value in vars(instance).items()}


def gce_from_record(record: dict[str, object]) -> GceInstance:
    data = dict(record)
    data["on_host_maintenance"] = OnHostMaintenance(data["on_host_maintenance"])
    data["provisioning_model"] = ProvisioningModel(data["provisioning_model"])
    action = data.get("termination_action")
    data["termination_action"] = None if action is None else TerminationAction(action)
    return GceInstance(**data)  # type: ignore[arg-type]


def check_scheduling(
    on_host_maintenance: OnHostMaintenance,
    automatic_restart: bool,
    interruptible: bool,
    gpus: int,
    what: str,
) -> None:
    """The combinations Compute Engine refuses ("Spot VMs", "Preemptible VM instances", "Host maintenance overview":
    interruptible instances are TERMINATE without automatic restart; instances with GPUs cannot live-migrate)."""
    if interruptible and on_host_maintenance is not OnHostMaintenance.TERMINATE:
        raise Invalid(f"{what}: Spot and preemptible instances must use onHostMaintenance TERMINATE")
    if interruptible and automatic_restart:
        raise Invalid(f"{what}: Spot and preemptible instances cannot have automaticRestart")
    if gpus and on_host_maintenance is not OnHostMaintenance.TERMINATE:
        raise Invalid(f"{what}: instances with GPUs cannot live-migrate; use onHostMaintenance TERMINATE")


@dataclass(frozen=True)
class GceState:
    """What an instance is going through now, and its scheduling as last set (``setScheduling`` changes it)."""

    name: str
    status: InstanceStatus
    host: str
    on_host_maintenance: OnHostMaintenance
    automatic_restart: bool
    started_at: datetime  # lastStartTimestamp
    watched: bool = False  # asked for maintenance-event since its last maintenance event
    preempted: bool = False
    deleted: bool = False
    preempt_at: datetime | None = None  # the end of the preemption notice
    restart_at: datetime | None = None  # after a terminating maintenance or a host error, with automaticRestart
    stopped_at: datetime | None = None  # lastStopTimestamp


@dataclass(frozen=True)
class GceMaintenance:
    """One maintenance event of one instance."""

    event_id: str
    seq: int
    instance: str
    kind: MaintenanceKind
    maintenance_type: MaintenanceType
    window_start: datetime  # when the maintenance starts
    window_end: datetime  # the end of the window UpcomingMaintenance shows
    latest_window_start: datetime
    can_reschedule: bool
    announced: bool  # shown as upcoming maintenance before it starts
    state: EventState
    created_at: datetime
    reason: str
    notice_at: datetime | None = None  # when maintenance-event changed (None: no notice was given)
    started_at: datetime | None = None
    ends_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass(frozen=True)
class GceRules:
    """Defaults where the pages give values; each can be overridden per command."""

    # "The value of this metadata key changes 60 seconds before a maintenance event starts" ("Query metadata server
    # for maintenance event notices").
    notice: timedelta = timedelta(seconds=60)
    # Instances with GPUs: "Compute Engine gives GPU VMs a 1-hour stopping notice, while normal VMs receive only a
    # 60-second notice" ("Handle GPU host maintenance events").
    gpu_notice: timedelta = timedelta(hours=1)
    # Spot and preemptible: "Compute Engine sends a preemption notice ... 30 seconds" before stopping the instance.
    preemption_notice: timedelta = timedelta(seconds=30)
    # How long a migration's key stays set and a terminating maintenance keeps the instance down: our choices (a
    # live migration's blackout lasts well under a second; the key stays set while it is under way).
    migration: timedelta = timedelta(seconds=30)
    termination: timedelta = timedelta(minutes=5)
    # The window UpcomingMaintenance shows: its length is our choice. (How far ahead maintenance is announced is each
    # request's notice: "Monitor and plan for a host maintenance event" speaks of at least seven days.)
    window: timedelta = timedelta(hours=1)
    # How long an instance that crashed with its host stays down before automaticRestart brings it back: our choice.
    host_error_restart: timedelta = timedelta(minutes=2)

    def check(self) -> None:
        """Refuse (``Invalid``) a rule outside the bounds every event is held to."""
        check_gce_rules(self)


def check_gce_rules(rules: GceRules) -> None:
    for value, what in (
        (rules.notice, "the GCE notice"),
        (rules.gpu_notice, "the GCE notice of GPU instances"),
        (rules.preemption_notice, "the preemption notice"),
    ):
        check_duration(value, what, MAX_NOTICE)
    for value, what in (
        (rules.migration, "the migration"),
        (rules.termination, "the terminating maintenance"),
        (rules.window, "the maintenance window"),
        (rules.host_error_restart, "the restart after a host error"),
    ):
        check_duration(value, what, MAX_EVENT_LENGTH)
