"""What happens to the simulated VMs: their running state, the impacts events have on them, and the policies and
notification profiles that decide how user operations are announced.

The fleet (``fleet.py``) is what was deployed; this module is what the VMs are going through now.
"""

from __future__ import annotations

import enum
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from forewarn.azure.model import EventType, Impact
from forewarn.core.durations import format_duration
from forewarn.core.errors import Invalid
from forewarn.core.frozen import evolve


class Power(str, enum.Enum):
    RUNNING = "running"
    FROZEN = "frozen"  # paused, memory and open files kept
    REBOOTING = "rebooting"  # non-persistent memory lost
    REDEPLOYING = "redeploying"  # moving to another host, temporary disk lost
    REIMAGING = "reimaging"  # OS disk reset to the image, temporary disk lost
    DELETED = "deleted"


# What an event of each type does to its VMs when it starts ("Scheduled Events for Azure Virtual Machines", the
# EventType descriptions).
IMPACT_OF_TYPE = {
    EventType.FREEZE: Impact.FREEZE,
    EventType.REBOOT: Impact.REBOOT,
    EventType.REDEPLOY: Impact.REDEPLOY,
    EventType.PREEMPT: Impact.DELETE,
    EventType.TERMINATE: Impact.DELETE,
}

POWER_DURING = {
    Impact.FREEZE: Power.FROZEN,
    Impact.REBOOT: Power.REBOOTING,
    Impact.REDEPLOY: Power.REDEPLOYING,
    Impact.REIMAGE: Power.REIMAGING,
    Impact.DELETE: Power.DELETED,
}


@dataclass(frozen=True, slots=True)
class NotificationProfile:
    """``terminateNotificationProfile`` or ``osImageNotificationProfile`` of a scale set."""

    enable: bool = False
    not_before_timeout: timedelta = timedelta(minutes=5)


NO_PROFILE = NotificationProfile()  # not enabled: what every policy and VM holds unless set (one object for all)


# the terminate-notification page: PT5M to PT15M
TERMINATE_TIMEOUT_RANGE = (timedelta(minutes=5), timedelta(minutes=15))
OS_IMAGE_TIMEOUT = timedelta(minutes=15)  # compute API: "the value must be 15 minutes (PT15M)"
# "Scheduled Events for Azure Virtual Machines": OS image notifications need sizes with memory-preserving updates; not the G, M, N and H series.
_UNSUPPORTED_OS_IMAGE_SIZE = re.compile(r"^(Standard_|Basic_)?(G|M|N|H)", re.IGNORECASE)


def check_terminate_profile(profile: NotificationProfile, spot: bool) -> None:
    if not profile.enable:
        return
    if spot:
        raise Invalid("terminate notifications cannot be enabled on Spot instances")
    low, high = TERMINATE_TIMEOUT_RANGE
    if not low <= profile.not_before_timeout <= high:
        raise Invalid(
            f"terminateNotificationProfile.notBeforeTimeout must be between PT5M and PT15M, "
            f"got {format_duration(profile.not_before_timeout)}"
        )


def check_os_image_profile(profile: NotificationProfile, size: str) -> None:
    if not profile.enable:
        return
    if _UNSUPPORTED_OS_IMAGE_SIZE.match(size):
        raise Invalid(f"OS image notifications are not supported for size {size} (G, M, N and H series)")
    if profile.not_before_timeout != OS_IMAGE_TIMEOUT:
        raise Invalid(
            "osImageNotificationProfile.notBeforeTimeout must be PT15M, got "
            f"{format_duration(profile.not_before_timeout)}"
        )


@dataclass(frozen=True, slots=True)
class Policy:
    """What a policy owner (a standalone VM, an availability set, a scale set) decides for all its VMs.

    ``auto_approve_reboot``/``auto_approve_redeploy`` are ``scheduledEventsPolicy.userInitiatedReboot`` and
    ``userInitiatedRedeploy.automaticallyApprove``. The notification profiles are the scale set's *model*; each
    instance runs the model version it was last updated to ("Terminate notification for Azure Virtual Machine
    Scale Set instances": "update the instances to the latest model").
    """

    owner: str
    auto_approve_reboot: bool = False
    auto_approve_redeploy: bool = False
    terminate: NotificationProfile = NO_PROFILE
    os_image: NotificationProfile = NO_PROFILE
    model_version: int = 1
    # scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph ("Scheduled Events in Event Grid"): the
    # owner's events are also published centrally, to its subscription's Event Grid system topic and to Resource
    # Graph.
    publish_central: bool = False


