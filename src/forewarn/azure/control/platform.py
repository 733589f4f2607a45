"""The control API's platform routes: VMs and what happens to them, user-initiated operations, policies and
notification profiles, and the platform's exceptional cases (hardware failure, predicted failure, Spot eviction)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from forewarn.app.runtime import Maintenance
from forewarn.azure.changes import EventChanged, PolicyChanged, VmChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.control.events import azure
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventType
from forewarn.azure.views import EventOut
from forewarn.azure.vms import NotificationProfile, Policy, VmState
from forewarn.control.models import ERRORS
from forewarn.control.service import ControlService
from forewarn.core.changes import Change
from forewarn.core.durations import parse_duration, parse_optional_duration
from forewarn.core.enums import parse_enum
from forewarn.core.errors import Invalid
from forewarn.core.times import format_optional_time, format_time


class VmOut(BaseModel):
    name: str
    power: str
    host: str
    booted_at: str
    temp_disk_generation: int
    os_disk_generation: int
    memory_generation: int
    impacted_by: str | None
    impact_until: str | None
    deleted_at: str | None
    model_version: int
    latest_model: bool
    scope: str
    policy_owner: str

    @classmethod
    def of(cls, state: VmState, service: Maintenance) -> VmOut:
        vm = azure_fleet(service.settled_engine().fleet).vms[state.name]
        policy = service.settled_engine().component(AzureComponent).policies[vm.policy_owner]
        return cls(
            name=state.name,
            power=state.power.value,
            host=state.host,
            booted_at=format_time(state.booted_at),
            temp_disk_generation=state.temp_disk_generation,
            os_disk_generation=state.os_disk_generation,
            memory_generation=state.memory_generation,
            impacted_by=state.impacted_by,
            impact_until=format_optional_time(state.impact_until),
            deleted_at=format_optional_time(state.deleted_at),
            model_version=state.model_version,
            latest_model=state.model_version == policy.model_version,
            scope=vm.scope,
            policy_owner=vm.policy_owner,
        )


class ProfileIO(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enable: bool
    not_before_timeout: str = Field(default="PT5M", description="ISO 8601 duration, e.g. PT5M")


class PolicyOut(BaseModel):
    owner: str
    auto_approve_reboot: bool
    auto_approve_redeploy: bool
    terminate_notification: ProfileIO
    os_image_notification: ProfileIO
    model_version: int
    publish_central: bool

    @classmethod
    def of(cls, policy: Policy) -> PolicyOut:
        return cls(
            owner=policy.owner,
            auto_approve_reboot=policy.auto_approve_reboot,
            auto_approve_redeploy=policy.auto_approve_redeploy,
            terminate_notification=_profile_out(policy.terminate),
            os_image_notification=_profile_out(policy.os_image),
            model_version=policy.model_version,
            publish_central=policy.publish_central,
        )


def _profile_out(profile: NotificationProfile) -> ProfileIO:
    minutes, seconds = divmod(int(profile.not_before_timeout.total_seconds()), 60)
    return ProfileIO(enable=profile.enable, not_before_timeout=f"PT{minutes}M" + (f"{seconds}S" if seconds else ""))


def _profile_in(profile: ProfileIO | None) -> NotificationProfile | None:
    if profile is None:
        return None
    return NotificationProfile(profile.enable, parse_duration(profile.not_before_timeout))


class PolicyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    auto_approve_reboot: bool | None = Field(default=None, description="userInitiatedReboot.automaticallyApprove")
    auto_approve_redeploy: bool | None = Field(default=None, description="userInitiatedRedeploy.automaticallyApprove")
    terminate_notification: ProfileIO | None = None
    os_image_notification: ProfileIO | None = None
    publish_central: bool | None = Field(
        default=None, description="scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph.enable"
    )


class VmsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    vms: list[str] = Field(min_length=1)
    notice: str | None = Field(default=None, description="restart and redeploy only; default per type")


class CountIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int = Field(strict=True, ge=1)


class InstancesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    vms: list[str] = Field(default_factory=list, description="instances to update; all when empty")


class HostsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hosts: list[str] = Field(min_length=1)
    type: str | None = Field(default=None, description="hardware failure: Redeploy (default) or Reboot")
    notice: str | None = Field(default=None, description="predicted failure: default 7d")


class OutcomeOut(BaseModel):
    """What a command did: the events it created or moved, and the VMs it changed."""

    events: list[EventOut]
    vms: list[VmOut]
    policies: list[PolicyOut]


def outcome(changes: list[Change], service: Maintenance) -> OutcomeOut:
    events = {c.event.event_id: c.event for c in changes if isinstance(c, EventChanged)}
    vms = {c.state.name: c.state for c in changes if isinstance(c, VmChanged)}
    policies = {c.policy.owner: c.policy for c in changes if isinstance(c, PolicyChanged)}
    return OutcomeOut(
        events=[EventOut.of(e) for e in events.values()],
        vms=[VmOut.of(s, service) for s in vms.values()],
        policies=[PolicyOut.of(p) for p in policies.values()],
    )


router = APIRouter()


@router.get("/v1/vms", tags=["vms"], response_model=list[VmOut])
async def list_vms(service: ControlService):
    """Every VM's running state: power, host, boot time, disks and memory generations, model version."""
    service.catch_up()
    return [VmOut.of(state, service) for state in azure(service).vm_states.values()]


