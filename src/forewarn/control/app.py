"""The control API (JSON, described by the OpenAPI document at ``/openapi.json``): fleet, events and clock.

This is forewarn's own surface, not a cloud's: the CLI speaks it, and tests and scenarios drive the engine through it.
Errors are ``{"error": {"code": ..., "message": ...}}`` with 400 (bad input), 404 (unknown name) or 409 (not now);
``errors.py`` gives Starlette's own errors (unknown route, wrong method, unparsable body) and bugs that shape.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from forewarn import __version__
from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.cloud import registered
from forewarn.control.dashboard import LiveFeed, SurfaceViews, dashboard_router, docs_page
from forewarn.control.errors import error_response, install_error_handlers
from forewarn.control.imds import imds_router
from forewarn.control.json_body import JsonBodyGuard
from forewarn.control.models import (
    ERRORS,
    MAX_LISTED_CHANGES,
    ChangeOut,
    changes_out,
    let_go,
)
from forewarn.control.scenario_runs import ScenarioRuns, scenarios_router
from forewarn.control.service import attach
from forewarn.control.waves import waves_router
from forewarn.core.changes import Change
from forewarn.core.clock import MANUAL, REAL
from forewarn.core.durations import parse_duration
from forewarn.core.errors import Conflict, CoreError, NotFound, did_you_mean
from forewarn.core.times import format_optional_time, format_time, parse_time


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
    metadata: Mapping[str, object] | None = None,
    imds_listener: tuple[str, int] | None = None,
    views: SurfaceViews | None = None,
    scenario_runs: ScenarioRuns | None = None,
) -> FastAPI:
    """The control API over ``service``. ``metadata``: each cloud's metadata surface, by cloud name, where the server
    runs them (``imds_listener``: where they listen); ``views``: what the dashboard shows of other surfaces."""
    app = FastAPI(
        title="forewarn control API",
        version=__version__,
        description="Build fleets, inject maintenance and move time. The CLI (`forewarn --help`) speaks this API.",
        docs_url=None,  # served below from the package's own copy of Swagger UI, not from a CDN
        redoc_url=None,
    )
    app.add_middleware(JsonBodyGuard)  # bounded, depth-checked JSON bodies (control_json.py)
    install_error_handlers(app)
    install_domain_errors(app)
    feed = LiveFeed(service)
    app.state.live_feed = feed

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return docs_page(app.openapi_url or "/openapi.json")

    surfaces = dict(metadata or {})
    attach(app, service, surfaces)  # what the clouds' routes work on (control/service.py)
    app.include_router(service_router(service))
    app.include_router(clock_router(service, feed))
    app.include_router(dashboard_router(service, feed, views))
    if scenario_runs is not None:
        app.include_router(scenarios_router(scenario_runs))
    for cloud in registered():
        router = cloud.control_router(surfaces)
        if router is not None:  # a cloud with no routes of its own
            app.include_router(router)
    app.include_router(waves_router(service))
    # Every cloud's surface answers as the machine the one resolver of the listener names: any of them gives it.
    resolving = next((surface for surface in surfaces.values() if hasattr(surface, "resolver")), None)
    if resolving is not None:
        app.include_router(imds_router(resolving, imds_listener))
    return app


def build_routes(routes: Sequence[Any]) -> None:
    """Build now what FastAPI builds of an included router on the first request that reaches it (FastAPI 0.165 here:
    every route's fields and validators, 50 ms for the whole control API, 14 ms for its largest router, each in one
    turn of the event loop): a server calls this before it serves, so that no first request holds the loop for it.
    A FastAPI that builds its routes when they are included has nothing to build here."""
    for route in routes:
        built = getattr(route, "effective_candidates", None)
        if callable(built):
            build_routes(built())
            route.effective_low_priority_routes()


def install_domain_errors(app: FastAPI) -> None:
    """The engine's errors (400, 404 with "did you mean", 409), an unreachable store (503) and a body that does not
    match its model (400), in the control API's error shape."""

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


def service_router(service: Maintenance) -> APIRouter:
    """The server itself: its health, its journal, and a reset."""
    router = APIRouter()

    @router.get("/healthz", tags=["service"])
    async def health() -> dict:
        # The database as the latest real operation on it found it (a commit, a read or the periodic probe).
        # pid: which process answered (a starter polling a port it chose tells its server from another's on that port)
        return {
            "status": "ok",
            "version": __version__,
            "pid": os.getpid(),
            "database": service.store.reachability.report(),
        }

    @router.get("/v1/journal", tags=["events"])
    async def journal(limit: int = Query(100, ge=1, le=10_000, description="the latest entries, oldest first")):
        """Every change the server committed (events, VMs, policies, waves, ...), latest ``limit``."""
        return [
            {"seq": entry.seq, "at": entry.at, "what": entry.kind, "event_id": entry.event_id, **entry.detail}
            for entry in service.journal(limit=limit)
        ]

    @router.get("/v1/fleet/machines", tags=["fleet"])
    async def machines() -> list[dict[str, str]]:
        """Every machine of the fleet, of every registered cloud in the registry's order: its name in the fleet (an
        EC2 instance: its id), its cloud, the host the fleet file puts it on."""
        parts = service.settled_engine().fleet.parts
        return [
            {"name": name, "cloud": cloud, "host": machine.host}
            for cloud, part in parts.items()
            for name, machine in part.machines.items()
        ]

    return router


def clock_router(service: Maintenance, feed: LiveFeed) -> APIRouter:
    """The simulated clock: read it, move it, pause or run it; and the reset, which puts it back at its start."""
    router = APIRouter()

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

    @router.get("/v1/clock", tags=["clock"], response_model=ClockOut)
    async def get_clock():
        service.catch_up()
        return clock_out()

    async def clock_moved(changes: list[Change]) -> ClockMoveOut:
        listed, total = await changes_out(changes)
        await let_go(changes)
        return ClockMoveOut(**clock_out().model_dump(), changes=listed, changes_total=total)

    @router.post("/v1/clock/advance", tags=["clock"], response_model=ClockMoveOut, responses=ERRORS)
    async def advance(body: AdvanceIn):
        return await clock_moved(await service.advance_clock_soon(parse_duration(body.by)))

    @router.post("/v1/clock/set", tags=["clock"], response_model=ClockMoveOut, responses=ERRORS)
    async def set_clock(body: SetIn):
        return await clock_moved(await service.set_clock_soon(parse_time(body.to)))

    @router.post("/v1/clock/next", tags=["clock"], response_model=ClockMoveOut, responses=ERRORS)
    async def next_deadline():
        return await clock_moved(await service.step_clock_soon())

    @router.post("/v1/clock/mode", tags=["clock"], response_model=ClockOut, responses=ERRORS)
    async def clock_mode(body: ClockModeIn):
        """Pause (manual) or run (real) the clock, at a speed; simulated time goes on from where it is."""
        speed = service.clock.speed if body.speed is None else body.speed
        await service.configure_clock_soon(MANUAL if body.mode == "manual" else REAL, speed)
        feed.clock_moved()
        return clock_out()

    @router.post("/v1/reset", tags=["service"], response_model=ClockOut, responses=ERRORS)
    async def reset():
        """Back to the server's start: the fleet, the clock at its start time, no events, waves, deliveries or
        journal, every incarnation 1 (committed before the answer)."""
        await service.reset_soon()
        return clock_out()

    return router
