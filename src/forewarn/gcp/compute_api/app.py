"""A subset of the Compute Engine API (``compute/v1``) on its own port, in the shape the official
``google-cloud-compute`` client reads (its REST transport, pointed at forewarn with ``client_options={"api_endpoint":
...}`` and anonymous credentials): instances get, list and aggregatedList with ``resourceStatus.upcomingMaintenance``
and ``scheduling``; ``simulateMaintenanceEvent``, ``performMaintenance`` and ``setScheduling``, each answered with a
zone operation that is already DONE (the change is committed when the answer is sent); zoneOperations get, list and
wait. Errors are Google's JSON error bodies. No credential is checked (docs/gcp.md)."""

from __future__ import annotations

import itertools
import json
import logging
from datetime import datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.core.errors import Conflict, CoreError, Invalid, NotFound
from forewarn.core.ids import derived_guid
from forewarn.gcp.component import GcpComponent
from forewarn.gcp.fleet import gce_fleet
from forewarn.gcp.model import GceInstance, GceMaintenance, OnHostMaintenance
from forewarn.net.browser_guard import BrowserGuard
from forewarn.net.untrusted_json import JsonInputError, parse_json

log = logging.getLogger("forewarn.gceapi")

PREFIX = "/compute/v1/projects/"
MAX_OPERATIONS = 10_000  # kept in memory, oldest dropped first: our bound


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def error_body(error: ApiError) -> bytes:
    """Google's JSON error: {"error": {"code", "message", "errors": [{"message", "domain", "reason"}]}}."""
    return json.dumps(
        {
            "error": {
                "code": error.status,
                "message": error.message,
                "errors": [{"message": error.message, "domain": "global", "reason": error.reason}],
            }
        }
    ).encode()


def rfc3339(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}-00:00"


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data), status, media_type="application/json; charset=UTF-8")


