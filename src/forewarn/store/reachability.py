"""What a process reports about its database (``/healthz``, ``forewarn_database_reachable``): the outcome of the
latest real operation on it, a commit, a read or a probe, never a flag left from an earlier failure."""

from __future__ import annotations

import threading
import time
from typing import Any


class Reachability:
    """The outcome of the latest real operation on the database (a commit, a read, a probe): reachable or not, why,
    and since when. ``stale``: the process lost the writer's lock to another and writes no more, for good."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reachable = True
        self.error = ""
        self.stale = ""
        self.since = time.monotonic()

    def succeeded(self) -> None:
        if self.reachable:
            return  # the usual case: nothing to write
        with self._lock:
            self.reachable, self.error, self.since = True, "", time.monotonic()

    def failed(self, error: object) -> None:
        with self._lock:
            if self.reachable:
                self.since = time.monotonic()
            self.reachable, self.error = False, " ".join(str(error).split())

    def lost_writer(self, message: str) -> None:
        with self._lock:
            self.stale = message

    def report(self) -> dict[str, Any]:
        """What ``/healthz`` shows under ``database``."""
        report: dict[str, Any] = {
            "reachable": self.reachable,
            "error": self.error,
            "for_seconds": round(time.monotonic() - self.since, 1),
        }
        if self.stale:
            report["stale"] = self.stale
        return report
