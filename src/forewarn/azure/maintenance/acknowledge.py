"""The Maintenance resource provider's scheduled-events acknowledge API ("Scheduled Events in Event Grid"; the
Maintenance REST API's "Scheduled Events - Acknowledge"):
a central controller approves an event from outside the VM, with the same effect as the VM's IMDS POST.

    POST /subscriptions/{sub}/resourcegroups/{rg}/providers/Microsoft.Compute/{type}/{name}
         /providers/Microsoft.Maintenance/scheduledevents/{eventId}/acknowledge?api-version=2023-10-01-preview
    POST .../providers/Microsoft.Maintenance/scheduledevents?api-version=2025-10-01-preview   {"value": [ids]}

``{type}`` is virtualMachines, virtualMachineScaleSets or availabilitySets. An event belongs to the resource that
owns its policy (the scale set or availability set, or the standalone VM: where its ARM id puts it), and can also be
acknowledged through a VM named in its Resources. Only events published centrally are known to the provider: the
others (their owner did not opt in to scheduledEventsAdditionalPublishingTargets) are not found, as they would not
be in Azure.
"""

from __future__ import annotations

import re

from starlette.responses import Response

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.arm.router import ManagementCall
from forewarn.azure.arm.wire import (
    ArmError,
    json_response,
    listed_api_version,
    method_not_allowed,
    parse_body,
    read_body,
)
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import Event, EventStatus

# The Maintenance REST API's TypeSpec version, and the two the az CLI's maintenance group targets. The list form
# exists from 2025-10-01-preview on.
API_VERSIONS = ("2023-10-01-preview", "2025-10-01-preview", "2026-02-01-preview")
LIST_SINCE = "2025-10-01-preview"
ACKNOWLEDGE = "Microsoft.Maintenance/scheduledevents/acknowledge/action"
APPROVED = "Successfully Approved"  # the REST spec example's value
MAX_LIST = 100  # our limit on one list call; the real one is not documented

_OWNER_KINDS = {"virtualmachines": "vm", "virtualmachinescalesets": "vmss", "availabilitysets": "avset"}
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _not_found(event_id: str) -> ArmError:
    return ArmError(404, "NotFound", f"The scheduled event '{event_id}' was not found.")


def _not_acknowledgeable(event: Event) -> ArmError:
    return ArmError(409, "Conflict", f"The event cannot be acknowledged: it is {event.status.value}.")