@dataclass(frozen=True, slots=True)
class VmState:
    name: str
    power: Power
    host: str
    booted_at: datetime
    temp_disk_generation: int = 1
    os_disk_generation: int = 1
    memory_generation: int = 1
    impacted_by: str | None = None  # the EventId whose impact the VM is going through
    impact_until: datetime | None = None
    terminate: NotificationProfile = NO_PROFILE  # as of its model version
    os_image: NotificationProfile = NO_PROFILE
    model_version: int = 1
    deleted_at: datetime | None = None

    @property
    def deleted(self) -> bool:
        return self.power is Power.DELETED

    def impacted(self, impact: Impact, event_id: str, now: datetime, until: datetime, new_host: str | None) -> VmState:
        """The VM as an impact begins."""
        changes: dict[str, Any] = {"power": POWER_DURING[impact], "impacted_by": event_id, "impact_until": until}
        if impact is Impact.DELETE:
            changes.update(impact_until=None, deleted_at=now)
            return evolve(self, **changes)
        if impact in (Impact.REBOOT, Impact.REDEPLOY, Impact.REIMAGE):
            changes["memory_generation"] = self.memory_generation + 1
        if impact in (Impact.REDEPLOY, Impact.REIMAGE):
            changes["temp_disk_generation"] = self.temp_disk_generation + 1
        if impact is Impact.REIMAGE:
            changes["os_disk_generation"] = self.os_disk_generation + 1
        if impact is Impact.REDEPLOY and new_host is not None:
            changes["host"] = new_host
        return evolve(self, **changes)

    def recovered(self, now: datetime) -> VmState:
        """Running again; a VM that went down (all but a freeze) booted now."""
        booted_at = self.booted_at if self.power is Power.FROZEN else now
        return evolve(self, power=Power.RUNNING, booted_at=booted_at, impacted_by=None, impact_until=None)


def _profile_record(profile: NotificationProfile) -> dict[str, Any]:
    return {"enable": profile.enable, "not_before_timeout": profile.not_before_timeout.total_seconds()}


def _profile_from(record: dict[str, Any]) -> NotificationProfile:
    return NotificationProfile(record["enable"], timedelta(seconds=record["not_before_timeout"]))


def policy_records(policies: Iterable[Policy]) -> list[dict[str, Any]]:
    """Plain data for the fleet records and the store; :func:`policies_from_records` is its inverse."""
    return [
        {
            "owner": p.owner,
            "auto_approve_reboot": p.auto_approve_reboot,
            "auto_approve_redeploy": p.auto_approve_redeploy,
            "terminate": _profile_record(p.terminate),
            "os_image": _profile_record(p.os_image),
            "model_version": p.model_version,
            "publish_central": p.publish_central,
        }
        for p in policies
    ]


def policies_from_records(records: list[dict[str, Any]]) -> list[Policy]:
    return [
        Policy(
            owner=r["owner"],
            auto_approve_reboot=r["auto_approve_reboot"],
            auto_approve_redeploy=r["auto_approve_redeploy"],
            terminate=_profile_from(r["terminate"]),
            os_image=_profile_from(r["os_image"]),
            model_version=r["model_version"],
            publish_central=r.get("publish_central", False),
        )
        for r in records
    ]


_OWNER_TYPES = {"vm": "virtualMachines", "avset": "availabilitySets", "vmss": "virtualMachineScaleSets"}


# A VM with no tags holds this one empty mapping: a million-VM fleet mostly has none, and a VM never changes its own.
NO_TAGS: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class VM:
    """A VM as deployed; it never changes. Slotted, with its scope and policy owner computed once and shared with the
    other VMs of that scope (one string each per scope, not per VM): a fleet holds up to a million of them."""

    name: str
    host: str
    subscription_id: str
    resource_group: str
    location: str
    zone: str
    size: str
    fault_domain: int
    update_domain: int
    spot: bool
    vm_id: str
    availability_set: str | None = None
    scale_set: str | None = None
    instance_id: str | None = None
    placement_group: int | None = None
    os_type: str = "Linux"
    tags: dict[str, str] = field(default_factory=dict)
    imds_address: str | None = None
    imds_port: int | None = None
    # The broadcast scope id: the policy owner, narrowed to one placement group for a scale set. Readable on purpose:
    # it shows up in logs and the control API. Read on every metadata request.
    scope: str = field(init=False, repr=False, compare=False)
    # Who sets this VM's scheduled-events policy: its scale set or availability set, or the VM itself.
    policy_owner: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        base = f"{self.subscription_id}/{self.resource_group}"
        if self.scale_set is not None:
            owner = sys.intern(f"vmss:{base}/{self.scale_set}")
            scope = sys.intern(f"{owner}/pg{self.placement_group or 0}")
        elif self.availability_set is not None:
            owner = scope = sys.intern(f"avset:{base}/{self.availability_set}")
        else:
            owner = scope = f"vm:{base}/{self.name}"  # its own: nothing to share
        object.__setattr__(self, "policy_owner", owner)
        object.__setattr__(self, "scope", scope)

    @property
    def fleet_name(self) -> str:
        return self.name

    @property
    def interruptible(self) -> bool:
        return self.spot

    def record(self) -> dict[str, Any]:
        """The VM's own fields (what :class:`VM` takes), without the derived ones."""
        return {name: getattr(self, name) for name in VM_FIELDS}

    @property
    def owner_resource_id(self) -> str:
        """The ARM id of what owns this VM's scheduled-events policy (its scale set, availability set, or the VM
        itself): where its scheduled events hang in ARM ids ("Scheduled Events in Event Grid")."""
        kind, path = self.policy_owner.split(":", 1)
        subscription, group, name = path.split("/", 2)
        return (
            f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/"
            f"{_OWNER_TYPES[kind]}/{name}"
        )

    @property
    def resource_id(self) -> str:
        base = f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}/providers/Microsoft.Compute"
        if self.scale_set is not None:
            return f"{base}/virtualMachineScaleSets/{self.scale_set}/virtualMachines/{self.instance_id}"
        return f"{base}/virtualMachines/{self.name}"


