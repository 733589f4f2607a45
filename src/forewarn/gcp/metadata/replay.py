"""A Compute Engine metadata server's key replayed from a recording (``forewarn replay``): the metadata server's
request rules, each value with its recorded ETag, and ``wait_for_change`` hanging GETs answered when the replay
reaches the next value (or at their ``timeout_sec``, in recording time)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from urllib.parse import parse_qsl, urlsplit

from forewarn.cloud import Replaying
from forewarn.gcp.metadata.server import (
    COMMON_HEADERS,
    MAX_TIMEOUT,
    TEXT,
    bad_request,
    etag,
    header_refusal,
    not_found,
)
from forewarn.net.http import DROP, Deferred, Request, Response


class GceReplayHandler:
    """The recorded key of a Compute Engine metadata server (``GET /computeMetadata/v1/instance/maintenance-event``):
    the entry current at (clock() - start) * speed, with the metadata server's request rules and the recorded ETag
    (an entry recorded without one gets the digest forewarn's own metadata server uses). ``wait_for_change=true``
    with the current ETag (or none) hangs until another value is current, or ``timeout_sec`` of recording time."""

    def __init__(self, replay: Replaying, speed: float = 1.0, clock: Callable[[], float] = time.monotonic):
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
