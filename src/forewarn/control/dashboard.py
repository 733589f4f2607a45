"""The dashboard's side of the control API: the page and its scripts, the fleet in one compact read, and the live
stream of committed changes (server-sent events).

The page is plain files shipped in the package (``control/static/``), served from here: no build step, nothing
loaded from the internet. Every action the page takes is a request to the control API itself; this module only
adds reads. The stream is fed by the same listener hook the IMDS read models use (``Maintenance.subscribe``): a
listener turns each committed batch into one small message (the events, waves and machines it touched, and the
clock) and offers it to every open stream. Each stream has a bounded queue; a client too slow to drain it is cut
off (it reconnects and reads the fleet afresh), so a page left open for hours holds nothing that grows. Streams are
few (a page holds one): at most so many in all and per client address, each freed when its client goes, falls
behind, or takes nothing of what it is sent for the port's send timeout (the server's ``UvicornGuard``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from forewarn.app.runtime import Maintenance
from forewarn.aws.changes import Ec2EventChanged, Ec2StateChanged
from forewarn.aws.component import Ec2Component
from forewarn.aws.fleet import ec2_fleet
from forewarn.aws.model import Ec2EventState, InstanceState
from forewarn.aws.views import Ec2EventOut
from forewarn.azure.changes import EventChanged, VmChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventStatus
from forewarn.azure.vms import Power
from forewarn.control.models import ERRORS, EventOut
from forewarn.control.waves import WaveOut
from forewarn.core.changes import Change, Rebuilt
from forewarn.core.clock import MANUAL
from forewarn.core.errors import Invalid
from forewarn.core.times import format_optional_time, format_time
from forewarn.engine.engine import Engine
from forewarn.gcp.changes import GceEventChanged, GceStateChanged
from forewarn.gcp.component import GcpComponent
from forewarn.gcp.fleet import gce_fleet
from forewarn.gcp.model import EventState, InstanceStatus
from forewarn.gcp.views import GceEventOut
from forewarn.waves.component import WaveChanged

# What a machine is going through, as the fleet view colours it; the most serious wins. The page has the same list.
OK, SCHEDULED, STARTED, IMPACTED, STOPPED, DELETED, EVICTED = range(7)
STATE_NAMES = ["ok", "scheduled", "started", "impacted", "stopped", "deleted", "evicted"]

# A batch touching more than this many events or machines is not itemised: the message says "resync" and pages read
# the fleet again (a wave step over 100,000 VMs is one read, not a 10 MB message to every page).
MAX_ITEMS_PER_MESSAGE = 2000
# Messages a stream may hold unsent before its client counts as too slow and is dropped.
QUEUE_LIMIT = 256
# At most this many pages follow the stream at once, and this many from one client address (so that one client
# cannot take every slot); one more is answered 503 (the page retries later).
MAX_STREAMS = 64
MAX_STREAMS_PER_SOURCE = 16
# A comment line this often keeps proxies from closing an idle stream and finds clients that went away.
KEEPALIVE_SECONDS = 15.0

STATIC = resources.files("forewarn.control") / "static"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
}


def _azure_states(engine: Engine, names: Iterable[str] | None = None) -> dict[str, int]:
    """State codes of Azure VMs (all, or ``names``): from their power state and the live events that name them."""
    fleet = engine.fleet
    wanted = azure_fleet(fleet).vms.keys() if names is None else [n for n in names if n in azure_fleet(fleet).vms]
    states: dict[str, int] = {}
    scopes = (
        {azure_fleet(fleet).vms[name].scope for name in wanted}
        if names is not None
        else azure_fleet(fleet).vms_by_scope.keys()
    )
    from_events: dict[str, int] = {}
    for scope in scopes:
        for event in engine.component(AzureComponent).live_events(scope):
            code = STARTED if event.status is EventStatus.STARTED else SCHEDULED
            for resource in event.resources:
                if from_events.get(resource, OK) < code:
                    from_events[resource] = code
    power_of = engine.component(AzureComponent).vm_states.power
    for name in wanted:
        code = from_events.get(name, OK)
        power = power_of(name)
        if power is Power.DELETED:
            code = EVICTED if azure_fleet(fleet).vms[name].spot else DELETED
        elif power is not Power.RUNNING:
            code = IMPACTED
        states[name] = code
    return states


def _ec2_states(engine: Engine, ids: Iterable[str] | None = None) -> dict[str, int]:
    wanted = (
        engine.component(Ec2Component).ec2_instances.keys()
        if ids is None
        else [i for i in ids if i in engine.component(Ec2Component).ec2_instances]
    )
    active: set[str] = {
        event.instance_id
        for event in engine.component(Ec2Component).ec2_events.values()
        if event.state is Ec2EventState.ACTIVE
    }
    states: dict[str, int] = {}
    for instance_id in wanted:
        state = engine.component(Ec2Component).ec2_states[instance_id]
        if state.state is InstanceState.TERMINATED:
            code = (
                EVICTED
                if engine.component(Ec2Component).ec2_instances[instance_id].spot and state.spot_action
                else DELETED
            )
        elif state.state is InstanceState.STOPPED:
            code = STOPPED
        elif state.impacted_by is not None or state.state is not InstanceState.RUNNING:
            code = IMPACTED
        elif state.spot_action is not None:
            code = STARTED
        else:
            code = SCHEDULED if instance_id in active else OK
        states[instance_id] = code
    return states


def _gce_states(engine: Engine, names: Iterable[str] | None = None) -> dict[str, int]:
    """Compute Engine instances: announced or notified maintenance is scheduled, a live migration under way started,
    an instance down for maintenance (or after a host error, until automaticRestart) impacted; a preempted Spot or
    preemptible instance is started during its 30-second notice, evicted once stopped or deleted."""
    instances = gce_fleet(engine.fleet).instances
    wanted = instances.keys() if names is None else [n for n in names if n in instances]
    from_events: dict[str, int] = {}
    # A few instances (one commit's): their own events; the whole fleet: one pass over every event.
    events = (
        engine.component(GcpComponent).gce_events.values()
        if names is None
        else (e for n in wanted for e in engine.component(GcpComponent).gce_events_of(n))
    )
    for event in events:
        if event.live:
            code = STARTED if event.state is EventState.ONGOING else SCHEDULED
            if from_events.get(event.instance, OK) < code:
                from_events[event.instance] = code
    states: dict[str, int] = {}
    for name in wanted:
        state = engine.component(GcpComponent).gce_states[name]
        if state.preempted:
            code = STARTED if state.status is InstanceStatus.STOPPING else EVICTED
        elif state.deleted:
            code = DELETED
        elif state.status is not InstanceStatus.RUNNING:
            down_for_platform = state.restart_at is not None or from_events.get(name) == STARTED
            code = IMPACTED if down_for_platform else STOPPED
        else:
            code = from_events.get(name, OK)
        states[name] = code
    return states


def clock_json(service: Maintenance) -> dict[str, Any]:
    view = service.clock_view()
    return {
        "mode": "manual" if view.mode == MANUAL else "real",
        "speed": view.speed,
        "now": format_time(view.now),
        "next_deadline": format_optional_time(view.next_deadline),
    }


def _group(vm) -> str:
    if vm.scale_set:
        return f"scale set {vm.scale_set}"
    return f"availability set {vm.availability_set}" if vm.availability_set else "standalone"


class FleetRead:
    """Every machine in columns (name, cloud, host, set, zone, update domain, state; host, set and zone as indexes
    into string tables): about 36 bytes a machine, so 100,000 VMs are one read of under 4 MB. What never changes
    while serving (names, sets, zones, domains) is encoded once; hosts (a redeploy moves a VM) and states each time."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._order: list[tuple[int, str]] = []  # (cloud, name) in column order
        self._fixed = ""  # the JSON of the fixed columns and tables, without braces

    def _encode_fixed(self, engine: Engine) -> None:
        sets: dict[str, int] = {}
        zones: dict[str, int] = {}
        columns: dict[str, list] = {"name": [], "cloud": [], "set": [], "zone": [], "domain": []}
        order: list[tuple[int, str]] = []

        def add(cloud: int, name: str, group: str, zone: str, domain: int) -> None:
            order.append((cloud, name))
            columns["name"].append(name)
            columns["cloud"].append(cloud)
            columns["set"].append(sets.setdefault(group, len(sets)))
            columns["zone"].append(zones.setdefault(zone, len(zones)))
            columns["domain"].append(domain)

        for vm in azure_fleet(engine.fleet).vms.values():
            add(0, vm.name, _group(vm), f"{vm.location} {vm.zone}".strip(), vm.update_domain)
        for instance_id, instance in engine.component(Ec2Component).ec2_instances.items():
            group = f"auto scaling group {instance.auto_scaling_group}" if instance.auto_scaling_group else "EC2"
            add(1, instance_id, group, instance.availability_zone, 0)
        for name, gce in gce_fleet(engine.fleet).instances.items():
            add(2, name, f"Compute Engine {gce.zone}", gce.zone, 0)
        encode = json.JSONEncoder(separators=(",", ":")).encode
        self._order = order
        self._fixed = f'"sets":{encode(list(sets))},"zones":{encode(list(zones))},"machines":{{' + ",".join(
            f'"{name}":{encode(values)}' for name, values in columns.items()
        )

    def body(self, service: Maintenance) -> str:
        engine = service.engine
        key = (
            id(engine.fleet),
            len(engine.component(Ec2Component).ec2_instances),
        )  # an Auto Scaling replacement adds an instance
        if key != self._key:
            self._encode_fixed(engine)
            self._key = key
        hosts = {name: n for n, name in enumerate(engine.fleet.hosts)}
        azure = _azure_states(engine)
        ec2 = _ec2_states(engine)
        gce = _gce_states(engine)
        ec2_states, gce_states = engine.component(Ec2Component).ec2_states, engine.component(GcpComponent).gce_states
        host_of = (
            engine.component(AzureComponent).vm_states.host,
            lambda name: ec2_states[name].host,
            lambda name: gce_states[name].host,
        )
        codes = (azure, ec2, gce)
        host_column: list[int] = []
        state_column: list[int] = []
        for cloud, name in self._order:
            host_column.append(hosts.setdefault(host_of[cloud](name), len(hosts)))
            state_column.append(codes[cloud][name])
        encode = json.JSONEncoder(separators=(",", ":")).encode
        return (
            f'{{"state_names":{encode(STATE_NAMES)},"hosts":{encode(list(hosts))},{self._fixed},'
            f'"host":{encode(host_column)},"state":{encode(state_column)}}},"clock":{encode(clock_json(service))}}}'
        )


