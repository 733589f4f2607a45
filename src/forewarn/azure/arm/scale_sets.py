"""``Microsoft.Compute/virtualMachineScaleSets`` and their instances (``.../virtualMachines/{instanceId}``): list,
get, update of the policy and of the notification profiles ("Terminate notification for Azure Virtual Machine Scale
Set instances", OS image notifications), scale-in through ``sku.capacity``, the set's actions (restart, redeploy,
reimage, delete, manualUpgrade on ``instanceIds``) and each instance's own."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from starlette.responses import Response

from forewarn.azure.arm.operations import COMPUTE, Step
from forewarn.azure.arm.resources import (
    OS_IMAGE_PROFILE_SINCE,
    SCHEDULED_EVENTS_POLICY_SINCE,
    SCHEDULED_EVENTS_PROFILE_SINCE,
    VM_ACTIONS,
    ComputeResources,
    Context,
    allow,
    check_fixed,
    check_name,
    iso_duration,
    iso_timeout,
    listed,
    policy_body,
    policy_patch,
    scale_in,
    update_instances,
    update_policy,
)
from forewarn.azure.arm.wire import (
    ABSENT,
    ApiVersion,
    ArmError,
    content_error,
    convert_error,
    given,
    json_bool,
    json_object,
    json_response,
    member,
    missing_member,
    object_body,
)
from forewarn.azure.vms import OS_IMAGE_TIMEOUT, VM, NotificationProfile, Policy
from forewarn.core.ids import derived_guid
from forewarn.core.words import counted

TERMINATE_DEFAULT_TIMEOUT = timedelta(minutes=5)  # compute API: "the default value is 5 minutes (PT5M)"
SCALE_SET_ACTIONS = ("restart", "redeploy", "reimage", "delete", "manualupgrade")


class ScaleSets:
    def __init__(self, resources: ComputeResources):
        self.resources = resources

    async def handle(self, ctx: Context, method: str, names: list[str], lnames: list[str]) -> Response:
        resources = self.resources
        resources.catch_up()
        if not names:
            allow(method, ("GET",))
            sets = resources.fleet.scale_sets.get(ctx.key, {}).values()
            return json_response(200, {"value": await listed(sets, lambda members: self.body(members, ctx.api))})
        members = resources.fleet.scale_sets.get(ctx.key, {}).get(lnames[0])
        if members is None:
            if len(names) == 1 and method == "PUT":
                check_name(names[0], "a scale set name")
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot create scale set '{names[0]}': the fleet file defines it.",
                )
            raise ctx.not_found(names[0])
        if len(names) == 1:
            allow(method, ("GET", "PATCH", "PUT"))
            if method == "GET":
                return json_response(200, self.body(members, ctx.api))
            return await self.update(ctx, members)
        if len(names) == 2 and lnames[1] in SCALE_SET_ACTIONS:
            allow(method, ("POST",))
            return await self.action(ctx, members, lnames[1])
        if lnames[1] != "virtualmachines":
            raise ctx.no_route()
        if len(names) == 2:
            allow(method, ("GET",))
            expand = ctx.expand_instance_view
            listing = await listed(
                members, lambda vm: self.instance_body(vm, ctx.api, expand) if resources.exists(vm) else None
            )
            return json_response(200, {"value": listing})
        vm = next((vm for vm in members if vm.instance_id == names[2]), None)
        if vm is None or not resources.exists(vm):
            if len(names) == 3 and method == "DELETE":
                return Response(status_code=204)
            raise ctx.not_found(names[2], f"{ctx.kind}/{names[0]}/virtualMachines")
        if len(names) == 3:
            allow(method, ("GET", "DELETE", "PUT", "PATCH"))
            if method == "DELETE":
                return await resources.act(ctx, "delete", [vm], vm.location)
            if method in ("PUT", "PATCH"):
                await self.update_instance(ctx, vm)
            return json_response(200, self.instance_body(vm, ctx.api, ctx.expand_instance_view))
        if len(names) == 4 and lnames[3] == "instanceview":
            allow(method, ("GET",))
            return json_response(200, resources.instance_view(vm))
        if len(names) == 4 and lnames[3] in VM_ACTIONS:
            allow(method, ("POST",))
            await object_body(ctx.request, required=False)
            return await resources.act(ctx, lnames[3], [vm], vm.location)
        raise ctx.no_route()

    async def update_instance(self, ctx: Context, vm: VM) -> None:
        """An instance can be PUT back as it is (a GET-modify-PUT round trip); its policy is its scale set's."""
        body = await object_body(ctx.request, required=True)
        check_fixed(body, vm.location, None, [vm.zone] if vm.zone else [])
        properties = json_object(member(body, "properties"), "properties")
        if not policy_patch(properties, "properties", "VirtualMachineScaleSetVMProperties", ctx.api).empty:
            raise ArmError(
                400,
                "InvalidParameter",
                f"Virtual machine '{vm.name}' is an instance of scale set '{vm.scale_set}', which imposes one "
                "scheduledEventsPolicy on all its instances; set it on the scale set instead.",
                "properties.scheduledEventsPolicy",
            )

    async def update(self, ctx: Context, members: list[VM]) -> Response:
        resources = self.resources
        body = await object_body(ctx.request, required=True)
        first = members[0]
        owner = first.policy_owner
        policy = resources.policy(first)
        zones = sorted({vm.zone for vm in members if vm.zone})
        check_fixed(body, first.location, first.tags, zones)
        capacity = sku_capacity(body, first)
        properties = json_object(member(body, "properties"), "properties")
        patch = policy_patch(properties, "properties", "VirtualMachineScaleSetProperties", ctx.api)
        terminate, os_image = profile_patches(properties, policy, ctx.api)
        steps: list[Step] = []
        if not patch.empty or terminate is not None or os_image is not None:
            steps.append(update_policy(owner, patch, terminate, os_image))
        removed = 0
        if capacity is not None:
            active = resources.active(members)
            if capacity > len(active):
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot scale scale set '{first.scale_set}' out to {counted(capacity, 'instance')}: the "
                    f"fleet file fixes its instances, and {len(active)} are active.",
                    "sku.capacity",
                )
            removed = len(active) - capacity
            if removed:
                steps.append(scale_in(owner, removed))
        if not steps:
            return json_response(200, self.body(members, ctx.api))
        done = await resources.perform(steps)
        if removed:
            return resources.accepted(ctx, first.location, done)
        return json_response(200, self.body(members, ctx.api))

    async def action(self, ctx: Context, members: list[VM], action: str) -> Response:
        resources = self.resources
        body = await object_body(ctx.request, required=False)
        required = action in ("delete", "manualupgrade")
        raw = member(body, "instanceIds")
        first = members[0]
        if not given(raw):
            if required:
                raise content_error("Required property 'instanceIds' not found in JSON. Path ''")
            targets = resources.active(members)
        else:
            if not isinstance(raw, list):
                raise convert_error(raw, "System.Collections.Generic.IList`1[System.String]", "instanceIds")
            ids: list[str] = []
            for index, item in enumerate(raw):
                if isinstance(item, bool) or not isinstance(item, (str, int)):
                    raise convert_error(item, "System.String", f"instanceIds[{index}]")
                ids.append(str(item))
            if not ids:
                if required:
                    raise ArmError(400, "InvalidParameter", "instanceIds cannot be empty.", "instanceIds")
                targets = resources.active(members)
            elif "*" in ids:
                targets = [
                    vm for vm in members if resources.exists(vm) and (action == "delete" or not resources.marked(vm))
                ]
            else:
                by_id = {vm.instance_id: vm for vm in members}
                targets = []
                for instance_id in ids:
                    vm = by_id.get(instance_id)
                    if vm is None or not resources.exists(vm):
                        raise ArmError(
                            400,
                            "InvalidParameter",
                            f"The provided instanceId {instance_id} is not an active Virtual Machine Scale "
                            "Set VM instanceId.",
                            "instanceIds",
                        )
                    if vm not in targets:
                        targets.append(vm)
        if action == "manualupgrade":
            names = [vm.name for vm in targets]
            done = await resources.perform([update_instances(first.policy_owner, names)] if names else [])
            return resources.accepted(ctx, first.location, done)
        return await resources.act(ctx, action, targets, first.location)

    # ------------------------------------------------------------------------------------------------- bodies
    def body(self, members: list[VM], api: ApiVersion) -> dict[str, Any]:
        first = members[0]
        policy = self.resources.policy(first)
        active = self.resources.active(members)
        profile: dict[str, Any] = {}
        if first.spot:
            profile["priority"] = "Spot"
            profile["evictionPolicy"] = "Delete"
        if api.at_least(SCHEDULED_EVENTS_PROFILE_SINCE):
            events: dict[str, Any] = {
                "terminateNotificationProfile": {
                    "notBeforeTimeout": iso_timeout(policy.terminate.not_before_timeout),
                    "enable": policy.terminate.enable,
                }
            }
            if api.at_least(OS_IMAGE_PROFILE_SINCE):
                events["osImageNotificationProfile"] = {
                    "notBeforeTimeout": iso_timeout(policy.os_image.not_before_timeout),
                    "enable": policy.os_image.enable,
                }
            profile["scheduledEventsProfile"] = events
        properties: dict[str, Any] = {
            "uniqueId": derived_guid(
                "vmssUniqueId", first.subscription_id, first.resource_group, first.scale_set
            ).lower(),
            "orchestrationMode": "Uniform",
            "upgradePolicy": {"mode": "Manual"},
            "singlePlacementGroup": len({vm.placement_group or 0 for vm in members}) <= 1,
            "virtualMachineProfile": profile,
            "provisioningState": "Succeeded",
        }
        if api.at_least(SCHEDULED_EVENTS_POLICY_SINCE):
            properties["scheduledEventsPolicy"] = policy_body(policy)
        body: dict[str, Any] = {
            "name": first.scale_set,
            "id": _scale_set_id(first),
            "type": f"{COMPUTE}/virtualMachineScaleSets",
            "location": first.location,
        }
        if first.tags:
            body["tags"] = dict(first.tags)
        zones = sorted({vm.zone for vm in members if vm.zone})
        if zones:
            body["zones"] = zones
        body["sku"] = {"name": first.size, "tier": "Standard", "capacity": len(active)}
        body["properties"] = properties
        return body

    def instance_body(self, vm: VM, api: ApiVersion, expand: bool) -> dict[str, Any]:
        resources = self.resources
        state = resources.state(vm)
        policy = resources.policy(vm)
        properties: dict[str, Any] = {
            "latestModelApplied": state.model_version == policy.model_version,
            "vmId": vm.vm_id,
            "hardwareProfile": {"vmSize": vm.size},
            "provisioningState": resources.provisioning(vm, state),
        }
        if expand:
            properties["instanceView"] = resources.instance_view(vm)
        body: dict[str, Any] = {
            "name": vm.name,
            "id": vm.resource_id,
            "type": f"{COMPUTE}/virtualMachineScaleSets/virtualMachines",
            "location": vm.location,
            "instanceId": vm.instance_id,
            "sku": {"name": vm.size, "tier": "Standard"},
        }
        if vm.zone:
            body["zones"] = [vm.zone]
        body["properties"] = properties
        return body


