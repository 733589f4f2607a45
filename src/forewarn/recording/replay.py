"""Replay: the entry current at an offset, and an IMDS scheduled-events handler that serves it.

The handler is the synchronous kind ``server/http1.py`` runs; its time is a function (``clock``, monotonic
seconds), so tests drive it with a fake one. A recording cannot react: approvals are answered and logged, and change
nothing of what is served.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime

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
from forewarn.net.http import DROP, JSON, Request, Response
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


async def serve_replay(handler: ReplayHandler, sock: socket.socket, stop: asyncio.Event | None = None) -> None:
    """Serve ``handler`` on ``sock`` until ``stop`` is set (forever without one)."""
    server = Http1Server(handler.handle)
    await server.start([sock])
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await server.close()
