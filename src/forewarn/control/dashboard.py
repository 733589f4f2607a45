"""The dashboard's side of the control API: the page and its scripts, the fleet in one compact read, and the live
stream of committed changes (server-sent events).

The page is plain files shipped in the package (``control/static/``), served from here: no build step, nothing
loaded from the internet. Every action the page takes is a request to the control API itself; this module only
adds reads. Each cloud gives its part through its panel (``Cloud.dashboard_panel``): its machines and their
states, its events, and the routes that show what its other surfaces answer. The stream is fed by the same listener hook the IMDS read models use (``Maintenance.subscribe``): a
listener turns each committed batch into one small message (the events, waves and machines it touched, and the
clock) and offers it to every open stream. Each stream has a bounded queue; a client too slow to drain it is cut
off (it reconnects and reads the fleet afresh), so a page left open for hours holds nothing that grows. Streams are
few (a page holds one): at most so many in all and per client address, each freed when its client goes, falls
behind, or takes nothing of what it is sent for the port's send timeout (the server's ``UvicornGuard``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from forewarn.app.runtime import Maintenance
from forewarn.cloud import DashboardPanel, MachineState, Touched, registered
from forewarn.control.waves import WaveOut
from forewarn.core.changes import Change, Rebuilt
from forewarn.core.clock import MANUAL
from forewarn.core.times import format_optional_time, format_time
from forewarn.core.words import counted
from forewarn.waves.component import WaveChanged

if TYPE_CHECKING:
    from forewarn.engine.engine import Engine

# The fleet view's names of the machine states, the page's list (its codes are their indexes).
STATE_NAMES = list(MachineState.NAMES)

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


@functools.cache
def panels() -> tuple[DashboardPanel, ...]:
    """Each registered cloud's part of the dashboard, but those of the clouds that have none (the page shows none of
    their machines); a machine's cloud in the fleet view is its index here."""
    return tuple(panel for cloud in registered() if (panel := cloud.dashboard_panel()) is not None)


@functools.cache
def noting() -> dict[type, tuple[int, Callable[[Any, Touched], None]]]:
    """Each kind of change a cloud's panel tells of: the panel's index, and how the change marks what it touched."""
    return {kind: (index, note) for index, panel in enumerate(panels()) for kind, note in panel.noting().items()}


def clock_json(service: Maintenance) -> dict[str, Any]:
    view = service.clock_view()
    return {
        "mode": "manual" if view.mode == MANUAL else "real",
        "speed": view.speed,
        "now": format_time(view.now),
        "next_deadline": format_optional_time(view.next_deadline),
    }


class FleetRead:
    """Every machine in columns (name, cloud, host, set, zone, update domain, state; host, set and zone as indexes
    into string tables), and the labels of the few machines known by another name (an EC2 instance's Name tag): about 36 bytes a machine, so 100,000 VMs are one read of under 4 MB. What never changes
    while serving (names, sets, zones, domains) is encoded once; hosts (a redeploy moves a VM) and states each time."""

    def __init__(self) -> None:
        self._key: tuple[int, tuple[int, ...]] | None = None
        self._order: list[tuple[int, str]] = []  # (cloud, name) in column order
        self._fixed = ""  # the JSON of the fixed columns and tables, without braces

    def _encode_fixed(self, engine: Engine) -> None:
        sets: dict[str, int] = {}
        zones: dict[str, int] = {}
        columns: dict[str, list] = {"name": [], "cloud": [], "set": [], "zone": [], "domain": []}
        labels: dict[str, str] = {}  # only the machines that have one: most have none
        order: list[tuple[int, str]] = []
        for cloud, panel in enumerate(panels()):
            for row in panel.machines(engine):
                order.append((cloud, row.name))
                if row.label and row.label != row.name:
                    labels[row.name] = row.label
                columns["name"].append(row.name)
                columns["cloud"].append(cloud)
                columns["set"].append(sets.setdefault(row.group, len(sets)))
                columns["zone"].append(zones.setdefault(row.zone, len(zones)))
                columns["domain"].append(row.update_domain)
        encode = json.JSONEncoder(separators=(",", ":")).encode
        self._order = order
        self._fixed = (
            f'"sets":{encode(list(sets))},"zones":{encode(list(zones))},"labels":{encode(labels)},"machines":{{'
            + ",".join(f'"{name}":{encode(values)}' for name, values in columns.items())
        )

    def body(self, service: Maintenance) -> str:
        engine = service.settled_engine()
        # A cloud's machines can change while serving (an Auto Scaling replacement adds an instance).
        key = (id(engine.fleet), tuple(panel.machine_count(engine) for panel in panels()))
        if key != self._key:
            self._encode_fixed(engine)
            self._key = key
        hosts = {name: n for n, name in enumerate(engine.fleet.hosts)}
        codes = [panel.states(engine) for panel in panels()]
        host_of = [panel.host_of(engine) for panel in panels()]
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


def touched_by(changes: list[Change]) -> tuple[list[Touched], dict[str, Any]]:
    """What a batch touched of each cloud (by its panel's index), and the waves it changed."""
    touched = [Touched() for _ in panels()]
    waves: dict[str, Any] = {}
    table = noting()
    for change in changes:
        found = table.get(type(change))
        if found is not None:
            index, note = found
            note(change, touched[index])
        elif isinstance(change, WaveChanged):
            waves[change.wave.wave_id] = change.wave
    return touched, waves


def change_message(service: Maintenance, changes: list[Change]) -> dict[str, Any]:
    """One committed batch as the page needs it: touched events, waves and machines' new states, and the clock."""
    if isinstance(changes[0], Rebuilt):
        return {"resync": True, "reason": changes[0].cause, "clock": clock_json(service)}
    engine = service.settled_engine()
    touched, waves = touched_by(changes)
    if (
        sum(len(part.events) for part in touched) > MAX_ITEMS_PER_MESSAGE
        or sum(len(part.machines) for part in touched) > MAX_ITEMS_PER_MESSAGE
    ):
        return {
            "resync": True,
            "reason": f"{counted(len(changes), 'change')} in one step",
            "clock": clock_json(service),
        }
    message: dict[str, Any] = {
        panel.events_key: [panel.event_json(event) for event in part.events.values()]
        for panel, part in zip(panels(), touched, strict=True)
    }
    states: dict[str, int] = {}
    for panel, part in zip(panels(), touched, strict=True):
        states.update(panel.states(engine, part.machines))
    return {
        **message,
        "waves": [WaveOut.of(wave).model_dump() for wave in waves.values()],
        "states": states,
        # a machine the page has not seen (an Auto Scaling replacement): it reads the fleet again
        "resync": any(panel.unseen(engine, part.machines) for panel, part in zip(panels(), touched, strict=True)),
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
        for panel in panels():
            router.include_router(panel.views_router(service, views))

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