class MaintenanceApi:
    def __init__(self, service: Maintenance):
        self.service = service
        self._lowered: dict[str, str] | None = None  # built on the first call that needs it

    @property
    def _owners(self) -> dict[str, str]:
        """Policy owners by their lowered key: ARM matches names case-insensitively."""
        if self._lowered is None:
            self._lowered = {
                owner.lower(): owner for owner in azure_fleet(self.service.settled_engine().fleet).vms_by_owner
            }
        return self._lowered

    async def handle(self, call: ManagementCall) -> Response:
        segments, lower = call.segments, call.lower
        # subscriptions/{s}/resourcegroups/{g}/providers/Microsoft.Compute/{type}/{name}
        #   /providers/Microsoft.Maintenance/scheduledevents[/{id}/acknowledge]
        shaped = (
            len(lower) in (11, 13)
            and lower[0] == "subscriptions"
            and lower[2] == "resourcegroups"
            and lower[4] == "providers"
            and lower[5] == "microsoft.compute"
            and lower[8] == "providers"
            and lower[9] == "microsoft.maintenance"
            and lower[10] == "scheduledevents"
            and (len(lower) == 11 or lower[12] == "acknowledge")
        )
        if not shaped:
            raise ArmError(404, "NotFound", f"No Microsoft.Maintenance route matches {call.request.url.path!r}.")
        if call.method != "POST":
            raise method_not_allowed(call.method)
        version = listed_api_version(call.request, API_VERSIONS)
        # Authorization first, as ARM does: a caller without rights learns nothing about what exists there.
        call.authorize(ACKNOWLEDGE, "/" + "/".join(segments[:8]))
        owner = self._resource(segments, lower)
        self.service.catch_up()
        if len(lower) == 13:
            return await self._acknowledge_one(call, owner, segments[11])
        if version < LIST_SINCE:
            raise ArmError(
                400,
                "InvalidApiVersionParameter",
                f"Acknowledging a list of scheduled events needs api-version {LIST_SINCE} or later.",
            )
        return await self._acknowledge_list(call, owner)

    def _event(self, owner: str, event_id: str) -> Event:
        found = (
            self.service.settled_engine().component(AzureComponent).find(event_id.upper())
            if _GUID.match(event_id)
            else None
        )
        if found is None or not found.central or not self._belongs(found, owner):
            raise _not_found(event_id)
        return found

    def _belongs(self, event: Event, owner: str) -> bool:
        if owner.startswith("member:"):
            return owner.removeprefix("member:") in event.resources
        return azure_fleet(self.service.settled_engine().fleet).vms[event.resources[0]].policy_owner == owner

    async def _acknowledge_one(self, call: ManagementCall, owner: str, event_id: str) -> Response:
        event = self._event(owner, event_id)
        if event.status is not EventStatus.SCHEDULED:
            raise _not_acknowledgeable(event)
        await azure_commands.approve_soon(self.service, [event.event_id], by=_approver(call))
        return json_response(200, {"value": APPROVED})

    async def _acknowledge_list(self, call: ManagementCall, owner: str) -> Response:
        raw = await read_body(call.request)
        body = parse_body(raw) if raw.strip() else None
        ids = body.get("value") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids or not all(isinstance(item, str) for item in ids):
            raise ArmError(
                400,
                "InvalidRequestContent",
                'The request body must be {"value": ["<scheduled event id>", ...]} with at least one id.',
            )
        if len(ids) > MAX_LIST:
            raise ArmError(
                400, "InvalidRequestContent", f"At most {MAX_LIST} scheduled events can be acknowledged in one call."
            )
        approvable: list[str] = []
        details: list[dict] = []
        for event_id in dict.fromkeys(ids):
            try:
                event = self._event(owner, event_id)
                if event.status is not EventStatus.SCHEDULED:
                    raise _not_acknowledgeable(event)
                approvable.append(event.event_id)
            except ArmError as error:
                details.append({"target": event_id, "code": error.code, "message": error.message})
        if approvable:
            # one command, through the group commit, durable before the answer
            await azure_commands.approve_soon(self.service, approvable, by=_approver(call))
        if not details:
            return json_response(200, {"value": APPROVED})
        return json_response(
            207,
            {
                "error": {
                    "code": "MultiStatusResponse",
                    "message": "The operation returned different statuses for the Scheduled Events. "
                    f"{len(approvable)} acknowledged, {len(details)} not; see details.",
                    "details": details,
                }
            },
        )

    def _resource(self, segments: list[str], lower: list[str]) -> str:
        """The policy owner key of ``.../{type}/{name}``, or ``member:VM`` for a VM of a set."""
        kind = _OWNER_KINDS.get(lower[6])
        if kind is None:
            raise ArmError(
                400,
                "InvalidResourceType",
                f"The resource type '{segments[6]}' does not support scheduled events; use "
                "virtualMachines, virtualMachineScaleSets or availabilitySets.",
            )
        key = f"{kind}:{segments[1]}/{segments[3]}/{segments[7]}".lower()
        if key in self._owners:
            return self._owners[key]
        if kind == "vm":  # a VM of a set: its events belong to the set, and name it in Resources
            vm = azure_fleet(self.service.settled_engine().fleet).vms.get(segments[7])
            if (
                vm is not None
                and vm.subscription_id.lower() == segments[1].lower()
                and vm.resource_group.lower() == segments[3].lower()
            ):
                return f"member:{vm.name}"
        raise ArmError(
            404,
            "ResourceNotFound",
            f"The Resource 'Microsoft.Compute/{segments[6]}/{segments[7]}' under resource group "
            f"'{segments[3]}' was not found.",
        )


def _approver(call: ManagementCall) -> str:
    """Who the journal says approved: the principal, through the Maintenance resource provider."""
    return f"maintenance-rp:{call.principal.name if call.principal else 'anonymous'}"