class ComputeApi:
    def __init__(self, service: Maintenance, guard: BrowserGuard | None = None):
        self.service = service
        self.guard = guard
        self.operations: dict[tuple[str, str, str], dict[str, Any]] = {}  # (project, zone, name) -> operation
        self._numbers = itertools.count(1)

    # ------------------------------------------------------------------------------------------ resources
    def instance_json(self, instance: GceInstance) -> dict[str, Any]:
        engine = self.service.settled_engine()
        state = engine.component(GcpComponent).gce_states[instance.name]
        zone_link = f"https://www.googleapis.com/compute/v1/projects/{instance.project}/zones/{instance.zone}"
        scheduling: dict[str, Any] = {
            "onHostMaintenance": state.on_host_maintenance.value,
            "automaticRestart": state.automatic_restart,
            "preemptible": instance.preemptible,
            "provisioningModel": instance.provisioning_model.value,
        }
        if instance.termination_action is not None:
            scheduling["instanceTerminationAction"] = instance.termination_action.value
        body: dict[str, Any] = {
            "kind": "compute#instance",
            "id": instance.instance_id,
            "creationTimestamp": rfc3339(engine.component(GcpComponent).gce_states[instance.name].started_at),
            "name": instance.name,
            "machineType": f"{zone_link}/machineTypes/{instance.machine_type}",
            "status": state.status.value,
            "zone": zone_link,
            "networkInterfaces": [
                {"kind": "compute#networkInterface", "name": "nic0", "networkIP": instance.internal_ip}
            ],
            "scheduling": scheduling,
            "selfLink": instance.self_link,
            "lastStartTimestamp": rfc3339(state.started_at),
        }
        if state.stopped_at is not None:
            body["lastStopTimestamp"] = rfc3339(state.stopped_at)
        if instance.gpus:
            body["guestAccelerators"] = [
                {
                    "acceleratorType": f"{zone_link}/acceleratorTypes/{instance.gpu_type}",
                    "acceleratorCount": instance.gpus,
                }
            ]
        upcoming = engine.component(GcpComponent).upcoming(instance.name)
        if upcoming is not None:
            body["resourceStatus"] = {"upcomingMaintenance": upcoming_maintenance(upcoming)}
        return body

    def _instance(self, project: str, zone: str, name: str) -> GceInstance:
        found = gce_fleet(self.service.settled_engine().fleet).instances.get(name)
        if (
            found is None
            or found.project != project
            or found.zone != zone
            or self.service.settled_engine().component(GcpComponent).gce_states[name].deleted
        ):
            raise ApiError(
                404, "notFound", f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"
            )
        return found

    def _operation(self, instance: GceInstance, kind: str) -> dict[str, Any]:
        number = next(self._numbers)
        now = rfc3339(self.service.now())
        name = f"operation-{number}-{derived_guid(instance.instance_id, kind, number).lower()}"
        zone_link = f"https://www.googleapis.com/compute/v1/projects/{instance.project}/zones/{instance.zone}"
        operation = {
            "kind": "compute#operation",
            "id": str(10**18 + number),
            "name": name,
            "zone": zone_link,
            "operationType": kind,
            "targetLink": instance.self_link,
            "targetId": instance.instance_id,
            "status": "DONE",
            "user": "anonymous",
            "progress": 100,
            "insertTime": now,
            "startTime": now,
            "endTime": now,
            "selfLink": f"{zone_link}/operations/{name}",
        }
        if len(self.operations) >= MAX_OPERATIONS:
            del self.operations[next(iter(self.operations))]
        self.operations[(instance.project, instance.zone, name)] = operation
        return operation

    # ---------------------------------------------------------------------------------------------- routes
    async def endpoint(self, request: Request) -> Response:
        try:
            refusal = self.guard.check(request.method, request.headers) if self.guard is not None else None
            if refusal is not None:
                raise ApiError(refusal.status, "forbidden" if refusal.status == 403 else "badRequest", refusal.message)
            body = await request.body()
            return await self.route(request.method, request.url.path, dict(request.query_params), body)
        except ApiError as error:
            return Response(error_body(error), error.status, media_type="application/json; charset=UTF-8")
        except Unavailable as error:
            failure = ApiError(503, "backendError", f"Nothing was changed; the store failed: {error}")
            return Response(error_body(failure), 503, media_type="application/json; charset=UTF-8")

    async def route(self, method: str, path: str, query: dict[str, str], body: bytes) -> Response:
        if not path.startswith(PREFIX):
            raise ApiError(404, "notFound", f"The requested URL {path} was not found on this server.")
        parts = path[len(PREFIX) :].split("/")
        service = self.service
        service.catch_up()
        if len(parts) == 3 and parts[1:] == ["aggregated", "instances"] and method == "GET":
            return _json(self.aggregated(parts[0]))
        if len(parts) < 4 or parts[1] != "zones":
            raise ApiError(404, "notFound", f"The requested URL {path} was not found on this server.")
        project, zone, collection, rest = parts[0], parts[2], parts[3], parts[4:]
        if collection == "operations":
            return self.operation_route(method, project, zone, rest)
        if collection != "instances":
            raise ApiError(404, "notFound", f"The requested URL {path} was not found on this server.")
        if not rest and method == "GET":
            items = [
                self.instance_json(i)
                for i in gce_fleet(service.settled_engine().fleet).instances.values()
                if i.project == project
                and i.zone == zone
                and not service.settled_engine().component(GcpComponent).gce_states[i.name].deleted
            ]
            return _json(
                {
                    "kind": "compute#instanceList",
                    "id": f"projects/{project}/zones/{zone}/instances",
                    "items": items,
                    "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/instances",
                }
            )
        if len(rest) == 1 and method == "GET":
            return _json(self.instance_json(self._instance(project, zone, rest[0])))
        if len(rest) == 2 and method == "POST":
            instance = self._instance(project, zone, rest[0])
            action = rest[1]
            name = instance.name
            try:
                if action == "simulateMaintenanceEvent":
                    await service.perform_soon(lambda engine: engine.component(GcpComponent).simulate_gce(name))
                elif action == "performMaintenance":
                    await service.perform_soon(lambda engine: engine.component(GcpComponent).perform_maintenance(name))
                elif action == "setScheduling":
                    policy, restart = scheduling_of(body)
                    await service.perform_soon(
                        lambda engine: engine.component(GcpComponent).set_scheduling(name, policy, restart)
                    )
                else:
                    raise ApiError(400, "invalid", f"Invalid value for field 'resource': '{action}'")
            except NotFound as error:
                raise ApiError(404, "notFound", str(error)) from None
            except Conflict as error:
                raise ApiError(
                    400, "resourceNotReady" if action == "simulateMaintenanceEvent" else "conditionNotMet", str(error)
                ) from None
            except (Invalid, CoreError) as error:
                raise ApiError(400, "invalid", str(error)) from None
            return _json(self._operation(instance, action))
        raise ApiError(404, "notFound", f"The requested URL {path} was not found on this server.")

    def aggregated(self, project: str) -> dict[str, Any]:
        engine = self.service.settled_engine()
        scoped: dict[str, list[dict[str, Any]]] = {}
        for instance in gce_fleet(engine.fleet).instances.values():
            if instance.project == project and not engine.component(GcpComponent).gce_states[instance.name].deleted:
                scoped.setdefault(f"zones/{instance.zone}", []).append(self.instance_json(instance))
        return {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{project}/aggregated/instances",
            "items": {scope: {"instances": found} for scope, found in sorted(scoped.items())},
            "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/aggregated/instances",
        }

    def operation_route(self, method: str, project: str, zone: str, rest: list[str]) -> Response:
        if not rest and method == "GET":
            items = [op for (p, z, _), op in self.operations.items() if p == project and z == zone]
            return _json(
                {"kind": "compute#operationList", "id": f"projects/{project}/zones/{zone}/operations", "items": items}
            )
        if rest and (len(rest) == 1 and method == "GET" or len(rest) == 2 and rest[1] == "wait" and method == "POST"):
            operation = self.operations.get((project, zone, rest[0]))
            if operation is None:
                raise ApiError(
                    404,
                    "notFound",
                    f"The resource 'projects/{project}/zones/{zone}/operations/{rest[0]}' was not found",
                )
            return _json(operation)
        raise ApiError(404, "notFound", "The requested URL was not found on this server.")


