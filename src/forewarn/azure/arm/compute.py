"""Azure Resource Manager (``management.azure.com``), Microsoft.Compute only: the management API through which a user
restarts, redeploys, reimages and deletes VMs, scales scale sets in, and sets the scheduled-events policies and
notification profiles of Microsoft's "Scheduled Events for Azure Virtual Machines" and "Terminate notification for
Azure Virtual Machine Scale Set instances".

Every command goes through :meth:`Maintenance.perform`, so it is committed before the answer leaves. Long-running
operations answer ``202 Accepted`` with ``Azure-AsyncOperation`` and ``Location`` URLs served here too; their status
is derived from the engine's state (the EventIds the command created are encoded in the operation id), so it survives
restarts without a table of its own. docs/azure-arm.md describes every path, error and choice.

Paths are matched the way ARM matches them: literal segments (``resourceGroups``, ``Microsoft.Compute``,
``virtualMachines``, action names) and resource group and resource names case-insensitively.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from forewarn.app.runtime import Maintenance
from forewarn.azure.changes import VmChanged
from forewarn.azure.model import EventStatus, EventType
from forewarn.azure.vms import OS_IMAGE_TIMEOUT, NotificationProfile, Policy, Power, VmState
from forewarn.core.durations import parse_duration
from forewarn.core.errors import Conflict, CoreError, Invalid, NotFound
from forewarn.core.ids import derived_guid
from forewarn.engine.engine import Change, Engine
from forewarn.fleet.model import VM
from forewarn.net.untrusted_json import MAX_BODY_BYTES, JsonInputError, parse_json
from forewarn.store import StoreError

log = logging.getLogger("forewarn.arm")

COMPUTE = "Microsoft.Compute"
RESOURCE_NOT_FOUND_HELP = "For more details please go to https://aka.ms/ARMResourceNotFoundFix"

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
KNOWN_API_VERSIONS = (  # shown in errors, newest first
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
_API_VERSION = re.compile(r"^(\d{4}-\d{2}-\d{2})(-[a-z]+)?$", re.IGNORECASE)

TERMINATE_DEFAULT_TIMEOUT = timedelta(minutes=5)  # compute API: "the default value is 5 minutes (PT5M)"

_CANONICAL_TYPES = {
    "virtualmachines": "virtualMachines",
    "availabilitysets": "availabilitySets",
    "virtualmachinescalesets": "virtualMachineScaleSets",
}
_VM_ACTIONS = ("restart", "redeploy", "reimage")
_VMSS_ACTIONS = ("restart", "redeploy", "reimage", "delete", "manualupgrade")

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


# --------------------------------------------------------------------------------------------------------- errors
class ArmError(Exception):
    """An answer in ARM's error shape: ``{"error": {"code": ..., "message": ...}}``."""

    def __init__(self, status: int, code: str, message: str, target: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.target = target

    def response(self) -> Response:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.target is not None:
            error["target"] = self.target
        return _json(self.status, {"error": error})


async def answered(request: Request, produce: Callable[[], Awaitable[Response]]) -> Response:
    """Every ARM answer: errors in ARM's shape (never a bare 500), and the request-id headers ARM sets."""
    try:
        response = await produce()
    except ArmError as error:
        response = error.response()
    except _Refused as refused:
        response = _core_error(refused.error).response()
    except CoreError as error:
        response = _core_error(error).response()
    except StoreError as error:
        response = ArmError(503, "ServiceUnavailable", f"Nothing was changed; the store failed: {error}").response()
        response.headers["Retry-After"] = str(error.retry_after)
    except Exception:  # a bug: still answer in ARM's shape, and say so in the log
        log.exception("ARM request %s %s failed", request.method, request.url.path)
        response = ArmError(
            500, "InternalServerError", "forewarn failed to process the request; see its log."
        ).response()
    response.headers.setdefault("x-ms-request-id", str(uuid.uuid4()))
    response.headers["x-ms-correlation-request-id"] = request.headers.get("x-ms-correlation-request-id") or str(
        uuid.uuid4()
    )
    client_id = request.headers.get("x-ms-client-request-id")
    if client_id:
        response.headers["x-ms-client-request-id"] = client_id
    return response


class _Refused(Exception):
    """A later step of a composed command was refused after an earlier step changed the engine. Not a CoreError, so
    the service rebuilds its engine from the database (dropping the uncommitted earlier step) before we answer."""

    def __init__(self, error: CoreError):
        super().__init__(str(error))
        self.error = error


def _core_error(error: CoreError) -> ArmError:
    if isinstance(error, NotFound):
        return ArmError(404, "ResourceNotFound", str(error))
    if isinstance(error, Conflict):
        return ArmError(409, "OperationNotAllowed", str(error))
    return ArmError(400, "InvalidParameter", str(error))


def _not_found(kind: str, name: str, group: str) -> ArmError:
    return ArmError(
        404,
        "ResourceNotFound",
        f"The Resource '{COMPUTE}/{kind}/{name}' under resource group '{group}' was not found. "
        f"{RESOURCE_NOT_FOUND_HELP}",
    )


def _content_error(detail: str) -> ArmError:
    return ArmError(
        400, "InvalidRequestContent", f"The request content was invalid and could not be deserialized: '{detail}'."
    )


def _missing_member(member: str, owner_type: str, path: str) -> ArmError:
    """Newtonsoft's message for a member the api-version's model does not have (the troubleshooting of the
    terminate-notification page)."""
    return ArmError(
        400, "BadRequest", f"Could not find member '{member}' on object of type '{owner_type}'. Path '{path}'."
    )


def _marked_for_deletion(operation: str, name: str) -> ArmError:
    return ArmError(
        409,
        "OperationNotAllowed",
        f"Operation '{operation}' is not allowed on VM '{name}' since the VM is marked for deletion. You can only "
        "retry the Delete operation (or wait for an ongoing one to complete).",
    )


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        status_code=status,
        media_type="application/json; charset=utf-8",
        headers=headers,
    )