VM_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(VM) if f.init)


class VmStates(Mapping[str, VmState]):
    """Every VM's state, holding only the states that differ from the one the VM was deployed in (running on its
    host since the fleet was deployed, on its policy owner's deployed model): at a million VMs, those that nothing
    happened to cost nothing. Reading a VM's state builds its deployed state when nothing changed it; setting a state
    equal to the deployed one forgets it again (a VM frozen and recovered)."""

    __slots__ = ("_vms", "_deployed_at", "_policies", "_changed")

    def __init__(self, vms: Mapping[str, VM], deployed_at: datetime, policies: Mapping[str, Policy]):
        self._vms = vms
        self._deployed_at = deployed_at
        self._policies = policies  # as deployed (the fleet file's)
        self._changed: dict[str, VmState] = {}

    def deployed(self, vm: VM) -> VmState:
        policy = self._policies.get(vm.policy_owner)
        if policy is None:
            return VmState(vm.name, Power.RUNNING, vm.host, self._deployed_at)
        return VmState(
            vm.name,
            Power.RUNNING,
            vm.host,
            self._deployed_at,
            terminate=policy.terminate,
            os_image=policy.os_image,
            model_version=policy.model_version,
        )

    def __getitem__(self, name: str) -> VmState:
        state = self._changed.get(name)
        if state is not None:
            return state
        return self.deployed(self._vms[name])

    def __setitem__(self, name: str, state: VmState) -> None:
        vm = self._vms[name]
        if state == self.deployed(vm):
            self._changed.pop(name, None)
        else:
            self._changed[name] = state

    def __contains__(self, name: object) -> bool:
        return name in self._vms

    def __iter__(self) -> Iterator[str]:
        return iter(self._vms)

    def __len__(self) -> int:
        return len(self._vms)

    def changed(self) -> Iterable[VmState]:
        """The states that differ from the deployed ones (a VM impacted, moved, rebooted, deleted, updated)."""
        return self._changed.values()

    def power(self, name: str) -> Power:
        """A VM's power state, without building the state of a VM nothing changed (read per metadata request)."""
        state = self._changed.get(name)
        if state is not None:
            return state.power
        if name not in self._vms:
            raise KeyError(name)
        return Power.RUNNING

    def host(self, name: str) -> str:
        """The host a VM runs on now, without building the state of a VM nothing changed."""
        state = self._changed.get(name)
        return self._vms[name].host if state is None else state.host


DEFAULT_PUBLISH_CENTRAL = Policy("").publish_central


class Policies(Mapping[str, Policy]):
    """Every policy owner's scheduledEventsPolicy and profiles: the default policy for the owners nothing set, built
    when read; kept are those the fleet file or a command set (a million-VM fleet has a hundred thousand standalone
    VMs, each its own owner)."""

    __slots__ = ("_owners", "_set")

    def __init__(self, owners: Mapping[str, object], set_policies: Iterable[Policy] = ()):
        self._owners = owners
        self._set: dict[str, Policy] = {policy.owner: policy for policy in set_policies}

    def __getitem__(self, owner: str) -> Policy:
        policy = self._set.get(owner)
        if policy is not None:
            return policy
        if owner not in self._owners:
            raise KeyError(owner)
        return Policy(owner)

    def __setitem__(self, owner: str, policy: Policy) -> None:
        self._set[owner] = policy

    def any_published_centrally(self) -> bool:
        """Whether some owner's events are also published centrally: only a policy the fleet file or a command set
        can say so."""
        return any(policy.publish_central for policy in self._set.values())

    def publishes_central(self, owner: str) -> bool:
        """Whether ``owner``'s events are also published centrally, without building the default policy of an owner
        nothing set (read for every event a schedule makes)."""
        policy = self._set.get(owner)
        if policy is not None:
            return policy.publish_central
        if owner not in self._owners:
            raise KeyError(owner)
        return DEFAULT_PUBLISH_CENTRAL

    def __contains__(self, owner: object) -> bool:
        return owner in self._set or owner in self._owners

    def __iter__(self) -> Iterator[str]:
        yield from self._owners
        yield from (owner for owner in self._set if owner not in self._owners)

    def __len__(self) -> int:
        return len(self._owners) + sum(1 for owner in self._set if owner not in self._owners)