def _scale_set_id(vm: VM) -> str:
    return (
        f"/subscriptions/{vm.subscription_id}/resourceGroups/{vm.resource_group}/providers/{COMPUTE}"
        f"/virtualMachineScaleSets/{vm.scale_set}"
    )


def _profile_patch(
    raw: Any, path: str, current: NotificationProfile, default_timeout: timedelta
) -> NotificationProfile | None:
    """A notification profile merged over the current one: what is not given stays (a timeout not given while the
    profile was off takes the API's default)."""
    profile = json_object(raw, path)
    if profile is None:
        return None
    enable = json_bool(member(profile, "enable"), f"{path}.enable")
    timeout_raw = member(profile, "notBeforeTimeout")
    if given(timeout_raw):
        timeout = iso_duration(timeout_raw, f"{path}.notBeforeTimeout")
    else:
        timeout = current.not_before_timeout if current.enable else default_timeout
    return NotificationProfile(current.enable if enable is None else enable, timeout)


def sku_capacity(body: dict[str, Any], first: VM) -> int | None:
    """The capacity a scale set's PATCH asks for (None: not given); its size cannot change (the fleet file's)."""
    sku = json_object(member(body, "sku"), "sku")
    if sku is None:
        return None
    size = member(sku, "name")
    if given(size) and str(size).lower() != first.size.lower():
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"forewarn cannot resize scale set '{first.scale_set}': its size ({first.size}) is set by the fleet file.",
        )
    raw = member(sku, "capacity")
    if not given(raw):
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise convert_error(raw, "System.Int64", "sku.capacity")
    if raw < 0:
        raise ArmError(400, "InvalidParameter", "The value of sku.capacity cannot be negative.", "sku.capacity")
    return raw


