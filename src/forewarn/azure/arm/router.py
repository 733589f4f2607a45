"""The ARM port (a stand-in for ``management.azure.com``): authentication, then each request to its resource
provider.

- ``Microsoft.Compute`` (``compute.py``): VMs, availability sets, scale sets and their policies;
- ``Microsoft.Maintenance`` scheduled-events acknowledge, nested under a Compute resource (``azure/maintenance/acknowledge.py``);
- ``Microsoft.ResourceGraph/resources`` (``azure/resource_graph/api.py``);
- ``Microsoft.EventGrid`` system topics and event subscriptions (``eventgrid/``), and the validation URL Event Grid
  hands to webhooks (``/eventgrid/...``, which a subscriber calls without a token, as the real one is).

Every provider answers through ``wire.py`` (ARM's error shape, api-version, bodies). Access control (``access.py``)
is checked here for Compute, whose routes predate it; the other providers call
``ManagementCall.authorize`` with their own actions and scopes, because only they know them (an acknowledge acts on
the event's resource; a Resource Graph query filters rows by what the caller may read).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, request_response

from forewarn.azure.arm.access import AccessControl, Principal
from forewarn.azure.arm.compute import ArmApi
from forewarn.azure.arm.wire import ArmError, answered
from forewarn.net.browser_guard import BrowserGuard

METHODS = ["GET", "PUT", "PATCH", "POST", "DELETE", "HEAD", "OPTIONS"]


@dataclass
class ManagementCall:
    """One request to the ARM port, with the principal that made it (None when access control is off)."""

    request: Request
    method: str
    segments: list[str]
    lower: list[str]
    principal: Principal | None

    def can(self, action: str, scope: str) -> bool:
        return self.principal is None or self.principal.can(action, scope)

    def authorize(self, action: str, scope: str) -> None:
        if self.principal is not None and not self.principal.can(action, scope):
            raise forbidden(self.principal, action, scope)


def forbidden(principal: Principal, action: str, scope: str) -> ArmError:
    # ARM's AuthorizationFailed message, word for word.
    return ArmError(
        403,
        "AuthorizationFailed",
        f"The client '{principal.name}' with object id '{principal.object_id}' does not have authorization to "
        f"perform action '{action}' over scope '{scope}' or the scope is invalid. If access was recently granted, "
        "please refresh your credentials.",
    )


Provider = Callable[[ManagementCall], Awaitable[Response]]


class ManagementApi:
    def __init__(self, compute: ArmApi, access: AccessControl | None = None, guard: BrowserGuard | None = None):
        self.compute = compute
        self.access = access
        self.guard = guard  # refuses what web pages send (browser_guard.py); before any provider, public ones too
        self.providers: dict[str, Provider] = {}  # lower-case namespace -> handler
        self.public: dict[str, Provider] = {}  # first path segment -> handler, no token needed

    def add_provider(self, namespace: str, handler: Provider) -> None:
        self.providers[namespace.lower()] = handler

    def add_public(self, first_segment: str, handler: Provider) -> None:
        self.public[first_segment.lower()] = handler

    async def endpoint(self, request: Request) -> Response:
        return await answered(request, lambda: self._route(request))

    async def _route(self, request: Request) -> Response:
        refusal = self.guard.check(request.method, request.headers) if self.guard is not None else None
        if refusal is not None:
            raise ArmError(refusal.status, refusal.code, refusal.message)
        segments = [part for part in request.scope["path"].split("/") if part]
        lower = [part.lower() for part in segments]
        public = self.public.get(lower[0]) if lower else None
        if public is not None:
            return await public(ManagementCall(request, request.method.upper(), segments, lower, None))
        call = ManagementCall(request, request.method.upper(), segments, lower, self._authenticate(request))
        handler = self.providers.get(_namespace(lower) or "")
        if handler is not None:
            return await handler(call)
        if call.principal is not None:
            call.authorize(*_compute_action(call))
        return await self.compute.dispatch(request)

    def _authenticate(self, request: Request) -> Principal | None:
        if self.access is None:
            return None
        header = request.headers.get("authorization")
        if header is None:
            raise _unauthenticated(
                "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing."
            )
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthenticated(
                "AuthenticationFailed",
                "Authentication failed. The 'Authorization' header is provided in an invalid format.",
            )
        principal = self.access.principal_for(token.strip())
        if principal is None:
            raise _unauthenticated("InvalidAuthenticationToken", "The access token is invalid.")
        return principal


class _Unauthenticated(ArmError):
    def response(self) -> Response:
        response = super().response()
        response.headers["www-authenticate"] = (
            'Bearer authorization_uri="https://login.microsoftonline.com/common", error="invalid_token", '
            f'error_description="{self.message}"'
        )
        return response


def _unauthenticated(code: str, message: str) -> ArmError:
    return _Unauthenticated(401, code, message)


def _namespace(lower: list[str]) -> str | None:
    """The provider that serves a path: the last ``providers/{namespace}`` pair of it (a Maintenance resource nested
    under a Compute one belongs to Maintenance)."""
    found = None
    for index, part in enumerate(lower[:-1]):
        if part == "providers":
            found = lower[index + 1]
    if found == "microsoft.compute":
        return None
    return found


def _compute_action(call: ManagementCall) -> tuple[str, str]:
    """ARM's action name and scope for a Microsoft.Compute request (reads, writes, deletes and POST actions)."""
    segments, lower = call.segments, call.lower
    if "providers" not in lower:
        return "Microsoft.Resources/subscriptions/read", "/" + "/".join(segments)
    at = lower.index("providers")
    types = segments[at + 2 :: 2]
    names = segments[at + 3 :: 2]
    kind = "/".join(types)
    if call.method == "POST" and len(types) > len(names):  # .../{name}/restart
        action = f"Microsoft.Compute/{'/'.join(types[:-1])}/{types[-1]}/action"
        scope = "/" + "/".join(segments[:-1])
    elif call.method in ("GET", "HEAD"):
        action, scope = f"Microsoft.Compute/{kind}/read", "/" + "/".join(segments)
    elif call.method == "DELETE":
        action, scope = f"Microsoft.Compute/{kind}/delete", "/" + "/".join(segments)
    else:
        action, scope = f"Microsoft.Compute/{kind}/write", "/" + "/".join(segments)
    return action, scope


def create_management_app(api: ManagementApi) -> Starlette:
    app = Starlette(routes=[Route("/{path:path}", api.endpoint, methods=METHODS)])
    # Starlette's path pattern does not match a newline: a path with %0A in it would get a plain-text 404.
    app.router.default = request_response(api.endpoint)
    app.state.management = api
    app.state.arm = api.compute
    return app