# ----------------------------------------------------------------------------------------------------- api-version
@dataclass(frozen=True)
class ApiVersion:
    text: str
    date: str  # YYYY-MM-DD, for comparisons

    def at_least(self, version: str) -> bool:
        return self.date >= version


def _api_version(request: Request, known: tuple[str, ...] = KNOWN_API_VERSIONS) -> ApiVersion:
    """The request's api-version, well formed (a real date, an optional ``-preview``); ``known`` is what errors
    list as supported."""
    text = request.query_params.get("api-version")
    if text is None or not text.strip():
        raise ArmError(
            400,
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.",
        )
    match = _API_VERSION.match(text.strip())
    valid = False
    if match:
        try:
            datetime.strptime(match.group(1), "%Y-%m-%d")
            valid = True
        except ValueError:
            pass
    if not valid:
        raise ArmError(
            400,
            "InvalidApiVersionParameter",
            f"The api-version '{text}' is invalid. The supported versions are '{','.join(known)}'.",
        )
    return ApiVersion(text.strip(), match.group(1))


# ------------------------------------------------------------------------------------------------- request bodies
_ABSENT = object()


def _member(obj: dict, name: str) -> Any:
    """A member of a JSON object, matched case-insensitively as ARM's deserializer does; ``_ABSENT`` if missing."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if key.lower() == lowered:
            return value
    return _ABSENT


def _given(value: Any) -> bool:
    return value is not _ABSENT and value is not None


def _convert_error(value: Any, type_name: str, path: str) -> ArmError:
    return _content_error(f"Error converting value {json.dumps(value)} to type '{type_name}'. Path '{path}'")


def _object(value: Any, path: str) -> dict | None:
    if not _given(value):
        return None
    if not isinstance(value, dict):
        raise _content_error(f"Expected a JSON object at path '{path}', got {json.dumps(value)}")
    return value


def _bool(value: Any, path: str) -> bool | None:
    if not _given(value):
        return None
    if not isinstance(value, bool):
        raise _convert_error(value, "System.Boolean", path)
    return value


async def _body(request: Request, required: bool) -> dict:
    raw = await read_body(request)
    if not raw.strip():
        if required:
            raise _content_error("The request body is empty; a JSON object is expected")
        return {}
    parsed = parse_body(raw)
    if not isinstance(parsed, dict):
        raise _content_error(f"Expected a JSON object, got {type(parsed).__name__}. Path ''")
    return parsed


async def read_body(request: Request) -> bytes:
    """The request body, read no further than MAX_BODY_BYTES: a larger one is refused before it fills memory."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def parse_body(raw: bytes) -> Any:
    """A JSON request body, or ARM's InvalidRequestContent (bad JSON, too deep, not UTF-8 ...)."""
    try:
        return parse_json(raw)
    except JsonInputError as error:
        where = f". Path '', line {error.line}, position {error.column}" if error.line else ""
        raise _content_error(f"{error.message}{where}") from None


def _too_large() -> ArmError:
    # ARM's own limit and code for an oversized body are not documented; 413 says what happened.
    return ArmError(413, "RequestEntityTooLarge", f"The request content is larger than {MAX_BODY_BYTES} bytes.")


def _iso_duration(value: Any, path: str) -> timedelta:
    if not isinstance(value, str):
        raise _convert_error(value, "System.String", path)
    if not value.strip().upper().startswith("P"):
        raise ArmError(
            400,
            "InvalidParameter",
            f"The value '{value}' of '{path}' is not an ISO 8601 duration such as PT5M or PT15M.",
            path,
        )
    try:
        return parse_duration(value)
    except (Invalid, ValueError):
        raise ArmError(
            400,
            "InvalidParameter",
            f"The value '{value}' of '{path}' is not an ISO 8601 duration such as PT5M or PT15M.",
            path,
        ) from None


def _iso_timeout(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    text = (
        "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "") + (f"{seconds}S" if seconds else "")
    )
    return text if text != "PT" else "PT0S"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


@dataclass(frozen=True)
class PolicyPatch:
    reboot: bool | None = None
    redeploy: bool | None = None
    central: bool | None = None  # scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph.enable

    @property
    def empty(self) -> bool:
        return self.reboot is None and self.redeploy is None and self.central is None


def _policy_patch(properties: dict | None, path: str, owner_type: str, api: ApiVersion) -> PolicyPatch:
    """``scheduledEventsPolicy`` of a request body."""
    if properties is None:
        return PolicyPatch()
    raw = _member(properties, "scheduledEventsPolicy")
    if raw is _ABSENT:
        return PolicyPatch()
    if not api.at_least(SCHEDULED_EVENTS_POLICY_SINCE):
        raise _missing_member("scheduledEventsPolicy", owner_type, f"{path}.scheduledEventsPolicy")
    policy = _object(raw, f"{path}.scheduledEventsPolicy")
    if policy is None:
        return PolicyPatch()
    base = f"{path}.scheduledEventsPolicy"
    reboot = _object(_member(policy, "userInitiatedReboot"), f"{base}.userInitiatedReboot")
    redeploy = _object(_member(policy, "userInitiatedRedeploy"), f"{base}.userInitiatedRedeploy")
    targets = _object(
        _member(policy, "scheduledEventsAdditionalPublishingTargets"),
        f"{base}.scheduledEventsAdditionalPublishingTargets",
    )
    central = None
    if targets is not None:
        if not api.at_least(PUBLISHING_TARGETS_SINCE):
            raise _missing_member(
                "scheduledEventsAdditionalPublishingTargets",
                "ScheduledEventsPolicy",
                f"{base}.scheduledEventsAdditionalPublishingTargets",
            )
        grid_path = f"{base}.scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph"
        grid = _object(_member(targets, "eventGridAndResourceGraph"), grid_path)
        if grid is not None:
            central = _bool(_member(grid, "enable"), f"{grid_path}.enable")
            version = _member(grid, "scheduledEventsApiVersion")
            if _given(version) and version not in CENTRAL_EVENTS_API_VERSIONS:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    f"The value '{version}' of '{grid_path}.scheduledEventsApiVersion' is not supported. "
                    f"Supported values: {', '.join(CENTRAL_EVENTS_API_VERSIONS)}.",
                    f"{grid_path}.scheduledEventsApiVersion",
                )
    all_down = _object(_member(policy, "allInstancesDown"), f"{base}.allInstancesDown")
    if (
        all_down is not None
        and _bool(_member(all_down, "automaticallyApprove"), f"{base}.allInstancesDown.automaticallyApprove") is False
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
        else _bool(_member(reboot, "automaticallyApprove"), f"{base}.userInitiatedReboot.automaticallyApprove"),
        redeploy=None
        if redeploy is None
        else _bool(_member(redeploy, "automaticallyApprove"), f"{base}.userInitiatedRedeploy.automaticallyApprove"),
        central=central,
    )


