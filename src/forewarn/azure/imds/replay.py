"""Azure's scheduled-events endpoint replayed from a recording (``forewarn replay``): the document recorded for the
current moment, with the request rules of forewarn's strict IMDS profile. A recording cannot react: approvals are
answered and logged, and change nothing of what is served.

The handler is the synchronous kind ``server/http1.py`` runs; its time is a function (``clock``, monotonic
seconds), so tests drive it with a fake one.
"""

from __future__ import annotations

import logging
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
from forewarn.cloud import RecordedAnswer, Replaying
from forewarn.net.http import DROP, JSON, Request, Response

log = logging.getLogger("forewarn.replay")

PATH = "/metadata/scheduledevents"


def _json(status: int, body: bytes, *extra: tuple[bytes, bytes]) -> Response:
    return (status, body, JSON, extra)


class ReplayHandler:
    """``GET /metadata/scheduledevents``: the entry current at (clock() - start) * speed, with the request rules of
    forewarn's strict IMDS profile; ``POST``: approvals, answered 200 and passed to ``on_approval``."""

    def __init__(
        self,
        replay: Replaying,
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
        self.path = PATH
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

    def _approve(self, request: Request, offset: float, entry: RecordedAnswer) -> Response:
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