@router.get("/v1/vms/{name}", tags=["vms"], response_model=VmOut, responses=ERRORS)
async def get_vm(service: ControlService, name: str):
    service.catch_up()
    vm = azure_fleet(service.settled_engine().fleet).vm(name)
    return VmOut.of(azure(service).vm_states[vm.name], service)


def user_operation(action: str) -> Callable[..., Awaitable[OutcomeOut]]:
    """The route of a user's operation on VMs: ``action`` is the component's method, which takes the VMs (and, for
    restart and redeploy, the notice)."""

    async def run(service: ControlService, body: VmsIn) -> OutcomeOut:
        if body.notice is not None and action not in ("restart", "redeploy"):
            raise Invalid(f"{action} takes no notice")
        if action in ("restart", "redeploy"):
            notice = parse_optional_duration(body.notice)
            changes = await service.perform_soon(
                lambda engine: getattr(engine.component(AzureComponent), action)(body.vms, notice)
            )
        else:
            changes = await service.perform_soon(
                lambda engine: getattr(engine.component(AzureComponent), action)(body.vms)
            )
        return outcome(changes, service)

    return run


USER_OPERATIONS = (
    ("restart", "A user restart: a User Reboot event (started at once under automaticallyApprove)."),
    ("redeploy", "A user redeploy: a User Redeploy event (started at once under automaticallyApprove)."),
    ("reimage", "Reimage: announced as a Reboot where the instance's model enables OS image notifications."),
    ("delete", "Delete: Terminate events where the instance's model enables terminate notifications."),
)


def declare_user_operations() -> None:
    """``POST /v1/vms/{action}`` for each of the user's operations, between the VM and the policy routes."""
    for action, summary in USER_OPERATIONS:
        router.add_api_route(
            f"/v1/vms/{action}",
            user_operation(action),
            methods=["POST"],
            tags=["vms"],
            summary=summary,
            response_model=OutcomeOut,
            responses=ERRORS,
        )


declare_user_operations()


@router.get("/v1/policies/{owner}", tags=["policies"], response_model=PolicyOut, responses=ERRORS)
async def get_policy(service: ControlService, owner: str):
    return PolicyOut.of(azure(service).policy(owner))


@router.patch("/v1/policies/{owner}", tags=["policies"], response_model=PolicyOut, responses=ERRORS)
async def update_policy(service: ControlService, owner: str, body: PolicyIn):
    """Update a scheduledEventsPolicy (scale set, availability set or standalone VM) or a scale set's
    notification profiles. Instances follow profile changes once updated to the latest model."""
    terminate = _profile_in(body.terminate_notification)
    os_image = _profile_in(body.os_image_notification)
    await service.perform_soon(
        lambda engine: engine.component(AzureComponent).update_policy(
            owner, body.auto_approve_reboot, body.auto_approve_redeploy, terminate, os_image, body.publish_central
        )
    )
    return PolicyOut.of(azure(service).policy(owner))


@router.post("/v1/scale-sets/{name}/scale-in", tags=["vms"], response_model=OutcomeOut, responses=ERRORS)
async def scale_in(service: ControlService, name: str, body: CountIn):
    return outcome(
        await service.perform_soon(lambda engine: engine.component(AzureComponent).scale_in(name, body.count)),
        service,
    )


@router.post("/v1/scale-sets/{name}/update-instances", tags=["vms"], response_model=OutcomeOut, responses=ERRORS)
async def update_instances(service: ControlService, name: str, body: InstancesIn):
    return outcome(
        await service.perform_soon(lambda engine: engine.component(AzureComponent).update_instances(name, body.vms)),
        service,
    )


@router.post("/v1/platform/hardware-failure", tags=["platform"], response_model=OutcomeOut, responses=ERRORS)
async def hardware_failure(service: ControlService, body: HostsIn):
    """Hosts fail: their VMs' events appear directly as Started, without notice."""
    event_type = None if body.type is None else parse_enum(EventType, body.type, "event type")
    if event_type not in (None, EventType.REDEPLOY, EventType.REBOOT):
        raise Invalid("a hardware failure is a Redeploy or a Reboot")
    return outcome(
        await service.perform_soon(
            lambda engine: engine.component(AzureComponent).hardware_failure(body.hosts, event_type)
        ),
        service,
    )


@router.post("/v1/platform/predicted-failure", tags=["platform"], response_model=OutcomeOut, responses=ERRORS)
async def predicted_failure(service: ControlService, body: HostsIn):
    """Degraded hosts: a Redeploy with NotBefore days ahead (default 7)."""
    if body.type is not None:
        raise Invalid("a predicted failure is always a Redeploy")
    notice = parse_optional_duration(body.notice)
    return outcome(
        await service.perform_soon(
            lambda engine: engine.component(AzureComponent).predicted_failure(body.hosts, notice)
        ),
        service,
    )


@router.post("/v1/platform/evict", tags=["platform"], response_model=OutcomeOut, responses=ERRORS)
async def evict(service: ControlService, body: VmsIn):
    """Spot eviction: Preempt with 30 s notice, then the VMs are deleted."""
    if body.notice is not None:
        raise Invalid("Spot eviction notice is fixed by the rules (30 s)")
    return outcome(await service.perform_soon(lambda engine: engine.component(AzureComponent).evict(body.vms)), service)
