"""Replay: the entry current at an offset, and an IMDS scheduled-events handler that serves it.

The handler is the synchronous kind ``server/http1.py`` runs; its time is a function (``clock``, monotonic
seconds), so tests drive it with a fake one. A recording cannot react: approvals are answered and logged, and change
nothing of what is served.

A Compute Engine recording is served by :class:`GceReplayHandler`: the metadata server's request rules, each value
with its recorded ETag, and ``wait_for_change`` hanging GETs answered when the replay reaches the next value (or at
their ``timeout_sec``, in recording time).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlsplit

from forewarn.azure.imds.errors import METHOD_NOT_ALLOWED, NOT_FOUND
from forewarn.azure.imds.scheduled_events import (
    ALLOW_GET_POST,
    BAD_START_REQUESTS,
    NEWEST_SCHEDULED_EVENTS_VERSIONS,
    SCHEDULED_EVENTS_VERSIONS,
    parse_query,
    parse_start_requests,
    refusal,
)
from forewarn.gcp.metadata.server import (
    COMMON_HEADERS,
    MAX_TIMEOUT,
    TEXT,
    bad_request,
    etag,
    header_refusal,
    not_found,
)
from forewarn.net.http import DROP, JSON, Deferred, Request, Response
from forewarn.recording.model import Entry, Recording
from forewarn.server.http1 import Http1Server

log = logging.getLogger("forewarn.replay")

PATH = "/metadata/scheduledevents"


class Replay:
    """Which recorded entry is current at an offset (seconds of recording time since it started).

    Before the first entry's offset the first entry is current; after the last, the last stays current, or with
    ``loop`` the recording starts over after one more interval (the last document is held for one poll)."""

    def __init__(self, recording: Recording, loop: bool = False):
        if not recording.entries:
            raise ValueError("a recording without entries cannot be replayed")
        self.recording = recording
        self.entries = recording.entries
        self._offsets = [entry.offset_seconds for entry in self.entries]
        self.loop = loop
        self.period = self._offsets[-1] + recording.interval_seconds

    def entry_at(self, offset_seconds: float) -> Entry:
        if self.loop and offset_seconds >= self.period > 0:
            offset_seconds %= self.period
        index = bisect.bisect_right(self._offsets, offset_seconds) - 1
        return self.entries[max(index, 0)]

    def next_change(self, offset_seconds: float) -> float | None:
        """The offset after ``offset_seconds`` at which another entry becomes current (None: the last entry stays)."""
        base = 0.0
        if self.loop and offset_seconds >= self.period > 0:
            base = offset_seconds - offset_seconds % self.period
            offset_seconds %= self.period
        index = bisect.bisect_right(self._offsets, offset_seconds)
        if index < len(self._offsets):
            return base + self._offsets[index]
        return base + self.period if self.loop and self.period > 0 else None

    def document_at(self, offset_seconds: float) -> tuple[int, bytes]:
        """The status and exact bytes served at ``offset_seconds``."""
        entry = self.entry_at(offset_seconds)
        return entry.status, entry.body.encode("utf-8")


def _json(status: int, body: bytes, *extra: tuple[bytes, bytes]) -> Response:
    return (status, body, JSON, extra)


class ReplayHandler:
    """``GET /metadata/scheduledevents``: the entry current at (clock() - start) * speed, with the request rules of
    forewarn's strict IMDS profile; ``POST``: approvals, answered 200 and passed to ``on_approval``."""

    def __init__(
        self,
        replay: Replay,
        speed: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_approval: Callable[[dict], None] | None = None,
    ):
        if speed <= 0:
            raise ValueError("the speed must be positive")
        self.replay = replay
        self.speed = speed
        self.clock = clock
        self.wall = wall
        self.on_approval = on_approval
        self.approvals: list[dict] = []
        self.started = clock()
        # One Response per entry, so the server caches each entry's wire bytes.
        self._responses = {
            id(entry): (
                (DROP, b"", JSON, ()) if entry.status == DROP else _json(entry.status, entry.body.encode("utf-8"))
            )
            for entry in replay.entries
        }

    def offset(self) -> float:
        return (self.clock() - self.started) * self.speed

    def handle(self, request: Request) -> Response:
        if request.path != PATH:
            return _json(404, NOT_FOUND)
        if request.method not in ("GET", "POST"):
            return _json(405, METHOD_NOT_ALLOWED, ALLOW_GET_POST)
        # forewarn's strict IMDS checks, the same function its own endpoint uses.
        refused = refusal(
            request, parse_query(request.query), SCHEDULED_EVENTS_VERSIONS, NEWEST_SCHEDULED_EVENTS_VERSIONS
        )
        if refused is not None:
            return _json(400, refused)
        offset = self.offset()
        entry = self.replay.entry_at(offset)
        if request.method == "POST":
            return self._approve(request, offset, entry)
        return self._responses[id(entry)]

    __call__ = handle

    def _approve(self, request: Request, offset: float, entry: Entry) -> Response:
        event_ids = parse_start_requests(request.body)
        if event_ids is None:
            return _json(400, BAD_START_REQUESTS)
        shown = {str(e.get("EventId", "")).upper() for e in entry.events() or [] if isinstance(e, dict)}
        approval = {
            "at": self.wall().astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "offset_seconds": round(offset, 3),
            "caller": f"{request.peer[0]}:{request.peer[1]}",
            "event_ids": event_ids,
            "not_in_document": [event_id for event_id in event_ids if event_id not in shown],
        }
        self.approvals.append(approval)
        if self.on_approval is not None:
            try:
                self.on_approval(approval)
            except Exception:  # a full disk must not turn an approval into a 500
                log.exception("logging an approval failed")
        return _json(200, b"")


