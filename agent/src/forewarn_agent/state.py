"""What the agent did about each event, in one small JSON file written safely (a new file, flushed to disk, renamed
over the old one): after a crash or a kill -9 it resumes, and a hook that completed does not run again."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from typing import Any, Dict, Optional

VERSION = 1
KEEP_DONE = 24 * 3600.0  # how long a finished event is remembered (an event id that came back would be acted on again)


class StateFile:
    def __init__(self, path: Optional[str]):
        self.path = path
        self.lock = threading.RLock()  # the status server reads while the loop writes
        self.events: Dict[str, Dict[str, Any]] = {}
        self.memory: Dict[str, Any] = {}  # a watcher's own (Compute Engine's occurrence numbering)
        if path and os.path.exists(path):
            self._load(path)

    def _load(self, path: str) -> None:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
        if data.get("version") != VERSION:
            raise ValueError(f"{path}: state version {data.get('version')!r}, this agent writes {VERSION}")
        self.events = data.get("events", {})
        self.memory = data.get("memory", {})

    def save(self) -> None:
        if not self.path:
            return
        with self.lock:
            text = json.dumps({"version": VERSION, "events": self.events, "memory": self.memory}, indent=1)
        directory = os.path.dirname(os.path.abspath(self.path))
        handle, temporary = tempfile.mkstemp(prefix=".forewarn-agent-", dir=directory)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)  # the rename itself, durable
        finally:
            os.close(descriptor)

    def record(self, key: str) -> Optional[Dict[str, Any]]:
        return self.events.get(key)

    def open_records(self) -> Dict[str, Dict[str, Any]]:
        with self.lock:
            return {key: record for key, record in self.events.items() if not record.get("done")}

    def forget_old(self, now: float) -> None:
        with self.lock:
            for key in [k for k, r in self.events.items() if r.get("done") and now - r.get("done_at", now) > KEEP_DONE]:
                del self.events[key]

    def drained(self, event_id: str) -> bool:
        """Whether this machine's drain of ``event_id`` completed (what its peers ask)."""
        with self.lock:
            return any(r.get("event_id") == event_id and r.get("drain") == "done" for r in self.events.values())

    def snapshot(self) -> Dict[str, Any]:
        with self.lock:
            copy: Dict[str, Any] = json.loads(json.dumps(self.events))
            return copy


def now() -> float:
    return time.time()
