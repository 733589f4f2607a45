"""What the three Microsoft.Compute resource types (virtual machines, availability sets, scale sets) share: the
fleet indexed by ARM identity, the request's context, the api-versions that gate members, a VM's state as ARM shows
it, the scheduled-events policy's body and patch, what the fleet file fixes, and the user actions.

Every call into the engine from the Compute provider is here or in operations.py: reads through
:class:`ComputeResources`, commands as the :data:`~forewarn.azure.arm.operations.Step` functions below.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from forewarn.app.runtime import Maintenance
from forewarn.app.turns import Turns
from forewarn.azure.arm.operations import COMPUTE, Done, Operations, Step, iso
from forewarn.azure.arm.wire import (
    ABSENT,
    ApiVersion,
    ArmError,
    convert_error,
    given,
    json_bool,
    json_object,
    member,
    missing_member,
    resource_not_found,
)
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import Event, EventType
from forewarn.azure.names import name_problem
from forewarn.azure.vms import VM, NotificationProfile, Policy, Power, VmState
from forewarn.core.durations import parse_duration
from forewarn.core.errors import Invalid
from forewarn.engine.engine import Engine

# api-versions. Any well-formed version from the first ARM Compute version on is accepted (clients move to newer
# versions faster than a list here would); members of request bodies are gated by the version that introduced them.
OLDEST_API_VERSION = "2015-06-15"
SCHEDULED_EVENTS_PROFILE_SINCE = "2019-03-01"  # the terminate-notification page; azure-rest-api-specs#6683
OS_IMAGE_PROFILE_SINCE = "2022-11-01"  # azure-cli#24811, azure-rest-api-specs#21571
SCHEDULED_EVENTS_POLICY_SINCE = "2024-03-01"  # azure-rest-api-specs#28214 (scale sets), #28257 (VMs)
# "Scheduled Events in Event Grid": "requires ... REST API versions 2025-04-01 or newer"
PUBLISHING_TARGETS_SINCE = "2025-04-01"
# "Scheduled Events in Event Grid": "the only supported value is 2020-07-01"
CENTRAL_EVENTS_API_VERSIONS = ("2020-07-01",)

VM_ACTIONS = ("restart", "redeploy", "reimage")

# Power state of the instance view for each state of a simulated VM (docs/azure-arm.md, "Instance view").
_POWER_STATE = {
    Power.RUNNING: ("PowerState/running", "VM running"),
    Power.FROZEN: ("PowerState/running", "VM running"),  # a live-migration pause is invisible to ARM
    Power.REBOOTING: ("PowerState/starting", "VM starting"),
    Power.REDEPLOYING: ("PowerState/starting", "VM starting"),
    Power.REIMAGING: ("PowerState/starting", "VM starting"),
    Power.DELETED: ("PowerState/deallocated", "VM deallocated"),  # never shown: deleted VMs are not found
}
_UPDATING = (Power.REBOOTING, Power.REDEPLOYING, Power.REIMAGING)


# ------------------------------------------------------------------------------------------------------- the fleet
GroupKey = tuple[str, str]  # a resource group's lowered subscription id and name


class ComputeFleet:
    """Indexes of the fleet by ARM identity (subscription, resource group, name), case-insensitive: for each resource
    group (its lowered subscription and name), its VMs, availability sets and scale sets by lowered name, in fleet
    order. A listing reads its group, not the fleet; and no index is one dict of the whole fleet, whose growth would
    copy hundreds of thousands of entries at once (43 ms of one turn of the loop at a million VMs)."""

    def __init__(self, vms: Iterable[VM] = ()):
        self.subscriptions: dict[str, str] = {}
        self.groups: dict[GroupKey, str] = {}
        self.vms: dict[GroupKey, dict[str, VM]] = {}
        self.avsets: dict[GroupKey, dict[str, list[VM]]] = {}
        self.scale_sets: dict[GroupKey, dict[str, list[VM]]] = {}
        self._lowered: dict[str, str] = {}  # one lowered string per subscription, group and set, not one per VM
        self.add(vms)
        for members in self.all_scale_sets():
            sort_instances(members)

    def _lower(self, text: str) -> str:
        found = self._lowered.get(text)
        if found is None:
            found = self._lowered[text] = text.lower()
        return found

    def add(self, vms: Iterable[VM]) -> None:
        """Index these VMs too (a scale set's members are in instance order once ``sort_instances`` sorted them)."""
        lower = self._lower
        for vm in vms:
            sub, group = lower(vm.subscription_id), lower(vm.resource_group)
            self.subscriptions.setdefault(sub, vm.subscription_id)
            key = (sub, group)
            self.groups.setdefault(key, vm.resource_group)
            if vm.scale_set is not None:
                self.scale_sets.setdefault(key, {}).setdefault(lower(vm.scale_set), []).append(vm)
                continue
            name = vm.name.lower()
            self.vms.setdefault(key, {})[vm.name if name == vm.name else name] = vm
            if vm.availability_set is not None:
                self.avsets.setdefault(key, {}).setdefault(lower(vm.availability_set), []).append(vm)

    def vm(self, group: GroupKey, name: str) -> VM | None:
        """The VM of this group with this name (any case)."""
        return self.vms.get(group, {}).get(name.lower())

    def all_scale_sets(self) -> Iterator[list[VM]]:
        for sets in self.scale_sets.values():
            yield from sets.values()


def sort_instances(members: list[VM]) -> None:
    members.sort(key=lambda vm: int(vm.instance_id or 0))


# VMs indexed between two looks at the clock of the turn (``app/turns.py``) while the first ARM request builds the
# index: about a millisecond of work.
INDEXED_PER_LOOK = 500


T = TypeVar("T")


async def listed(items: Iterable[T], body: Callable[[T], dict[str, Any] | None]) -> list[dict[str, Any]]:
    """``body(item)`` of each item (None: left out), a turn of the event loop at a time (``app/turns.py``): a resource
    group of a million-VM fleet lists hundreds of VMs, each body tens of microseconds of work."""
    bodies = []
    turns = Turns()
    for item in items:
        found = body(item)
        if found is not None:
            bodies.append(found)
        await turns.pause()
    return bodies


@dataclass
class Context:
    """One request to a Compute resource type, with its resource group resolved."""

    request: Request
    api: ApiVersion
    sub: str
    group: str  # the fleet's spelling
    kind: str  # the resource type, as ARM spells it
    group_text: str = field(default="")

    def __post_init__(self) -> None:
        # ARM's not-found messages name the resource group as the request spelled it.
        segments = [part for part in self.request.scope["path"].split("/") if part]
        self.group_text = segments[3] if len(segments) > 3 else self.group

    @property
    def key(self) -> tuple[str, str]:
        return (self.sub.lower(), self.group.lower())

    @property
    def expand_instance_view(self) -> bool:
        return self.request.query_params.get("$expand", "").lower() == "instanceview"

    def not_found(self, name: str, kind: str | None = None) -> ArmError:
        return resource_not_found(COMPUTE, kind or self.kind, name, self.group_text)

    def no_route(self) -> ArmError:
        return no_route(self.request)


def no_route(request: Request) -> ArmError:
    return ArmError(404, "NotFound", f"No ARM route matches {request.scope['path']!r}.")


def allow(method: str, allowed: tuple[str, ...]) -> None:
    if method not in allowed:
        raise ArmError(405, "MethodNotAllowed", f"The requested resource does not support http method '{method}'.")


# ------------------------------------------------------------------------------------------- state, as ARM shows it
class ComputeResources:
    """The provider's view of the engine, shared by the three resource types, and its operations."""

    def __init__(self, service: Maintenance, retry_after: int = 10):
        self.service = service
        self.operations = Operations(service, retry_after)
        self._fleet: ComputeFleet | None = None
        self._building: asyncio.Future[None] | None = None
        self._cache_engine: Engine | None = None
        self._marked_cache: dict[str, tuple[int, frozenset[str]]] = {}

    @property
    def fleet(self) -> ComputeFleet:
        """Built on the first ARM request (``ready``): a server whose ARM port is never called does not hold it (a
        million-VM fleet's indexes are tens of megabytes)."""
        if self._fleet is None:
            self._fleet = ComputeFleet(azure_fleet(self.service.settled_engine().fleet).vms.values())
        return self._fleet

    async def ready(self) -> None:
        """The index built, if it is not: a turn of the event loop at a time (``app/turns.py``), the loop answering
        others between turns (a million VMs' index is most of a second of work). Requests that come meanwhile wait for
        the same build. The fleet's VMs never change, so what was indexed before a turn still holds after it."""
        if self._fleet is not None:
            return
        if self._building is None:
            self._building = asyncio.ensure_future(self._build())
        await asyncio.shield(self._building)

    async def _build(self) -> None:
        # Read a slice at a time: listed at once, a million VMs are 13 ms of the loop. The fleet never changes.
        vms = iter(azure_fleet(self.service.settled_engine().fleet).vms.values())
        index = ComputeFleet()
        turns = Turns()
        while chunk := list(itertools.islice(vms, INDEXED_PER_LOOK)):
            await turns.pause()
            index.add(chunk)
            # What is indexed lives as long as the process, as start-up's fleet does (``server/tuning.py``): frozen,
            # the cyclic collector does not walk it again. Left young, the index half built (dicts of hundreds of
            # thousands of entries) was walked by the collections its own allocations set off: 40 ms of one turn.
            gc.freeze()
        for members in index.all_scale_sets():
            sort_instances(members)
            await turns.pause()
        self._fleet = index

    @property
    def engine(self) -> Engine:
        return self.service.settled_engine()

    def catch_up(self) -> None:
        self.service.catch_up()

    def state(self, vm: VM) -> VmState:
        return self.engine.component(AzureComponent).vm_states[vm.name]

    def policy(self, vm: VM) -> Policy:
        return self.engine.component(AzureComponent).policies[vm.policy_owner]

    def exists(self, vm: VM) -> bool:
        return not self.engine.component(AzureComponent).vm_states[vm.name].deleted

    def active(self, members: list[VM]) -> list[VM]:
        """Members that exist and are not marked for deletion."""
        return [vm for vm in members if self.exists(vm) and not self.marked(vm)]

    def live_terminate(self, vm: VM) -> list[Event]:
        if not self.marked(vm):
            return []
        return [
            e
            for e in self.engine.component(AzureComponent).live_events(vm.scope)
            if e.event_type is EventType.TERMINATE and vm.name in e.resources
        ]

    def marked(self, vm: VM) -> bool:
        """Marked for deletion: a live Terminate event names it (it is deleted when the event starts)."""
        return vm.name in self._marked_in(vm.scope)

    def _marked_in(self, scope: str) -> frozenset[str]:
        """The VMs of a scope that live Terminate events name, cached per (engine, scope, incarnation): the
        incarnation moves whenever the scope's live events change, so a big scale set is scanned once per change."""
        engine = self.engine
        if self._cache_engine is not engine:  # a rebuilt engine (failed commit) starts a fresh cache
            self._cache_engine = engine
            self._marked_cache = {}
        incarnation = engine.component(AzureComponent).incarnation(scope)
        hit = self._marked_cache.get(scope)
        if hit is None or hit[0] != incarnation:
            names = frozenset(
                name
                for event in engine.component(AzureComponent).live_events(scope)
                if event.event_type is EventType.TERMINATE
                for name in event.resources
            )
            hit = (incarnation, names)
            self._marked_cache[scope] = hit
        return hit[1]

    def provisioning(self, vm: VM, state: VmState) -> str:
        if self.marked(vm):
            return "Deleting"
        if state.power in _UPDATING:
            return "Updating"
        return "Succeeded"

    def instance_view(self, vm: VM) -> dict[str, Any]:
        state = self.state(vm)
        provisioning = self.provisioning(vm, state)
        power_code, power_text = _POWER_STATE[state.power]
        provisioning_text = {"Succeeded": "Provisioning succeeded", "Updating": "Updating", "Deleting": "Deleting"}
        return {
            "platformUpdateDomain": vm.update_domain,
            "platformFaultDomain": vm.fault_domain,
            "statuses": [
                {
                    "code": f"ProvisioningState/{provisioning.lower()}",
                    "level": "Info",
                    "displayStatus": provisioning_text[provisioning],
                    "time": iso(state.booted_at),
                },
                {"code": power_code, "level": "Info", "displayStatus": power_text},
            ],
        }

    # ------------------------------------------------------------------------------------------------ commands
    async def perform(self, steps: list[Step], attach: Iterable[int] = ()) -> Done:
        return await self.operations.perform(steps, attach)

    def accepted(self, ctx: Context, location: str, done: Done) -> Response:
        return self.operations.accepted(ctx.request, ctx.api, ctx.sub, location, done.operation)

    async def act(self, ctx: Context, action: str, vms: list[VM], location: str) -> Response:
        """restart, redeploy, reimage or delete VMs: one engine command, answered 202 with an operation."""
        names = [vm.name for vm in vms]
        attach: list[int] = []
        if action == "delete":
            marked = {vm.name: self.live_terminate(vm) for vm in vms}
            attach = [event.seq for events in marked.values() for event in events]
            names = [name for name in names if not marked[name]]
        else:
            for vm in vms:
                if self.marked(vm):
                    raise _marked_for_deletion(action, vm.name)
        steps: list[Step] = [vm_action(action, names)] if names else []
        return self.accepted(ctx, location, await self.perform(steps, attach))


def _marked_for_deletion(operation: str, name: str) -> ArmError:
    return ArmError(
        409,
        "OperationNotAllowed",
        f"Operation '{operation}' is not allowed on VM '{name}' since the VM is marked for deletion. You can only "
        "retry the Delete operation (or wait for an ongoing one to complete).",
    )


# The engine's commands, as steps of one command.
def vm_action(action: str, names: list[str]) -> Step:
    """A user action on VMs (``delete`` or one of :data:`VM_ACTIONS`)."""
    if action == "delete":
        return lambda engine: engine.component(AzureComponent).delete(names)
    if action == "restart":
        return lambda engine: engine.component(AzureComponent).restart(names)
    if action == "redeploy":
        return lambda engine: engine.component(AzureComponent).redeploy(names)
    if action == "reimage":
        return lambda engine: engine.component(AzureComponent).reimage(names)
    raise ValueError(f"not a VM action: {action}")


def update_policy(
    owner: str,
    patch: PolicyPatch,
    terminate: NotificationProfile | None = None,
    os_image: NotificationProfile | None = None,
) -> Step:
    return lambda engine: engine.component(AzureComponent).update_policy(
        owner, patch.reboot, patch.redeploy, terminate, os_image, patch.central
    )


def scale_in(owner: str, count: int) -> Step:
    return lambda engine: engine.component(AzureComponent).scale_in(owner, count)


def update_instances(owner: str, names: list[str]) -> Step:
    return lambda engine: engine.component(AzureComponent).update_instances(owner, names)


# --------------------------------------------------------------------------------------------------- policies
@dataclass(frozen=True)
class PolicyPatch:
    reboot: bool | None = None
    redeploy: bool | None = None
    central: bool | None = None  # scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph.enable

    @property
    def empty(self) -> bool:
        return self.reboot is None and self.redeploy is None and self.central is None


def policy_patch(properties: dict[str, Any] | None, path: str, owner_type: str, api: ApiVersion) -> PolicyPatch:
    """``scheduledEventsPolicy`` of a request body."""
    if properties is None:
        return PolicyPatch()
    raw = member(properties, "scheduledEventsPolicy")
    if raw is ABSENT:
        return PolicyPatch()
    if not api.at_least(SCHEDULED_EVENTS_POLICY_SINCE):
        raise missing_member("scheduledEventsPolicy", owner_type, f"{path}.scheduledEventsPolicy")
    policy = json_object(raw, f"{path}.scheduledEventsPolicy")
    if policy is None:
        return PolicyPatch()
    base = f"{path}.scheduledEventsPolicy"
    reboot = json_object(member(policy, "userInitiatedReboot"), f"{base}.userInitiatedReboot")
    redeploy = json_object(member(policy, "userInitiatedRedeploy"), f"{base}.userInitiatedRedeploy")
    targets = json_object(
        member(policy, "scheduledEventsAdditionalPublishingTargets"),
        f"{base}.scheduledEventsAdditionalPublishingTargets",
    )
    central = None
    if targets is not None:
        if not api.at_least(PUBLISHING_TARGETS_SINCE):
            raise missing_member(
                "scheduledEventsAdditionalPublishingTargets",
                "ScheduledEventsPolicy",
                f"{base}.scheduledEventsAdditionalPublishingTargets",
            )
        grid_path = f"{base}.scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph"
        grid = json_object(member(targets, "eventGridAndResourceGraph"), grid_path)
        if grid is not None:
            central = json_bool(member(grid, "enable"), f"{grid_path}.enable")
            version = member(grid, "scheduledEventsApiVersion")
            if given(version) and version not in CENTRAL_EVENTS_API_VERSIONS:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    f"The value '{version}' of '{grid_path}.scheduledEventsApiVersion' is not supported. "
                    f"Supported values: {', '.join(CENTRAL_EVENTS_API_VERSIONS)}.",
                    f"{grid_path}.scheduledEventsApiVersion",
                )
    all_down = json_object(member(policy, "allInstancesDown"), f"{base}.allInstancesDown")
    if (
        all_down is not None
        and json_bool(member(all_down, "automaticallyApprove"), f"{base}.allInstancesDown.automaticallyApprove")
        is False
    ):
        raise ArmError(
            400,
            "NotSupported",
            "forewarn does not emulate allInstancesDown; it always behaves as automaticallyApprove=true.",
            f"{base}.allInstancesDown",
        )
    return PolicyPatch(
        reboot=None
        if reboot is None
        else json_bool(member(reboot, "automaticallyApprove"), f"{base}.userInitiatedReboot.automaticallyApprove"),
        redeploy=None
        if redeploy is None
        else json_bool(member(redeploy, "automaticallyApprove"), f"{base}.userInitiatedRedeploy.automaticallyApprove"),
        central=central,
    )


