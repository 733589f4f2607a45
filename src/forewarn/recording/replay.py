"""Replay: the entry of a recording current at an offset, and a server of it.

Each cloud serves a recording of its own metadata surface, with that surface's request rules
(``Cloud.replay_handler``): Azure's scheduled events, a Compute Engine instance's maintenance-event. This module
keeps the time and finds the cloud.
"""

from __future__ import annotations

import asyncio
import bisect
import socket
from collections.abc import Callable

from forewarn.cloud import RecordingServer, registered
from forewarn.recording.model import Entry, Recording
from forewarn.server.http1 import Http1Server


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


def replay_handler(
    replay: Replay, speed: float = 1.0, on_approval: Callable[[dict], None] | None = None
) -> RecordingServer:
    """The handler of the cloud whose metadata surface the recording is of (``Recording.source``), at ``speed``
    recorded seconds per wall second; ``on_approval``: told of each approval, where the surface takes approvals."""
    for cloud in registered():
        handler = cloud.replay_handler(replay, speed, on_approval)
        if handler is not None:
            return handler
    raise ValueError(f"no registered cloud serves a recording of {replay.recording.source!r}")


async def serve_replay(handler: RecordingServer, sock: socket.socket, stop: asyncio.Event | None = None) -> None:
    """Serve ``handler`` on ``sock`` until ``stop`` is set (forever without one)."""
    server = Http1Server(handler.handle)
    await server.start([sock])
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await server.close()
