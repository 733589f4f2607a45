"""``Microsoft.Compute/virtualMachines``: standalone VMs and members of availability sets (instances of scale sets are
served by scale_sets.py). List, get (with ``$expand=instanceView``), instance view, update of the
scheduled-events policy, delete, and the restart, redeploy and reimage actions."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from forewarn.azure.arm.operations import COMPUTE
from forewarn.azure.arm.resources import (
    SCHEDULED_EVENTS_POLICY_SINCE,
    VM_ACTIONS,
    ComputeResources,
    Context,
    allow,
    check_fixed,
    check_name,
    listed,
    policy_body,
    policy_patch,
    update_policy,
)
from forewarn.azure.arm.wire import ApiVersion, ArmError, given, json_object, json_response, member, object_body
from forewarn.azure.vms import VM


class VirtualMachines:
    def __init__(self, resources: ComputeResources):
        self.resources = resources

    async def handle(self, ctx: Context, method: str, names: list[str], lnames: list[str]) -> Response:
        resources = self.resources
        if not names:
            allow(method, ("GET",))
            resources.catch_up()
            vms = resources.fleet.vms.get(ctx.key, {}).values()
            return json_response(200, {"value": await listed(vms, lambda vm: self.listed_body(vm, ctx.api))})
        name = names[0]
        if len(names) == 1:
            allow(method, ("GET", "PATCH", "PUT", "DELETE"))
            if method == "DELETE":
                return await self.delete(ctx, name)
            vm = self._vm(ctx, name, create=method == "PUT")
            if method == "GET":
                return json_response(200, self.body(vm, ctx.api, ctx.expand_instance_view))
            return await self.update(ctx, vm)
        if len(names) == 2 and lnames[1] == "instanceview":
            allow(method, ("GET",))
            vm = self._vm(ctx, name)
            return json_response(200, resources.instance_view(vm))
        if len(names) == 2 and lnames[1] in VM_ACTIONS:
            allow(method, ("POST",))
            vm = self._vm(ctx, name)
            await object_body(ctx.request, required=False)  # the body (tempDisk, osProfile...) is read and ignored
            return await resources.act(ctx, lnames[1], [vm], vm.location)
        raise ctx.no_route()

    def listed_body(self, vm: VM, api: ApiVersion) -> dict[str, Any] | None:
        return self.body(vm, api, False) if self.resources.exists(vm) else None

    def _vm(self, ctx: Context, name: str, create: bool = False) -> VM:
        self.resources.catch_up()
        vm = self.resources.fleet.vm(ctx.key, name)
        if vm is None or not self.resources.exists(vm):
            if create:
                check_name(name, "a VM name")
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot create virtual machine '{name}': the fleet file defines the VMs.",
                )
            raise ctx.not_found(name)
        return vm

    async def delete(self, ctx: Context, name: str) -> Response:
        self.resources.catch_up()
        vm = self.resources.fleet.vm(ctx.key, name)
        if vm is None or not self.resources.exists(vm):
            return Response(status_code=204)  # ARM RPC: deleting what does not exist is 204 No Content
        return await self.resources.act(ctx, "delete", [vm], vm.location)

    async def update(self, ctx: Context, vm: VM) -> Response:
        body = await object_body(ctx.request, required=True)
        check_fixed(body, vm.location, vm.tags, [vm.zone] if vm.zone else [])
        properties = json_object(member(body, "properties"), "properties")
        if properties is not None:
            hardware = json_object(member(properties, "hardwareProfile"), "properties.hardwareProfile")
            size = None if hardware is None else member(hardware, "vmSize")
            if given(size) and str(size).lower() != vm.size.lower():
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot resize VM '{vm.name}': its size ({vm.size}) is set by the fleet file.",
                )
        patch = policy_patch(properties, "properties", "VirtualMachineProperties", ctx.api)
        if not patch.empty:
            if vm.availability_set is not None:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    f"Virtual machine '{vm.name}' is in availability set '{vm.availability_set}', which imposes one "
                    f"scheduledEventsPolicy on all its members; set it on the availability set instead.",
                    "properties.scheduledEventsPolicy",
                )
            await self.resources.perform([update_policy(vm.policy_owner, patch)])
        return json_response(200, self.body(vm, ctx.api, False))

    def body(self, vm: VM, api: ApiVersion, expand: bool) -> dict[str, Any]:
        resources = self.resources
        state = resources.state(vm)
        properties: dict[str, Any] = {
            "vmId": vm.vm_id,
            "hardwareProfile": {"vmSize": vm.size},
            "storageProfile": {"osDisk": {"osType": vm.os_type}},
        }
        if vm.availability_set is not None:
            properties["availabilitySet"] = {"id": availability_set_id(vm)}
        if vm.spot:
            properties["priority"] = "Spot"
            properties["evictionPolicy"] = "Delete"
        properties["provisioningState"] = resources.provisioning(vm, state)
        if vm.availability_set is None and api.at_least(SCHEDULED_EVENTS_POLICY_SINCE):
            properties["scheduledEventsPolicy"] = policy_body(resources.policy(vm))
        if expand:
            properties["instanceView"] = resources.instance_view(vm)
        body: dict[str, Any] = {
            "name": vm.name,
            "id": vm.resource_id,
            "type": f"{COMPUTE}/virtualMachines",
            "location": vm.location,
        }
        if vm.tags:
            body["tags"] = dict(vm.tags)
        if vm.zone:
            body["zones"] = [vm.zone]
        body["properties"] = properties
        return body


def availability_set_id(vm: VM) -> str:
    return (
        f"/subscriptions/{vm.subscription_id}/resourceGroups/{vm.resource_group}/providers/{COMPUTE}"
        f"/availabilitySets/{vm.availability_set}"
    )