def policy_body(policy: Policy) -> dict[str, Any]:
    body: dict[str, Any] = {
        "userInitiatedRedeploy": {"automaticallyApprove": policy.auto_approve_redeploy},
        "userInitiatedReboot": {"automaticallyApprove": policy.auto_approve_reboot},
    }
    if policy.publish_central:
        body["scheduledEventsAdditionalPublishingTargets"] = {
            "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": CENTRAL_EVENTS_API_VERSIONS[0]}
        }
    return body


def iso_duration(value: Any, path: str) -> timedelta:
    if not isinstance(value, str):
        raise convert_error(value, "System.String", path)
    refused = ArmError(
        400,
        "InvalidParameter",
        f"The value '{value}' of '{path}' is not an ISO 8601 duration such as PT5M or PT15M.",
        path,
    )
    if not value.strip().upper().startswith("P"):
        raise refused
    try:
        return parse_duration(value)
    except (Invalid, ValueError):
        raise refused from None


def iso_timeout(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    text = (
        "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "") + (f"{seconds}S" if seconds else "")
    )
    return text if text != "PT" else "PT0S"


# ------------------------------------------------------------------------------------------- what the file fixes
def _same_place(a: str, b: str) -> bool:
    return a.replace(" ", "").lower() == b.replace(" ", "").lower()


def check_name(name: str, what: str) -> None:
    """A PUT of a machine that is not in the fleet, with a name Azure would refuse: refused for its name first, as
    ARM does, before forewarn's own refusal to create machines. The OS is not read from the body: the Linux rule."""
    problem = name_problem(name, None, what)
    if problem is not None:
        raise ArmError(400, "InvalidParameter", f"The entity name {name!r} is invalid: {problem}.", "name")


def check_fixed(body: dict[str, Any], location: str, tags: dict[str, str] | None, zones: list[str] | None) -> None:
    """What the fleet file fixes may be repeated (a GET-modify-PUT round trip) but not changed."""
    found = member(body, "location")
    if given(found) and not _same_place(str(found), location):
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"forewarn cannot move a resource from '{location}' to '{found}'.",
            "location",
        )
    found = member(body, "tags")
    if tags is not None and given(found) and found != tags:
        raise ArmError(409, "OperationNotAllowed", "forewarn cannot change tags: the fleet file sets them.", "tags")
    found = member(body, "zones")
    if zones is not None and given(found) and (not isinstance(found, list) or sorted(map(str, found)) != zones):
        raise ArmError(409, "OperationNotAllowed", "forewarn cannot change zones: the fleet file sets them.", "zones")