def scheduling_of(body: bytes) -> tuple[OnHostMaintenance | None, bool | None]:
    try:
        data = parse_json(body or b"{}")
    except JsonInputError as error:
        raise ApiError(400, "parseError", f"Invalid JSON payload received. {error}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "parseError", "Invalid JSON payload received. Expected an object.")
    policy = data.get("onHostMaintenance")
    restart = data.get("automaticRestart")
    if policy is not None and policy not in ("MIGRATE", "TERMINATE"):
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.onHostMaintenance': '{policy}'")
    if restart is not None and not isinstance(restart, bool):
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.automaticRestart': '{restart}'")
    return (None if policy is None else OnHostMaintenance(policy)), restart


def upcoming_maintenance(event: GceMaintenance) -> dict[str, Any]:
    """resourceStatus.upcomingMaintenance (the API reference's "UpcomingMaintenance")."""
    return {
        "type": event.maintenance_type.value,
        "canReschedule": event.can_reschedule,
        "windowStartTime": rfc3339(event.window_start),
        "windowEndTime": rfc3339(event.window_end),
        "latestWindowStartTime": rfc3339(event.latest_window_start),
        "maintenanceStatus": "ONGOING" if event.started_at is not None else "PENDING",
    }


def create_compute_app(service: Maintenance, guard: BrowserGuard | None = None) -> Starlette:
    api = ComputeApi(service, guard)
    app = Starlette(routes=[Route("/{path:path}", api.endpoint, methods=["GET", "POST", "PATCH", "PUT", "DELETE"])])
    app.state.compute = api
    return app
