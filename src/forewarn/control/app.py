"""The control API (JSON, described by the OpenAPI document at ``/openapi.json``): fleet, events and clock.

This is forewarn's own surface, not a cloud's: the CLI speaks it, and tests and scenarios drive the engine through it.
Errors are ``{"error": {"code": ..., "message": ...}}`` with 400 (bad input), 404 (unknown name) or 409 (not now);
``errors.py`` gives Starlette's own errors (unknown route, wrong method, unparsable body) and bugs that shape.
"""

from __future__ import annotations

from typing import Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from forewarn import __version__
from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.azure.component import MAX_EXTRA_IMPACTS, AzureComponent
from forewarn.azure.imds.scheduled_events import SCHEDULED_EVENTS_VERSIONS
from forewarn.azure.model import EventSource, EventType, ScheduleRequest, parse_enum
from forewarn.control.dashboard import LiveFeed, SurfaceViews, dashboard_router, docs_page
from forewarn.control.ec2 import ec2_router
from forewarn.control.errors import error_response, install_error_handlers
from forewarn.control.gcp import gcp_router
from forewarn.control.imds import imds_router
from forewarn.control.json_body import JsonBodyGuard
from forewarn.control.models import (
    ERRORS,
    MAX_LISTED_CHANGES,
    ChangeOut,
    EventOut,
    changes_out,
)
from forewarn.control.platform import platform_router
from forewarn.control.scenario_runs import ScenarioRuns, scenarios_router
from forewarn.control.waves import waves_router
from forewarn.core.bounds import MAX_DURATION_SECONDS
from forewarn.core.clock import MANUAL, REAL
from forewarn.core.durations import parse_duration, parse_optional_duration
from forewarn.core.errors import Conflict, CoreError, Invalid, NotFound, did_you_mean
from forewarn.core.times import format_optional_time, format_time, parse_optional_time, parse_time


class ScheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = Field(description="Freeze, Reboot, Redeploy, Preempt or Terminate", examples=["Freeze"])
    vms: list[str] = Field(default_factory=list, description="VM names")
    hosts: list[str] = Field(default_factory=list, description="host names: every VM on them is affected")
    source: str = Field(default="Platform", description="Platform or User")
    notice: str | None = Field(default=None, description="time until NotBefore: 30s, 15m, PT15M (default per type)")
    not_before: str | None = Field(default=None, description="explicit NotBefore, ISO 8601 (instead of notice)")
    duration_seconds: int | None = Field(
        default=None, strict=True, ge=-1, le=MAX_DURATION_SECONDS, description="DurationInSeconds; -1 means unknown"
    )
    description: str | None = None
    impact_window: str | None = Field(default=None, description="how long the event stays Started (default per type)")
    extra_impacts: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=MAX_EXTRA_IMPACTS,
        description="short freezes while Started (Azure may impact a VM more than once)",
    )
    group: str | None = Field(default=None, description="a scale set or availability set, with a domain")
    update_domain: int | None = Field(
        default=None, strict=True, ge=0, description="with group: the VMs of this update domain"
    )
    fault_domain: int | None = Field(
        default=None, strict=True, ge=0, description="with group: the VMs of this fault domain"
    )


class ApproveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    event_ids: list[str]
    by: str = "control"


class AdvanceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(description="a duration: 30s, 10m, 1h, PT15M", examples=["10m"])


class SetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: str = Field(description="ISO 8601 time", examples=["2026-04-20T22:26:58Z"])


class ClockModeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["manual", "real"] = Field(description="manual: time moves only by command (pause); real: it runs")
    speed: float | None = Field(default=None, description="simulated seconds per wall second (real); default: kept")


class ClockOut(BaseModel):
    mode: Literal["manual", "real"]
    speed: float
    now: str
    next_deadline: str | None


class ClockMoveOut(ClockOut):
    changes: list[ChangeOut] = Field(description=f"what the move did, in order (at most {MAX_LISTED_CHANGES})")
    changes_total: int = Field(description="how many changes there were in all (the journal has every one)")


