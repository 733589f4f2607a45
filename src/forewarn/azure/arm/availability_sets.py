"""``Microsoft.Compute/availabilitySets``: list, get, and update of the scheduled-events policy the set imposes on
all its members."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from forewarn.azure.arm.operations import COMPUTE
from forewarn.azure.arm.resources import (
    SCHEDULED_EVENTS_POLICY_SINCE,
    ComputeResources,
    Context,
    allow,
    check_fixed,
    listed,
    policy_body,
    policy_patch,
    update_policy,
)
from forewarn.azure.arm.virtual_machines import availability_set_id
from forewarn.azure.arm.wire import ApiVersion, ArmError, json_object, json_response, member, object_body
from forewarn.azure.vms import VM


class AvailabilitySets:
    def __init__(self, resources: ComputeResources):
        self.resources = resources

    async def handle(self, ctx: Context, method: str, names: list[str], lnames: list[str]) -> Response:
        resources = self.resources
        resources.catch_up()
        if not names:
            allow(method, ("GET",))
            sets = resources.fleet.avsets.get(ctx.key, {}).values()
            return json_response(200, {"value": await listed(sets, lambda members: self.body(members, ctx.api))})
        if len(names) != 1:
            raise ctx.no_route()
        allow(method, ("GET", "PATCH", "PUT"))
        members = resources.fleet.avsets.get(ctx.key, {}).get(lnames[0])
        if members is None:
            if method == "PUT":
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot create availability set '{names[0]}': the fleet file defines it.",
                )
            raise ctx.not_found(names[0])
        if method != "GET":
            body = await object_body(ctx.request, required=True)
            first = members[0]
            check_fixed(body, first.location, None, None)
            properties = json_object(member(body, "properties"), "properties")
            patch = policy_patch(properties, "properties", "AvailabilitySetProperties", ctx.api)
            if not patch.empty:
                await resources.perform([update_policy(first.policy_owner, patch)])
        return json_response(200, self.body(members, ctx.api))

    def body(self, members: list[VM], api: ApiVersion) -> dict[str, Any]:
        first = members[0]
        properties: dict[str, Any] = {
            "virtualMachines": [{"id": vm.resource_id} for vm in members if self.resources.exists(vm)],
        }
        if api.at_least(SCHEDULED_EVENTS_POLICY_SINCE):
            properties["scheduledEventsPolicy"] = policy_body(self.resources.policy(first))
        return {
            "name": first.availability_set,
            "id": availability_set_id(first),
            "type": f"{COMPUTE}/availabilitySets",
            "location": first.location,
            "sku": {"name": "Aligned"},
            "properties": properties,
        }