def change_message(service: Maintenance, changes: list[Change]) -> dict[str, Any]:
    """One committed batch as the page needs it: touched events, waves and machines' new states, and the clock."""
    if isinstance(changes[0], Rebuilt):
        return {"resync": True, "reason": changes[0].cause, "clock": clock_json(service)}
    engine = service.engine
    events: dict[str, Any] = {}
    ec2_events: dict[str, Any] = {}
    waves: dict[str, Any] = {}
    vms: dict[str, None] = {}  # ordered: the message lists machines in the order the changes named them
    instances: dict[str, None] = {}
    gce_events: dict[str, Any] = {}
    gce_instances: dict[str, None] = {}
    for change in changes:
        if isinstance(change, EventChanged):
            events[change.event.event_id] = change.event
            vms.update(dict.fromkeys(change.event.resources))
        elif isinstance(change, VmChanged):
            vms[change.state.name] = None
        elif isinstance(change, Ec2EventChanged):
            ec2_events[change.event.event_id] = change.event
            instances[change.event.instance_id] = None
        elif isinstance(change, Ec2StateChanged):
            instances[change.state.instance_id] = None
        elif isinstance(change, GceEventChanged):
            gce_events[change.event.event_id] = change.event
            gce_instances[change.event.instance] = None
        elif isinstance(change, GceStateChanged):
            gce_instances[change.state.name] = None
        elif isinstance(change, WaveChanged):
            waves[change.wave.wave_id] = change.wave
    if (
        len(events) + len(ec2_events) + len(gce_events) > MAX_ITEMS_PER_MESSAGE
        or len(vms) + len(instances) + len(gce_instances) > MAX_ITEMS_PER_MESSAGE
    ):
        return {"resync": True, "reason": f"{len(changes)} changes in one step", "clock": clock_json(service)}
    states = {**_azure_states(engine, vms), **_ec2_states(engine, instances), **_gce_states(engine, gce_instances)}
    new_machines = [
        i
        for i in instances
        if i in engine.component(Ec2Component).ec2_instances and i not in ec2_fleet(engine.fleet).instances
    ]
    return {
        "events": [EventOut.of(event).model_dump() for event in events.values()],
        "ec2_events": [Ec2EventOut.of(event).model_dump() for event in ec2_events.values()],
        "gce_events": [GceEventOut.of(event).model_dump() for event in gce_events.values()],
        "waves": [WaveOut.of(wave).model_dump() for wave in waves.values()],
        "states": states,
        "resync": bool(new_machines),  # an Auto Scaling replacement: a machine the page has not seen
        "clock": clock_json(service),
    }