async def serve_replay(
    handler: ReplayHandler | GceReplayHandler, sock: socket.socket, stop: asyncio.Event | None = None
) -> None:
    """Serve ``handler`` on ``sock`` until ``stop`` is set (forever without one)."""
    server = Http1Server(handler.handle)
    await server.start([sock])
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await server.close()


class GceReplayHandler:
    """The recorded key of a Compute Engine metadata server (``GET /computeMetadata/v1/instance/maintenance-event``):
    the entry current at (clock() - start) * speed, with the metadata server's request rules and the recorded ETag
    (an entry recorded without one gets the digest forewarn's own metadata server uses). ``wait_for_change=true``
    with the current ETag (or none) hangs until another value is current, or ``timeout_sec`` of recording time."""

    def __init__(self, replay: Replay, speed: float = 1.0, clock: Callable[[], float] = time.monotonic):
        if speed <= 0:
            raise ValueError("the speed must be positive")
        self.replay = replay
        self.speed = speed
        self.clock = clock
        self.started = clock()
        self.path = urlsplit(replay.recording.url).path
        self.waiting: dict[Deferred, asyncio.TimerHandle] = {}
        self._responses: dict[int, Response] = {}
        for entry in replay.entries:
            body = entry.body.encode("utf-8")
            if entry.status == DROP:
                answer: Response = (DROP, b"", TEXT, ())
            elif entry.status == 200:
                tag = entry.etag.encode() if entry.etag else etag(body)
                answer = (200, body, TEXT, ((b"etag", tag), *COMMON_HEADERS))
            else:
                answer = (entry.status, body, TEXT, COMMON_HEADERS)
            self._responses[id(entry)] = answer

    def offset(self) -> float:
        return (self.clock() - self.started) * self.speed

    def current(self) -> Response:
        return self._responses[id(self.replay.entry_at(self.offset()))]

    def handle(self, request: Request) -> Response | Deferred:
        refused = header_refusal(request)
        if refused is not None:
            return refused
        if request.path != self.path:
            return not_found(request.path)
        answer = self.current()
        query = dict(parse_qsl(request.query.decode("latin-1"), keep_blank_values=True))
        if query.get("wait_for_change", "false").lower() != "true" or answer[0] != 200:
            return answer if request.method == "GET" else (answer[0], b"", answer[2], answer[3])
        last = query.get("last_etag")
        if last is not None and last.encode() != _tag(answer):
            return answer
        timeout = query.get("timeout_sec")
        seconds = float(MAX_TIMEOUT)
        if timeout is not None:
            if not timeout.isdigit() or int(timeout) < 1:
                return bad_request(f"Invalid value for timeout_sec: {timeout}")
            seconds = float(min(int(timeout), MAX_TIMEOUT))
        deferred = Deferred(on_cancel=self._forget)
        self._wait(deferred, _tag(answer), self.offset() + seconds)
        return deferred

    __call__ = handle

    def _wait(self, deferred: Deferred, tag: bytes | None, until: float) -> None:
        """Sleep until the next entry boundary or the deadline (recording offsets), then answer if the value moved."""
        now = self.offset()
        answer = self.current()
        if _tag(answer) != tag or now >= until:
            self.waiting.pop(deferred, None)
            deferred.resolve(answer)
            return
        boundary = self.replay.next_change(now)
        wake = until if boundary is None else min(boundary, until)
        delay = max(0.0, (wake - now) / self.speed) + 0.001  # past the boundary, not on it
        self.waiting[deferred] = asyncio.get_running_loop().call_later(delay, self._wait, deferred, tag, until)

    def _forget(self, deferred: Deferred) -> None:
        timer = self.waiting.pop(deferred, None)
        if timer is not None:
            timer.cancel()


def _tag(answer: Response) -> bytes | None:
    return next((value for name, value in answer[3] if name == b"etag"), None)