def _profile_patch(
    raw: Any, path: str, current: NotificationProfile, default_timeout: timedelta
) -> NotificationProfile | None:
    """A notification profile merged over the current one: what is not given stays (a timeout not given while the
    profile was off takes the API's default)."""
    profile = _object(raw, path)
    if profile is None:
        return None
    enable = _bool(_member(profile, "enable"), f"{path}.enable")
    timeout_raw = _member(profile, "notBeforeTimeout")
    if _given(timeout_raw):
        timeout = _iso_duration(timeout_raw, f"{path}.notBeforeTimeout")
    else:
        timeout = current.not_before_timeout if current.enable else default_timeout
    return NotificationProfile(current.enable if enable is None else enable, timeout)


def _policy_body(policy: Policy) -> dict:
    body = {
        "userInitiatedRedeploy": {"automaticallyApprove": policy.auto_approve_redeploy},
        "userInitiatedReboot": {"automaticallyApprove": policy.auto_approve_reboot},
    }
    if policy.publish_central:
        body["scheduledEventsAdditionalPublishingTargets"] = {
            "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": CENTRAL_EVENTS_API_VERSIONS[0]}
        }
    return body


def _same_place(a: str, b: str) -> bool:
    return a.replace(" ", "").lower() == b.replace(" ", "").lower()


# ---------------------------------------------------------------------------------------------------- operations
@dataclass(frozen=True)
class Operation:
    """A long-running operation: the events it waits for (sequence numbers, so that a batch of a thousand deletes is
    one short range), when it started, and until when it waits for impacts no event announced. Encoded in its id,
    with a checksum bound to the database's seed, so its status is derived from the engine after any restart."""

    seqs: tuple[int, ...]
    start: int  # unix seconds
    wait: int  # unix seconds: not Succeeded before

    def encode(self, seed: str) -> str:
        ranges: list[str] = []
        for first, count in _ranges(self.seqs):
            ranges.append(f"{first}.{count}" if count > 1 else str(first))
        body = f"{'_'.join(ranges) or '0'}-{self.start}-{self.wait - self.start}"
        return f"{body}-{_checksum(seed, body)}"

    @classmethod
    def decode(cls, seed: str, text: str) -> Operation | None:
        parts = text.split("-")
        if len(parts) != 4 or _checksum(seed, "-".join(parts[:3])) != parts[3].lower():
            return None
        try:
            seqs: list[int] = []
            if parts[0] != "0":
                for item in parts[0].split("_"):
                    first, _, count = item.partition(".")
                    seqs.extend(range(int(first), int(first) + (int(count) if count else 1)))
            start, wait = int(parts[1]), int(parts[2])
        except ValueError:
            return None
        if len(seqs) > 100_000 or wait < 0:
            return None
        return cls(tuple(seqs), start, start + wait)


def _checksum(seed: str, body: str) -> str:
    return hashlib.blake2b(f"{seed}\x1f{body}".encode(), digest_size=5).hexdigest()


def _ranges(seqs: Iterable[int]) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if found and found[-1][0] + found[-1][1] == seq:
            found[-1] = (found[-1][0], found[-1][1] + 1)
        else:
            found.append((seq, 1))
    return found


@dataclass
class _Done:
    changes: list[Change]
    operation: Operation


# --------------------------------------------------------------------------------------------------------- the API
class _Fleet:
    """Indexes of the fleet by ARM identity (subscription, resource group, name), case-insensitive."""

    def __init__(self, vms: Iterable[VM]):
        self.subscriptions: dict[str, str] = {}
        self.groups: dict[tuple[str, str], str] = {}
        self.vms: dict[tuple[str, str, str], VM] = {}
        self.avsets: dict[tuple[str, str, str], list[VM]] = {}
        self.scale_sets: dict[tuple[str, str, str], list[VM]] = {}
        for vm in vms:
            sub, group = vm.subscription_id.lower(), vm.resource_group.lower()
            self.subscriptions.setdefault(sub, vm.subscription_id)
            self.groups.setdefault((sub, group), vm.resource_group)
            if vm.scale_set is not None:
                self.scale_sets.setdefault((sub, group, vm.scale_set.lower()), []).append(vm)
                continue
            self.vms[(sub, group, vm.name.lower())] = vm
            if vm.availability_set is not None:
                self.avsets.setdefault((sub, group, vm.availability_set.lower()), []).append(vm)
        for members in self.scale_sets.values():
            members.sort(key=lambda vm: int(vm.instance_id or 0))