def create_control_app(
    service: Maintenance,
    imds=None,
    imds_listener: tuple[str, int] | None = None,
    views: SurfaceViews | None = None,
    scenario_runs: ScenarioRuns | None = None,
) -> FastAPI:
    app = FastAPI(
        title="forewarn control API",
        version=__version__,
        description="Build fleets, inject maintenance and move time. The CLI (`forewarn --help`) speaks this API.",
        docs_url=None,  # served below from the package's own copy of Swagger UI, not from a CDN
        redoc_url=None,
    )
    app.add_middleware(JsonBodyGuard)  # bounded, depth-checked JSON bodies (control_json.py)

    install_error_handlers(app)
    feed = LiveFeed(service)
    app.state.live_feed = feed

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return docs_page(app.openapi_url or "/openapi.json")

    @app.exception_handler(CoreError)
    async def core_error(request: Request, error: CoreError):
        status = 404 if isinstance(error, NotFound) else 409 if isinstance(error, Conflict) else 400
        message = str(error)
        if isinstance(error, NotFound) and error.name is not None:
            message += did_you_mean(error.name, error.known)
        return error_response(status, type(error).__name__, message)

    @app.exception_handler(Unavailable)
    async def store_error(request: Request, error: Unavailable):
        response = error_response(503, "StoreUnavailable", f"nothing was changed: {error}")
        response.headers["Retry-After"] = str(error.retry_after)
        return response

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in problem['loc'] if p != 'body') or 'body'}: {problem['msg']}"
            for problem in error.errors()
        )
        return error_response(400, "Invalid", problems)

    @app.get("/healthz", tags=["service"])
    async def health() -> dict:
        # The database as the latest real operation on it found it (a commit, a read or the periodic probe).
        return {"status": "ok", "version": __version__, "database": service.store.reachability.report()}

    @app.get("/v1/events", tags=["events"], response_model=list[EventOut])
    async def list_events(all: bool = Query(False, description="include Completed and Canceled events")):
        service.catch_up()
        events = sorted(service.engine.component(AzureComponent).events.values(), key=lambda e: e.seq)
        return [EventOut.of(e) for e in events if all or e.status.live]

    @app.post("/v1/events", tags=["events"], status_code=201, response_model=list[EventOut], responses=ERRORS)
    async def schedule(body: ScheduleIn):
        request = ScheduleRequest(
            event_type=parse_enum(EventType, body.type, "event type"),
            vms=tuple(body.vms),
            hosts=tuple(body.hosts),
            source=parse_enum(EventSource, body.source, "event source"),
            notice=parse_optional_duration(body.notice),
            not_before=parse_optional_time(body.not_before),
            duration_seconds=body.duration_seconds,
            description=body.description,
            impact_window=parse_optional_duration(body.impact_window),
            extra_impacts=body.extra_impacts,
            group=body.group,
            update_domain=body.update_domain,
            fault_domain=body.fault_domain,
        )
        # Committed with the other commands that arrive while the transaction before theirs is under way
        # (group commit); answered once durable.
        return [EventOut.of(e) for e in await service.schedule_soon(request)]

    @app.get("/v1/events/{event_id}", tags=["events"], response_model=EventOut, responses=ERRORS)
    async def get_event(event_id: str):
        service.catch_up()
        return EventOut.of(
            service.engine.component(AzureComponent).event(
                service.engine.component(AzureComponent).resolve_event_id(event_id)
            )
        )

    @app.get("/v1/journal", tags=["events"])
    async def journal(limit: int = Query(100, ge=1, le=10_000, description="the latest entries, oldest first")):
        """Every change the server committed (events, VMs, policies, waves, ...), latest ``limit``."""
        return [
            {"seq": entry.seq, "at": entry.at, "what": entry.kind, "event_id": entry.event_id, **entry.detail}
            for entry in service.journal(limit=limit)
        ]

    @app.get("/v1/events/{event_id}/journal", tags=["events"], responses=ERRORS)
    async def event_journal(event_id: str):
        event = service.engine.component(AzureComponent).event(
            service.engine.component(AzureComponent).resolve_event_id(event_id)
        )
        return [{"at": entry.at, "what": entry.kind, **entry.detail} for entry in service.journal(event.event_id)]

    @app.post("/v1/approvals", tags=["events"], response_model=list[EventOut], responses=ERRORS)
    async def approve(body: ApproveIn):
        ids = [service.engine.component(AzureComponent).resolve_event_id(event_id) for event_id in body.event_ids]
        service.approve(ids, by=body.by)
        return [EventOut.of(service.engine.component(AzureComponent).event(event_id)) for event_id in ids]

    @app.post("/v1/events/{event_id}/approve", tags=["events"], response_model=EventOut, responses=ERRORS)
    async def approve_one(event_id: str):
        event_id = service.engine.component(AzureComponent).resolve_event_id(event_id)
        service.approve([event_id], by="control")
        return EventOut.of(service.engine.component(AzureComponent).event(event_id))

    @app.post("/v1/events/{event_id}/cancel", tags=["events"], response_model=EventOut, responses=ERRORS)
    async def cancel(event_id: str):
        return EventOut.of(service.cancel(service.engine.component(AzureComponent).resolve_event_id(event_id)))

    def clock_out() -> ClockOut:
        view = service.clock_view()
        # The clock holds one of its two modes as text; the response names them as an enum.
        mode: Literal["manual", "real"] = "manual" if view.mode == MANUAL else "real"
        return ClockOut(
            mode=mode,
            speed=view.speed,
            now=format_time(view.now),
            next_deadline=format_optional_time(view.next_deadline),
        )

    @app.get("/v1/clock", tags=["clock"], response_model=ClockOut)
    async def get_clock():
        service.catch_up()
        return clock_out()

    def clock_moved(changes) -> ClockMoveOut:
        listed, total = changes_out(changes)
        return ClockMoveOut(**clock_out().model_dump(), changes=listed, changes_total=total)

    @app.post("/v1/clock/advance", tags=["clock"], response_model=ClockMoveOut, responses=ERRORS)
    async def advance(body: AdvanceIn):
        return clock_moved(service.advance_clock(parse_duration(body.by)))

    @app.post("/v1/clock/set", tags=["clock"], response_model=ClockMoveOut, responses=ERRORS)
    async def set_clock(body: SetIn):
        return clock_moved(service.set_clock(parse_time(body.to)))

    @app.post("/v1/clock/next", tags=["clock"], response_model=ClockMoveOut, responses=ERRORS)
    async def next_deadline():
        return clock_moved(service.step_clock())

    @app.post("/v1/clock/mode", tags=["clock"], response_model=ClockOut, responses=ERRORS)
    async def clock_mode(body: ClockModeIn):
        """Pause (manual) or run (real) the clock, at a speed; simulated time goes on from where it is."""
        speed = service.clock.speed if body.speed is None else body.speed
        service.configure_clock(MANUAL if body.mode == "manual" else REAL, speed)
        feed.clock_moved()
        return clock_out()

    @app.post("/v1/reset", tags=["service"], response_model=ClockOut, responses=ERRORS)
    async def reset():
        """Back to the server's start: the fleet, the clock at its start time, no events, waves, deliveries or
        journal, every incarnation 1 (committed before the answer)."""
        service.reset()
        return clock_out()

    @app.get("/v1/fleet", tags=["fleet"])
    async def fleet():
        engine = service.engine
        return {
            "default_vm": engine.fleet.default_vm,
            "hosts": [
                {"name": name, "vms": [vm.name for vm in engine.fleet.vms_by_host[name]]} for name in engine.fleet.hosts
            ],
            "scopes": [
                {
                    "scope": scope,
                    "incarnation": engine.component(AzureComponent).incarnation(scope),
                    "vms": [vm.name for vm in vms],
                }
                for scope, vms in engine.fleet.vms_by_scope.items()
            ],
            "vms": [
                {
                    "name": vm.name,
                    "host": vm.host,
                    "scope": vm.scope,
                    "subscription_id": vm.subscription_id,
                    "resource_group": vm.resource_group,
                    "availability_set": vm.availability_set,
                    "scale_set": vm.scale_set,
                    "location": vm.location,
                    "zone": vm.zone,
                    "size": vm.size,
                    "fault_domain": vm.fault_domain,
                    "update_domain": vm.update_domain,
                    "spot": vm.spot,
                    "vm_id": vm.vm_id,
                    "imds_address": vm.imds_address,
                    "imds_port": vm.imds_port,
                }
                for vm in engine.fleet.vms.values()
            ],
        }

    app.include_router(dashboard_router(service, feed, views))
    if scenario_runs is not None:
        app.include_router(scenarios_router(scenario_runs))
    app.include_router(platform_router(service))
    app.include_router(ec2_router(service))
    app.include_router(gcp_router(service))
    app.include_router(waves_router(service))

    if imds is not None:
        app.include_router(imds_router(imds, imds_listener))

        @app.get("/v1/vms/{name}/scheduledevents", tags=["fleet"], responses=ERRORS)
        async def vm_document(name: str, api_version: str = Query("2020-07-01", alias="api-version")):
            """The scheduled-events document this VM's IMDS serves right now (same bytes, same ETag)."""
            vm = service.engine.fleet.vm(name)
            if api_version not in SCHEDULED_EVENTS_VERSIONS:
                raise Invalid(
                    f"unknown api-version {api_version!r}; expected one of {', '.join(SCHEDULED_EVENTS_VERSIONS)}"
                )
            service.catch_up()
            body, etag = imds.document_with_etag(vm.scope, api_version)
            return Response(body, media_type="application/json", headers={"etag": etag})

    return app