@dataclass(frozen=True)
class SurfaceViews:
    """What other surfaces show, rendered by them (the server wires these; the control API imports none of them):
    the bytes an EC2 instance's metadata endpoint serves for a path, its DescribeInstanceStatus item, an Azure
    event's Resource Graph row (None when the ARM port is off), and what a Compute Engine instance's metadata server
    answers for a path (with its ETag; None when the server has no GCE metadata surface)."""

    ec2_metadata: Callable[[str, str], tuple[int, bytes, str]]  # status, body, content type
    ec2_status: Callable[[str], str]
    central_row: Callable[[str], dict | None] | None = None
    gce_metadata: Callable[[str, str], tuple[int, bytes, str, str | None]] | None = None  # ... and the ETag


SCHEDULED_PATH = "/latest/meta-data/events/maintenance/scheduled"
MAINTENANCE_EVENT_PATH = "/computeMetadata/v1/instance/maintenance-event"


class _Stream:
    """One open page: its pending messages, bounded, filled from whichever thread committed the change."""

    def __init__(self, feed: LiveFeed, source: str, loop: asyncio.AbstractEventLoop):
        self.feed = feed
        self.source = source
        self.loop = loop
        self.pending: deque[str] = deque()
        self.wake = asyncio.Event()
        self.overflowed = False

    def offer(self, line: str) -> None:
        try:
            self.loop.call_soon_threadsafe(self._put, line)
        except RuntimeError:  # the loop closed: the server is stopping
            pass

    def _put(self, line: str) -> None:
        if self.overflowed:
            return  # being dropped: nothing more is kept for it
        if len(self.pending) >= QUEUE_LIMIT:
            self.overflowed = True
            self.pending.clear()
            self.feed.dropped += 1
            # Its slot is free at once; its connection ends when it next takes a message (it is told it was
            # dropped), or at the send timeout if it takes none.
            self.feed.release(self)
        else:
            self.pending.append(line)
        self.wake.set()