class ArmApi:
    def __init__(self, service: Maintenance, retry_after: int = 10):
        self.service = service
        self.retry_after = retry_after
        self.fleet = _Fleet(service.engine.fleet.vms.values())
        self._cache_engine: Engine | None = None
        self._marked_cache: dict[str, tuple[int, frozenset[str]]] = {}

    @property
    def engine(self) -> Engine:
        return self.service.engine

    # ------------------------------------------------------------------------------------------------ dispatch
    async def endpoint(self, request: Request) -> Response:
        return await answered(request, lambda: self.dispatch(request))

    async def dispatch(self, request: Request) -> Response:
        api = _api_version(request)  # ARM checks it before anything else
        method = request.method.upper()
        segments = [part for part in request.scope["path"].split("/") if part]
        lower = [part.lower() for part in segments]
        if len(segments) < 2 or lower[0] != "subscriptions":
            raise ArmError(404, "NotFound", f"No ARM route matches {request.scope['path']!r}.")
        sub = self._subscription(segments[1])
        rest, lrest = segments[2:], lower[2:]
        # /subscriptions/{sub}/providers/Microsoft.Compute/locations/{location}/operations/{id}
        if lrest[:1] == ["providers"]:
            if len(rest) == 6 and lrest[1] == COMPUTE.lower() and lrest[2] == "locations" and lrest[4] == "operations":
                self._allow(method, ("GET",))
                return self.operation_status(request, sub, rest[3], rest[5], api)
            raise ArmError(404, "NotFound", f"No ARM route matches {request.scope['path']!r}.")
        if lrest[:1] != ["resourcegroups"] or len(rest) < 2:
            raise ArmError(404, "NotFound", f"No ARM route matches {request.scope['path']!r}.")
        group = self._group(sub, rest[1])
        rest, lrest = rest[2:], lrest[2:]
        if len(rest) < 3 or lrest[0] != "providers":
            raise ArmError(404, "NotFound", f"No ARM route matches {request.scope['path']!r}.")
        if lrest[1] != COMPUTE.lower():
            raise ArmError(404, "InvalidResourceNamespace", f"The resource namespace '{rest[1]}' is invalid.")
        kind, names, lnames = lrest[2], rest[3:], lrest[3:]
        context = _Context(request, api, sub, group, _CANONICAL_TYPES.get(kind, rest[2]))
        if kind == "virtualmachines":
            return await self.virtual_machines(context, method, names, lnames)
        if kind == "availabilitysets":
            return await self.availability_sets(context, method, names, lnames)
        if kind == "virtualmachinescalesets":
            return await self.scale_sets(context, method, names, lnames)
        raise ArmError(
            404,
            "InvalidResourceType",
            f"The resource type '{rest[2]}' could not be found in the namespace '{COMPUTE}' for api "
            f"version '{api.text}'.",
        )

    @staticmethod
    def _allow(method: str, allowed: tuple[str, ...]) -> None:
        if method not in allowed:
            raise ArmError(405, "MethodNotAllowed", f"The requested resource does not support http method '{method}'.")

    def _subscription(self, text: str) -> str:
        found = self.fleet.subscriptions.get(text.lower())
        if found is None:
            raise ArmError(404, "SubscriptionNotFound", f"The subscription '{text}' could not be found.")
        return found

    def _group(self, sub: str, text: str) -> str:
        found = self.fleet.groups.get((sub.lower(), text.lower()))
        if found is None:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{text}' could not be found.")
        return found

    # --------------------------------------------------------------------------------------- virtual machines
    async def virtual_machines(self, ctx: _Context, method: str, names: list[str], lnames: list[str]) -> Response:
        if not names:
            self._allow(method, ("GET",))
            self.service.catch_up()
            vms = [vm for key, vm in self.fleet.vms.items() if key[:2] == ctx.key and self._exists(vm)]
            return _json(200, {"value": [self._vm_body(vm, ctx.api, False) for vm in vms]})
        name = names[0]
        if len(names) == 1:
            self._allow(method, ("GET", "PATCH", "PUT", "DELETE"))
            if method == "DELETE":
                return self.delete_vm(ctx, name)
            vm = self._vm(ctx, name, create=method == "PUT")
            if method == "GET":
                return _json(200, self._vm_body(vm, ctx.api, ctx.expand_instance_view))
            return await self.update_vm(ctx, vm)
        if len(names) == 2 and lnames[1] == "instanceview":
            self._allow(method, ("GET",))
            vm = self._vm(ctx, name)
            return _json(200, self._instance_view(vm, self.engine.vm_states[vm.name]))
        if len(names) == 2 and lnames[1] in _VM_ACTIONS:
            self._allow(method, ("POST",))
            vm = self._vm(ctx, name)
            await _body(ctx.request, required=False)  # the body (tempDisk, osProfile...) is read and ignored
            return self.act(ctx, lnames[1], [vm], vm.location)
        raise ArmError(404, "NotFound", f"No ARM route matches {ctx.request.scope['path']!r}.")

    def _vm(self, ctx: _Context, name: str, create: bool = False) -> VM:
        self.service.catch_up()
        vm = self.fleet.vms.get(ctx.key + (name.lower(),))
        if vm is None or not self._exists(vm):
            if create:
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot create virtual machine '{name}': the fleet file defines the VMs.",
                )
            raise _not_found(ctx.kind, name, ctx.group_text)
        return vm

    def delete_vm(self, ctx: _Context, name: str) -> Response:
        self.service.catch_up()
        vm = self.fleet.vms.get(ctx.key + (name.lower(),))
        if vm is None or not self._exists(vm):
            return Response(status_code=204)  # ARM RPC: deleting what does not exist is 204 No Content
        return self.act(ctx, "delete", [vm], vm.location)

    async def update_vm(self, ctx: _Context, vm: VM) -> Response:
        body = await _body(ctx.request, required=True)
        self._check_fixed(body, vm.location, vm.tags, [vm.zone] if vm.zone else [])
        properties = _object(_member(body, "properties"), "properties")
        if properties is not None:
            hardware = _object(_member(properties, "hardwareProfile"), "properties.hardwareProfile")
            size = None if hardware is None else _member(hardware, "vmSize")
            if _given(size) and str(size).lower() != vm.size.lower():
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot resize VM '{vm.name}': its size ({vm.size}) is set by the fleet file.",
                )
        patch = _policy_patch(properties, "properties", "VirtualMachineProperties", ctx.api)
        if not patch.empty:
            if vm.availability_set is not None:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    f"Virtual machine '{vm.name}' is in availability set '{vm.availability_set}', which imposes one "
                    f"scheduledEventsPolicy on all its members; set it on the availability set instead.",
                    "properties.scheduledEventsPolicy",
                )
            owner = vm.policy_owner
            self._perform(
                [
                    lambda engine: engine.update_policy(
                        owner, patch.reboot, patch.redeploy, publish_central=patch.central
                    )
                ]
            )
        return _json(200, self._vm_body(vm, ctx.api, False))

    # ------------------------------------------------------------------------------------- availability sets
    async def availability_sets(self, ctx: _Context, method: str, names: list[str], lnames: list[str]) -> Response:
        self.service.catch_up()
        if not names:
            self._allow(method, ("GET",))
            sets = [members for key, members in self.fleet.avsets.items() if key[:2] == ctx.key]
            return _json(200, {"value": [self._avset_body(members, ctx.api) for members in sets]})
        if len(names) != 1:
            raise ArmError(404, "NotFound", f"No ARM route matches {ctx.request.scope['path']!r}.")
        self._allow(method, ("GET", "PATCH", "PUT"))
        members = self.fleet.avsets.get(ctx.key + (lnames[0],))
        if members is None:
            if method == "PUT":
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot create availability set '{names[0]}': the fleet file defines it.",
                )
            raise _not_found(ctx.kind, names[0], ctx.group_text)
        if method != "GET":
            body = await _body(ctx.request, required=True)
            first = members[0]
            self._check_fixed(body, first.location, None, None)
            properties = _object(_member(body, "properties"), "properties")
            patch = _policy_patch(properties, "properties", "AvailabilitySetProperties", ctx.api)
            if not patch.empty:
                owner = first.policy_owner
                self._perform(
                    [
                        lambda engine: engine.update_policy(
                            owner, patch.reboot, patch.redeploy, publish_central=patch.central
                        )
                    ]
                )
        return _json(200, self._avset_body(members, ctx.api))

    # ----------------------------------------------------------------------------------------------- scale sets
    async def scale_sets(self, ctx: _Context, method: str, names: list[str], lnames: list[str]) -> Response:
        self.service.catch_up()
        if not names:
            self._allow(method, ("GET",))
            sets = [members for key, members in self.fleet.scale_sets.items() if key[:2] == ctx.key]
            return _json(200, {"value": [self._vmss_body(members, ctx.api) for members in sets]})
        members = self.fleet.scale_sets.get(ctx.key + (lnames[0],))
        if members is None:
            if len(names) == 1 and method == "PUT":
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot create scale set '{names[0]}': the fleet file defines it.",
                )
            raise _not_found(ctx.kind, names[0], ctx.group_text)
        if len(names) == 1:
            self._allow(method, ("GET", "PATCH", "PUT"))
            if method == "GET":
                return _json(200, self._vmss_body(members, ctx.api))
            return await self.update_vmss(ctx, members)
        if len(names) == 2 and lnames[1] in _VMSS_ACTIONS:
            self._allow(method, ("POST",))
            return await self.vmss_action(ctx, members, lnames[1])
        if lnames[1] != "virtualmachines":
            raise ArmError(404, "NotFound", f"No ARM route matches {ctx.request.scope['path']!r}.")
        if len(names) == 2:
            self._allow(method, ("GET",))
            live = [vm for vm in members if self._exists(vm)]
            return _json(200, {"value": [self._instance_body(vm, ctx.api, ctx.expand_instance_view) for vm in live]})
        vm = next((vm for vm in members if vm.instance_id == names[2]), None)
        if vm is None or not self._exists(vm):
            if len(names) == 3 and method == "DELETE":
                return Response(status_code=204)
            raise _not_found(f"{ctx.kind}/{names[0]}/virtualMachines", names[2], ctx.group_text)
        if len(names) == 3:
            self._allow(method, ("GET", "DELETE", "PUT", "PATCH"))
            if method == "DELETE":
                return self.act(ctx, "delete", [vm], vm.location)
            if method in ("PUT", "PATCH"):
                await self.update_instance(ctx, vm)
            return _json(200, self._instance_body(vm, ctx.api, ctx.expand_instance_view))
        if len(names) == 4 and lnames[3] == "instanceview":
            self._allow(method, ("GET",))
            return _json(200, self._instance_view(vm, self.engine.vm_states[vm.name]))
        if len(names) == 4 and lnames[3] in _VM_ACTIONS:
            self._allow(method, ("POST",))
            await _body(ctx.request, required=False)
            return self.act(ctx, lnames[3], [vm], vm.location)
        raise ArmError(404, "NotFound", f"No ARM route matches {ctx.request.scope['path']!r}.")

    async def update_instance(self, ctx: _Context, vm: VM) -> None:
        """An instance can be PUT back as it is (a GET-modify-PUT round trip); its policy is its scale set's."""
        body = await _body(ctx.request, required=True)
        self._check_fixed(body, vm.location, None, [vm.zone] if vm.zone else [])
        properties = _object(_member(body, "properties"), "properties")
        if not _policy_patch(properties, "properties", "VirtualMachineScaleSetVMProperties", ctx.api).empty:
            raise ArmError(
                400,
                "InvalidParameter",
                f"Virtual machine '{vm.name}' is an instance of scale set '{vm.scale_set}', which imposes one "
                "scheduledEventsPolicy on all its instances; set it on the scale set instead.",
                "properties.scheduledEventsPolicy",
            )

    async def update_vmss(self, ctx: _Context, members: list[VM]) -> Response:
        body = await _body(ctx.request, required=True)
        first = members[0]
        owner = first.policy_owner
        policy = self.engine.policies[owner]
        zones = sorted({vm.zone for vm in members if vm.zone})
        self._check_fixed(body, first.location, first.tags, zones)
        capacity: int | None = None
        sku = _object(_member(body, "sku"), "sku")
        if sku is not None:
            size = _member(sku, "name")
            if _given(size) and str(size).lower() != first.size.lower():
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot resize scale set '{first.scale_set}': its size ({first.size}) is set "
                    "by the fleet file.",
                )
            raw = _member(sku, "capacity")
            if _given(raw):
                if isinstance(raw, bool) or not isinstance(raw, int):
                    raise _convert_error(raw, "System.Int64", "sku.capacity")
                if raw < 0:
                    raise ArmError(
                        400, "InvalidParameter", "The value of sku.capacity cannot be negative.", "sku.capacity"
                    )
                capacity = raw
        properties = _object(_member(body, "properties"), "properties")
        patch = _policy_patch(properties, "properties", "VirtualMachineScaleSetProperties", ctx.api)
        terminate = os_image = None
        profile = (
            None
            if properties is None
            else _object(_member(properties, "virtualMachineProfile"), "properties.virtualMachineProfile")
        )
        if profile is not None:
            raw_events = _member(profile, "scheduledEventsProfile")
            path = "properties.virtualMachineProfile.scheduledEventsProfile"
            if raw_events is not _ABSENT and not ctx.api.at_least(SCHEDULED_EVENTS_PROFILE_SINCE):
                raise _missing_member("scheduledEventsProfile", "VirtualMachineProfile", path)
            events = _object(raw_events, path)
            if events is not None:
                raw_os = _member(events, "osImageNotificationProfile")
                if raw_os is not _ABSENT and not ctx.api.at_least(OS_IMAGE_PROFILE_SINCE):
                    raise _missing_member(
                        "osImageNotificationProfile", "ScheduledEventsProfile", f"{path}.osImageNotificationProfile"
                    )
                terminate = _profile_patch(
                    _member(events, "terminateNotificationProfile"),
                    f"{path}.terminateNotificationProfile",
                    policy.terminate,
                    TERMINATE_DEFAULT_TIMEOUT,
                )
                os_image = _profile_patch(
                    raw_os, f"{path}.osImageNotificationProfile", policy.os_image, OS_IMAGE_TIMEOUT
                )
        steps: list[Callable[[Engine], list[Change]]] = []
        if not patch.empty or terminate is not None or os_image is not None:
            steps.append(
                lambda engine: engine.update_policy(
                    owner, patch.reboot, patch.redeploy, terminate, os_image, patch.central
                )
            )
        scale_in = 0
        if capacity is not None:
            active = [vm for vm in members if self._exists(vm) and not self._marked(vm)]
            if capacity > len(active):
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"forewarn cannot scale scale set '{first.scale_set}' out to {capacity} instances: the "
                    f"fleet file fixes its instances, and {len(active)} are active.",
                    "sku.capacity",
                )
            scale_in = len(active) - capacity
            if scale_in:
                steps.append(lambda engine: engine.scale_in(owner, scale_in))
        if not steps:
            return _json(200, self._vmss_body(members, ctx.api))
        done = self._perform(steps)
        if scale_in:
            return self._accepted(ctx, first.location, done.operation)
        return _json(200, self._vmss_body(members, ctx.api))

    async def vmss_action(self, ctx: _Context, members: list[VM], action: str) -> Response:
        body = await _body(ctx.request, required=False)
        required = action in ("delete", "manualupgrade")
        raw = _member(body, "instanceIds")
        first = members[0]
        if not _given(raw):
            if required:
                raise _content_error("Required property 'instanceIds' not found in JSON. Path ''")
            targets = [vm for vm in members if self._exists(vm) and not self._marked(vm)]
        else:
            if not isinstance(raw, list):
                raise _convert_error(raw, "System.Collections.Generic.IList`1[System.String]", "instanceIds")
            ids: list[str] = []
            for index, item in enumerate(raw):
                if isinstance(item, bool) or not isinstance(item, (str, int)):
                    raise _convert_error(item, "System.String", f"instanceIds[{index}]")
                ids.append(str(item))
            if not ids:
                if required:
                    raise ArmError(400, "InvalidParameter", "instanceIds cannot be empty.", "instanceIds")
                targets = [vm for vm in members if self._exists(vm) and not self._marked(vm)]
            elif "*" in ids:
                targets = [vm for vm in members if self._exists(vm) and (action == "delete" or not self._marked(vm))]
            else:
                by_id = {vm.instance_id: vm for vm in members}
                targets = []
                for instance_id in ids:
                    vm = by_id.get(instance_id)
                    if vm is None or not self._exists(vm):
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
            owner = first.policy_owner
            names = [vm.name for vm in targets]
            done = self._perform([lambda engine: engine.update_instances(owner, names)] if names else [])
            return self._accepted(ctx, first.location, done.operation)
        return self.act(ctx, action, targets, first.location)

    # -------------------------------------------------------------------------------------------- user actions
    def act(self, ctx: _Context, action: str, vms: list[VM], location: str) -> Response:
        """restart, redeploy, reimage or delete VMs: one engine command, answered 202 with an operation."""
        names = [vm.name for vm in vms]
        attach: list[int] = []
        if action == "delete":
            marked = {vm.name: self._live_terminate(vm) for vm in vms}
            attach = [event.seq for events in marked.values() for event in events]
            names = [name for name in names if not marked[name]]
        else:
            for vm in vms:
                if self._marked(vm):
                    raise _marked_for_deletion(action, vm.name)
        steps: list[Callable[[Engine], list[Change]]] = []
        if names:
            if action == "delete":
                steps.append(lambda engine: engine.delete(names))
            else:
                steps.append(lambda engine: getattr(engine, action)(names))
        done = self._perform(steps, attach)
        return self._accepted(ctx, location, done.operation)

    def _perform(self, steps: list[Callable[[Engine], list[Change]]], attach: Iterable[int] = ()) -> _Done:
        """Run steps as one command (committed together), and describe it as an operation."""
        box: dict[str, Any] = {}

        def command(engine: Engine) -> list[Change]:
            before = engine.next_seq
            changes: list[Change] = []
            for step in steps:
                try:
                    changes += step(engine)
                except CoreError as error:
                    if changes:
                        raise _Refused(error) from error
                    raise
            box["seqs"] = range(before, engine.next_seq)
            box["now"] = engine.now
            return changes

        changes = self.service.perform(command)
        now: datetime = box["now"]
        wait = now
        for change in changes:
            if isinstance(change, VmChanged) and change.state.impact_until is not None:
                wait = max(wait, change.state.impact_until)
        start = int(math.floor(now.timestamp()))
        operation = Operation(
            tuple(sorted(set(box["seqs"]) | set(attach))), start, max(start, int(math.ceil(wait.timestamp())))
        )
        return _Done(changes, operation)

    def _accepted(self, ctx: _Context, location: str, operation: Operation) -> Response:
        url = self._operation_url(ctx.request, ctx.sub, location, operation.encode(self.engine.seed))
        version = quote(ctx.api.text, safe="")
        return Response(
            status_code=202,
            headers={
                "Azure-AsyncOperation": f"{url}?api-version={version}",
                "Location": f"{url}?monitor=true&api-version={version}",
                "Retry-After": str(self.retry_after),
            },
        )

    @staticmethod
    def _operation_url(request: Request, sub: str, location: str, operation_id: str) -> str:
        base = str(request.base_url).rstrip("/")
        return f"{base}/subscriptions/{sub}/providers/{COMPUTE}/locations/{quote(location, safe='')}/operations/{operation_id}"

    def operation_status(
        self, request: Request, sub: str, location: str, operation_id: str, api: ApiVersion
    ) -> Response:
        self.service.catch_up()
        engine = self.engine
        operation = Operation.decode(engine.seed, operation_id)
        events = []
        if operation is not None:
            for seq in operation.seqs:
                event = engine.event_by_seq(seq)
                if event is None:
                    operation = None
                    break
                events.append(event)
        if operation is None:
            raise ArmError(404, "NotFound", f"The operation '{operation_id}' was not found in location '{location}'.")
        start = datetime.fromtimestamp(operation.start, UTC)
        wait = datetime.fromtimestamp(operation.wait, UTC)
        running = engine.now < wait or any(event.status.live for event in events)
        monitor = request.query_params.get("monitor", "").lower() == "true"
        body: dict[str, Any] = {"startTime": _iso(start)}
        if running:
            body["status"] = "InProgress"
        else:
            ended = [event.ended_at for event in events if event.ended_at is not None]
            body["endTime"] = _iso(max(ended + [wait]))
            canceled = [event for event in events if event.status is EventStatus.CANCELED]
            body["status"] = "Canceled" if canceled else "Succeeded"
            if canceled:
                body["error"] = {
                    "code": "OperationCanceled",
                    "message": "The operation was canceled: its scheduled event "
                    f"{', '.join(e.event_id for e in canceled)} was canceled before it started.",
                }
        body["name"] = operation_id
        if monitor:  # the Location protocol: 202 while running, then the action's own (empty) result
            if running:
                url = self._operation_url(request, sub, location, operation_id)
                return Response(
                    status_code=202,
                    headers={
                        "Location": f"{url}?monitor=true&api-version={quote(api.text, safe='')}",
                        "Retry-After": str(self.retry_after),
                    },
                )
            if "error" in body:
                return _json(409, {"error": body["error"]})
            return Response(status_code=200)
        return _json(200, body)

    # ----------------------------------------------------------------------------------------------- bodies
    def _exists(self, vm: VM) -> bool:
        return not self.engine.vm_states[vm.name].deleted

    def _live_terminate(self, vm: VM):
        if not self._marked(vm):
            return []
        return [
            e
            for e in self.engine.live_events(vm.scope)
            if e.event_type is EventType.TERMINATE and vm.name in e.resources
        ]

    def _marked(self, vm: VM) -> bool:
        """Marked for deletion: a live Terminate event names it (it is deleted when the event starts)."""
        return vm.name in self._marked_in(vm.scope)

    def _marked_in(self, scope: str) -> frozenset[str]:
        """The VMs of a scope that live Terminate events name, cached per (engine, scope, incarnation): the
        incarnation moves whenever the scope's live events change, so a big scale set is scanned once per change."""
        engine = self.engine
        if self._cache_engine is not engine:  # a rebuilt engine (failed commit) starts a fresh cache
            self._cache_engine = engine
            self._marked_cache = {}
        incarnation = engine.incarnation(scope)
        hit = self._marked_cache.get(scope)
        if hit is None or hit[0] != incarnation:
            names = frozenset(
                name
                for event in engine.live_events(scope)
                if event.event_type is EventType.TERMINATE
                for name in event.resources
            )
            hit = (incarnation, names)
            self._marked_cache[scope] = hit
        return hit[1]

    def _provisioning(self, vm: VM, state: VmState) -> str:
        if self._marked(vm):
            return "Deleting"
        if state.power in _UPDATING:
            return "Updating"
        return "Succeeded"

    def _instance_view(self, vm: VM, state: VmState) -> dict:
        provisioning = self._provisioning(vm, state)
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
                    "time": _iso(state.booted_at),
                },
                {"code": power_code, "level": "Info", "displayStatus": power_text},
            ],
        }

    def _avset_id(self, vm: VM) -> str:
        return (
            f"/subscriptions/{vm.subscription_id}/resourceGroups/{vm.resource_group}/providers/{COMPUTE}"
            f"/availabilitySets/{vm.availability_set}"
        )

    def _vmss_id(self, vm: VM) -> str:
        return (
            f"/subscriptions/{vm.subscription_id}/resourceGroups/{vm.resource_group}/providers/{COMPUTE}"
            f"/virtualMachineScaleSets/{vm.scale_set}"
        )

    def _vm_body(self, vm: VM, api: ApiVersion, expand: bool) -> dict:
        state = self.engine.vm_states[vm.name]
        properties: dict[str, Any] = {
            "vmId": vm.vm_id,
            "hardwareProfile": {"vmSize": vm.size},
            "storageProfile": {"osDisk": {"osType": vm.os_type}},
        }
        if vm.availability_set is not None:
            properties["availabilitySet"] = {"id": self._avset_id(vm)}
        if vm.spot:
            properties["priority"] = "Spot"
            properties["evictionPolicy"] = "Delete"
        properties["provisioningState"] = self._provisioning(vm, state)
        if vm.availability_set is None and api.at_least(SCHEDULED_EVENTS_POLICY_SINCE):
            properties["scheduledEventsPolicy"] = _policy_body(self.engine.policies[vm.policy_owner])
        if expand:
            properties["instanceView"] = self._instance_view(vm, state)
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

    def _avset_body(self, members: list[VM], api: ApiVersion) -> dict:
        first = members[0]
        properties: dict[str, Any] = {
            "virtualMachines": [{"id": vm.resource_id} for vm in members if self._exists(vm)],
        }
        if api.at_least(SCHEDULED_EVENTS_POLICY_SINCE):
            properties["scheduledEventsPolicy"] = _policy_body(self.engine.policies[first.policy_owner])
        return {
            "name": first.availability_set,
            "id": self._avset_id(first),
            "type": f"{COMPUTE}/availabilitySets",
            "location": first.location,
            "sku": {"name": "Aligned"},
            "properties": properties,
        }

    def _vmss_body(self, members: list[VM], api: ApiVersion) -> dict:
        first = members[0]
        policy = self.engine.policies[first.policy_owner]
        active = [vm for vm in members if self._exists(vm) and not self._marked(vm)]
        profile: dict[str, Any] = {}
        if first.spot:
            profile["priority"] = "Spot"
            profile["evictionPolicy"] = "Delete"
        if api.at_least(SCHEDULED_EVENTS_PROFILE_SINCE):
            events: dict[str, Any] = {
                "terminateNotificationProfile": {
                    "notBeforeTimeout": _iso_timeout(policy.terminate.not_before_timeout),
                    "enable": policy.terminate.enable,
                }
            }
            if api.at_least(OS_IMAGE_PROFILE_SINCE):
                events["osImageNotificationProfile"] = {
                    "notBeforeTimeout": _iso_timeout(policy.os_image.not_before_timeout),
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
            properties["scheduledEventsPolicy"] = _policy_body(policy)
        body: dict[str, Any] = {
            "name": first.scale_set,
            "id": self._vmss_id(first),
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

    def _instance_body(self, vm: VM, api: ApiVersion, expand: bool) -> dict:
        state = self.engine.vm_states[vm.name]
        policy = self.engine.policies[vm.policy_owner]
        properties: dict[str, Any] = {
            "latestModelApplied": state.model_version == policy.model_version,
            "vmId": vm.vm_id,
            "hardwareProfile": {"vmSize": vm.size},
            "provisioningState": self._provisioning(vm, state),
        }
        if expand:
            properties["instanceView"] = self._instance_view(vm, state)
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

    @staticmethod
    def _check_fixed(body: dict, location: str, tags: dict | None, zones: list[str] | None) -> None:
        """What the fleet file fixes may be repeated (a GET-modify-PUT round trip) but not changed."""
        given = _member(body, "location")
        if _given(given) and not _same_place(str(given), location):
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"forewarn cannot move a resource from '{location}' to '{given}'.",
                "location",
            )
        given = _member(body, "tags")
        if tags is not None and _given(given) and given != tags:
            raise ArmError(409, "OperationNotAllowed", "forewarn cannot change tags: the fleet file sets them.", "tags")
        given = _member(body, "zones")
        if zones is not None and _given(given) and (not isinstance(given, list) or sorted(map(str, given)) != zones):
            raise ArmError(
                409, "OperationNotAllowed", "forewarn cannot change zones: the fleet file sets them.", "zones"
            )


@dataclass
class _Context:
    request: Request
    api: ApiVersion
    sub: str
    group: str  # the fleet's spelling
    kind: str  # the resource type, as ARM spells it
    group_text: str = ""

    def __post_init__(self):
        # ARM's not-found messages name the resource group as the request spelled it.
        segments = [part for part in self.request.scope["path"].split("/") if part]
        self.group_text = segments[3] if len(segments) > 3 else self.group

    @property
    def key(self) -> tuple[str, str]:
        return (self.sub.lower(), self.group.lower())

    @property
    def expand_instance_view(self) -> bool:
        return self.request.query_params.get("$expand", "").lower() == "instanceview"


def create_arm_app(service: Maintenance, retry_after: int = 10) -> Starlette:
    """The ARM management API over ``service``, as an ASGI app (serve it as a stand-in for management.azure.com)."""
    api = ArmApi(service, retry_after)
    methods = ["GET", "PUT", "PATCH", "POST", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(routes=[Route("/{path:path}", api.endpoint, methods=methods)])
    app.state.arm = api
    return app
