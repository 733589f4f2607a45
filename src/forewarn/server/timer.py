"""The deadline timer of a real clock: due deadlines are applied when they fall due, not only at the next command."""

from __future__ import annotations

import asyncio
import logging
import time

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.control.models import let_go
from forewarn.core.changes import Change, Rebuilt

log = logging.getLogger("forewarn.server")


class DeadlineTimer:
    """For real clocks: wakes when the next deadline falls due, or when a command changes the deadlines."""

    def __init__(self, service: Maintenance):
        self.service = service
        self._wake = asyncio.Event()
        self._armed: float | None = None  # the due time the timer sleeps towards
        service.subscribe(self._changed)

    def _changed(self, changes: list[Change]) -> None:
        # Most commits (every approval group) leave the next deadline where it was: no need to wake and re-arm.
        if isinstance(changes[0], Rebuilt) or self.service.due_wall != self._armed:
            self._wake.set()

    async def run(self) -> None:
        while True:
            self._armed = self.service.due_wall
            delay = min(max(self._armed - time.time(), 0.0), 3600.0)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
                continue
            except TimeoutError:
                pass
            try:
                self.service.catch_up()
                rest = self.service.catching_up
                if rest is not None:  # deadlines to apply in parts: the next due time is known once they are
                    await let_go(await rest)
                elif (resetting := self.service.resetting) is not None:  # nothing is caught up until it ends
                    await asyncio.shield(resetting)
            except Unavailable as error:  # the database is out of reach: the deadlines are applied once it is back
                log.warning("applying due deadlines failed (%s); retrying in 1 s", error)
                await asyncio.sleep(1)
            except Exception:  # a store failure must not stop the timer; the service already rebuilt its engine
                log.exception("applying due deadlines failed; retrying in 1 s")
                await asyncio.sleep(1)