def profile_patches(
    properties: dict[str, Any] | None, policy: Policy, api: ApiVersion
) -> tuple[NotificationProfile | None, NotificationProfile | None]:
    """The terminate and OS image notification profiles a scale set's PATCH sets (None: left as they are), each
    member refused in an API version older than it."""
    profile = (
        None
        if properties is None
        else json_object(member(properties, "virtualMachineProfile"), "properties.virtualMachineProfile")
    )
    if profile is None:
        return None, None
    raw_events = member(profile, "scheduledEventsProfile")
    path = "properties.virtualMachineProfile.scheduledEventsProfile"
    if raw_events is not ABSENT and not api.at_least(SCHEDULED_EVENTS_PROFILE_SINCE):
        raise missing_member("scheduledEventsProfile", "VirtualMachineProfile", path)
    events = json_object(raw_events, path)
    if events is None:
        return None, None
    raw_os = member(events, "osImageNotificationProfile")
    if raw_os is not ABSENT and not api.at_least(OS_IMAGE_PROFILE_SINCE):
        raise missing_member(
            "osImageNotificationProfile", "ScheduledEventsProfile", f"{path}.osImageNotificationProfile"
        )
    terminate = _profile_patch(
        member(events, "terminateNotificationProfile"),
        f"{path}.terminateNotificationProfile",
        policy.terminate,
        TERMINATE_DEFAULT_TIMEOUT,
    )
    os_image = _profile_patch(raw_os, f"{path}.osImageNotificationProfile", policy.os_image, OS_IMAGE_TIMEOUT)
    return terminate, os_image
