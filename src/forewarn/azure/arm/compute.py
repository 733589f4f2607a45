"""Azure Resource Manager (``management.azure.com``), Microsoft.Compute only: the management API through which a user
restarts, redeploys, reimages and deletes VMs, scales scale sets in, and sets the scheduled-events policies and
notification profiles of Microsoft's "Scheduled Events for Azure Virtual Machines" and "Terminate notification for
Azure Virtual Machine Scale Set instances".

This module routes each request to its resource type: virtual_machines.py, availability_sets.py, scale_sets.py
(what they share is in resources.py), or to a long-running operation's status (operations.py). Every command goes
through :meth:`Maintenance.perform`, so it is committed before the answer leaves; a long-running one answers
``202 Accepted`` with ``Azure-AsyncOperation`` and ``Location`` URLs served here too. ARM's error shape, the
api-version and request bodies are wire.py's, shared with the other providers of the ARM port. docs/azure-arm.md
describes every path, error and choice.

Paths are matched the way ARM matches them: literal segments (``resourceGroups``, ``Microsoft.Compute``,
``virtualMachines``, action names) and resource group and resource names case-insensitively.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from forewarn.app.runtime import Maintenance
from forewarn.azure.arm.availability_sets import AvailabilitySets
from forewarn.azure.arm.operations import COMPUTE
from forewarn.azure.arm.resources import ComputeResources, Context, allow, no_route
from forewarn.azure.arm.scale_sets import ScaleSets
from forewarn.azure.arm.virtual_machines import VirtualMachines
from forewarn.azure.arm.wire import ArmError, answered, dated_api_version, subscription_not_found

# Any well-formed api-version is accepted (resources.py has the versions that gate members); these are shown in
# errors as supported, newest first.
KNOWN_API_VERSIONS = (
    "2025-04-01",
    "2024-11-01",
    "2024-07-01",
    "2024-03-01",
    "2023-09-01",
    "2023-07-01",
    "2023-03-01",
    "2022-11-01",
    "2022-08-01",
    "2022-03-01",
    "2021-11-01",
    "2021-07-01",
    "2021-04-01",
    "2021-03-01",
    "2020-12-01",
    "2020-06-01",
    "2019-12-01",
    "2019-07-01",
    "2019-03-01",
    "2018-10-01",
    "2018-06-01",
    "2018-04-01",
    "2017-12-01",
    "2017-03-30",
    "2016-04-30-preview",
    "2016-03-30",
    "2015-06-15",
)

_CANONICAL_TYPES = {
    "virtualmachines": "virtualMachines",
    "availabilitysets": "availabilitySets",
    "virtualmachinescalesets": "virtualMachineScaleSets",
}


class ArmApi:
    """The Microsoft.Compute provider: each request to its resource type (or to an operation's status)."""

    def __init__(self, service: Maintenance, retry_after: int = 10):
        self.service = service
        self.resources = ComputeResources(service, retry_after)
        self.virtual_machines = VirtualMachines(self.resources)
        self.availability_sets = AvailabilitySets(self.resources)
        self.scale_sets = ScaleSets(self.resources)

    async def endpoint(self, request: Request) -> Response:
        return await answered(request, lambda: self.dispatch(request))

    async def dispatch(self, request: Request) -> Response:
        api = dated_api_version(request, KNOWN_API_VERSIONS)  # ARM checks it before anything else
        await self.resources.ready()
        method = request.method.upper()
        segments = [part for part in request.scope["path"].split("/") if part]
        lower = [part.lower() for part in segments]
        if len(segments) < 2 or lower[0] != "subscriptions":
            raise no_route(request)
        sub = self._subscription(segments[1])
        rest, lrest = segments[2:], lower[2:]
        # /subscriptions/{sub}/providers/Microsoft.Compute/locations/{location}/operations/{id}
        if lrest[:1] == ["providers"]:
            if len(rest) == 6 and lrest[1] == COMPUTE.lower() and lrest[2] == "locations" and lrest[4] == "operations":
                allow(method, ("GET",))
                return self.resources.operations.status(request, sub, rest[3], rest[5], api)
            raise no_route(request)
        if lrest[:1] != ["resourcegroups"] or len(rest) < 2:
            raise no_route(request)
        group = self._group(sub, rest[1])
        rest, lrest = rest[2:], lrest[2:]
        if len(rest) < 3 or lrest[0] != "providers":
            raise no_route(request)
        if lrest[1] != COMPUTE.lower():
            raise ArmError(404, "InvalidResourceNamespace", f"The resource namespace '{rest[1]}' is invalid.")
        kind, names, lnames = lrest[2], rest[3:], lrest[3:]
        context = Context(request, api, sub, group, _CANONICAL_TYPES.get(kind, rest[2]))
        if kind == "virtualmachines":
            return await self.virtual_machines.handle(context, method, names, lnames)
        if kind == "availabilitysets":
            return await self.availability_sets.handle(context, method, names, lnames)
        if kind == "virtualmachinescalesets":
            return await self.scale_sets.handle(context, method, names, lnames)
        raise ArmError(
            404,
            "InvalidResourceType",
            f"The resource type '{rest[2]}' could not be found in the namespace '{COMPUTE}' for api "
            f"version '{api.text}'.",
        )

    def _subscription(self, text: str) -> str:
        found = self.resources.fleet.subscriptions.get(text.lower())
        if found is None:
            raise subscription_not_found(text)
        return found

    def _group(self, sub: str, text: str) -> str:
        found = self.resources.fleet.groups.get((sub.lower(), text.lower()))
        if found is None:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{text}' could not be found.")
        return found


def create_arm_app(service: Maintenance, retry_after: int = 10) -> Starlette:
    """The ARM management API over ``service``, as an ASGI app (serve it as a stand-in for management.azure.com)."""
    api = ArmApi(service, retry_after)
    methods = ["GET", "PUT", "PATCH", "POST", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(routes=[Route("/{path:path}", api.endpoint, methods=methods)])
    app.state.arm = api
    return app