class LiveFeed:
    """Committed changes, as server-sent events, to every open dashboard."""

    def __init__(self, service: Maintenance):
        self.service = service
        self.streams: set[_Stream] = set()
        self.by_source: dict[str, int] = {}
        self.dropped = 0  # streams cut off for being too slow (GET /v1/dashboard/stats)
        self.sent = 0
        self._lock = threading.Lock()
        self._seq = 0
        self.closing = False
        service.subscribe(self.on_change)

    def close(self) -> None:
        """End every stream (the server is stopping: it waits for open responses to finish). On the server's loop."""
        self.closing = True
        for stream in self.streams:
            stream.wake.set()

    def open(self, source: str) -> _Stream | str:
        """A new stream for a client at ``source``, or why there is none. On the server's loop."""
        if len(self.streams) >= MAX_STREAMS:
            return f"at most {MAX_STREAMS} open streams"
        if self.by_source.get(source, 0) >= MAX_STREAMS_PER_SOURCE:
            return f"at most {MAX_STREAMS_PER_SOURCE} open streams from one address ({source})"
        stream = _Stream(self, source, asyncio.get_running_loop())
        self.streams.add(stream)
        self.by_source[source] = self.by_source.get(source, 0) + 1
        return stream

    def release(self, stream: _Stream) -> None:
        """Free the stream's slot (once: a stream ends by several paths)."""
        if stream in self.streams:
            self.streams.discard(stream)
            left = self.by_source[stream.source] - 1
            if left:
                self.by_source[stream.source] = left
            else:
                del self.by_source[stream.source]

    def on_change(self, changes: list[Change]) -> None:
        if not self.streams:
            return
        message = change_message(self.service, changes)
        self.publish(message)

    def publish(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._seq += 1
            message = {"seq": self._seq, "committed": time.time(), **message}
        line = f"data: {json.dumps(message, separators=(',', ':'))}\n\n"
        for stream in list(self.streams):
            stream.offer(line)

    def clock_moved(self) -> None:
        """The clock's mode or speed changed: no engine change announces that, so the route that did it calls this."""
        if self.streams:
            self.publish({"clock": clock_json(self.service)})

    async def follow(self, stream: _Stream) -> AsyncIterator[bytes]:
        try:
            hello = {"hello": True, "clock": clock_json(self.service)}
            yield f"retry: 1000\ndata: {json.dumps(hello)}\n\n".encode()
            while True:
                try:
                    await asyncio.wait_for(stream.wake.wait(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                stream.wake.clear()
                if self.closing:
                    return
                if stream.overflowed:
                    yield b'data: {"dropped":true}\n\n'
                    return
                while stream.pending:
                    self.sent += 1
                    yield stream.pending.popleft().encode()
        finally:
            self.release(stream)


class _StreamResponse(StreamingResponse):
    """A stream's answer, which frees the stream's slot however it ends: a client that goes before the stream's first
    message leaves a generator that never ran, whose own cleanup would never run."""

    def __init__(self, feed: LiveFeed, stream: _Stream):
        super().__init__(
            feed.follow(stream),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
        self.feed = feed
        self.stream = stream

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.feed.release(self.stream)


def _static(path: str) -> Response:
    name = path.rsplit("/", 1)[-1]
    suffix = name[name.rfind(".") :] if "." in name else ""
    resource = STATIC.joinpath(*path.split("/"))
    if suffix not in CONTENT_TYPES or ".." in path.split("/") or not resource.is_file():
        return Response(
            json.dumps({"error": {"code": "NotFound", "message": f"no file {path!r}"}}),
            status_code=404,
            media_type="application/json",
        )
    return Response(resource.read_bytes(), media_type=CONTENT_TYPES[suffix], headers={"cache-control": "no-cache"})


def dashboard_router(service: Maintenance, feed: LiveFeed, views: SurfaceViews | None = None) -> APIRouter:
    router = APIRouter()

    if views is not None:

        @router.get("/v1/ec2/instances/{instance_id}/metadata", tags=["ec2"], responses=ERRORS)
        async def instance_metadata(
            instance_id: str, path: str = Query(SCHEDULED_PATH, description="an instance metadata path")
        ) -> Response:
            """What the instance's metadata endpoint answers for ``path`` now, the same status and bytes (by default
            its scheduled events: ``/latest/meta-data/events/maintenance/scheduled``; a path it does not have: its
            404 page)."""
            service.catch_up()
            service.engine.component(Ec2Component).ec2_instance(instance_id)
            if not path.startswith("/"):
                raise Invalid(f"path must start with '/': {path!r}")
            status, body, content_type = views.ec2_metadata(instance_id, path)
            return Response(body, status_code=status, media_type=content_type)

        @router.get("/v1/ec2/instances/{instance_id}/status", tags=["ec2"], responses=ERRORS)
        async def instance_status(instance_id: str) -> Response:
            """The instance's item of DescribeInstanceStatus now (with IncludeAllInstances), as the EC2 API
            renders it: XML."""
            service.catch_up()
            service.engine.component(Ec2Component).ec2_instance(instance_id)
            return Response(views.ec2_status(instance_id), media_type="text/xml")

        @router.get("/v1/gce/instances/{name}/metadata", tags=["gce"], responses=ERRORS)
        async def gce_metadata(
            name: str, path: str = Query(MAINTENANCE_EVENT_PATH, description="a metadata server path")
        ) -> Response:
            """What the instance's metadata server answers for ``path`` now (a plain GET with ``Metadata-Flavor:
            Google``): the same status, bytes, content type and ``ETag`` (by default its maintenance-event; a path it
            does not have: its 404 page). Reading it here does not count as the instance asking for maintenance-event:
            it does not earn the instance the maintenance-event notice."""
            service.catch_up()
            service.engine.component(GcpComponent).gce_instance(name)
            if not path.startswith("/"):
                raise Invalid(f"path must start with '/': {path!r}")
            if views.gce_metadata is None:
                raise Invalid("this server has no Compute Engine metadata surface")
            status, body, content_type, tag = views.gce_metadata(name, path)
            return Response(body, status_code=status, media_type=content_type, headers={"etag": tag} if tag else None)

        @router.get("/v1/events/{event_id}/central", tags=["events"], responses=ERRORS)
        async def central(event_id: str) -> dict:
            """The event's row in Resource Graph's maintenanceresources as it is now (null when its VMs' policy does
            not publish centrally, or the ARM port is off)."""
            event_id = service.engine.component(AzureComponent).resolve_event_id(event_id)
            row = views.central_row(event_id) if views.central_row is not None else None
            return {"event_id": event_id, "resource_graph": row}

    @router.get("/", include_in_schema=False)
    async def page() -> Response:
        return _static("dashboard/index.html")

    @router.get("/static/{path:path}", include_in_schema=False)
    async def static(path: str) -> Response:
        if path.startswith("swagger/"):
            return swagger_file(path.removeprefix("swagger/"))
        return _static(path)

    fleet_read = FleetRead()

    @router.get("/v1/dashboard/fleet", tags=["dashboard"])
    async def fleet() -> Response:
        """Every machine and what it is going through, in columns (the dashboard's fleet view)."""
        service.catch_up()
        return Response(fleet_read.body(service), media_type="application/json")

    # Not in the OpenAPI document: a stream that never ends is no operation a schema-driven client can call.
    @router.get("/v1/dashboard/stream", include_in_schema=False)
    async def stream(request: Request):
        """Server-sent events: one ``data:`` line of JSON per committed batch of changes (``events``,
        ``ec2_events``, ``gce_events``, ``waves``, ``states`` of the machines touched, ``clock``; ``resync`` when the page should read
        the fleet again). A client that falls behind by more than 256 messages gets ``{"dropped": true}`` and is
        disconnected. At most 64 streams are open, 16 from one client address: 503 ``TooManyStreams`` beyond."""
        stream = feed.open(request.client.host if request.client else "")
        if isinstance(stream, str):
            return Response(
                json.dumps({"error": {"code": "TooManyStreams", "message": stream}}),
                status_code=503,
                media_type="application/json",
                headers={"retry-after": "5"},
            )
        return _StreamResponse(feed, stream)

    @router.get("/v1/dashboard/stats", tags=["dashboard"])
    async def stats() -> dict:
        """How the live stream is doing: open streams, messages sent, streams dropped for being slow."""
        return {"streams": len(feed.streams), "sent": feed.sent, "dropped": feed.dropped}

    return router


def docs_page(openapi_url: str) -> HTMLResponse:
    """Swagger UI from files this server serves (the ``fastapi-offline`` package's copy), not from a CDN. The page
    sends the control token the dashboard keeps for this origin, when there is one."""
    html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>forewarn control API</title>
<link rel="stylesheet" href="/static/swagger/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/static/swagger/swagger-ui-bundle.js"></script>
<script src="/static/dashboard/docs.js" data-openapi="{openapi_url}"></script>
</body></html>"""
    return HTMLResponse(html)


def swagger_file(name: str) -> Response:
    """A file of the Swagger UI distribution shipped by ``fastapi-offline`` (MIT)."""
    if name not in ("swagger-ui.css", "swagger-ui-bundle.js"):
        return _static(f"swagger/{name}")  # the 404 of any other name
    resource = resources.files("fastapi_offline") / "static" / name
    return Response(
        resource.read_bytes(),
        media_type=CONTENT_TYPES[name[name.rfind(".") :]],
        headers={"cache-control": "max-age=86400"},
    )
