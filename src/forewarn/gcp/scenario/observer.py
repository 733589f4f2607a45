"""What a scenario run records of Compute Engine's instances: a snapshot of each observed instance whenever what its
metadata server or the API shows changed (the maintenance-event value, the status, the host, preempted, the upcoming
window).

A client of the server, as Compute Engine's steps are: it reads the control API through the runner's client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from forewarn.scenario_steps import RunRecord, StepApi

JOURNAL_KIND = "gce "  # what the journal's entries about Compute Engine start with


class GceObserver:
    event_keys = ()  # its events are not in the timeline: an `event` check finds none of them

    def __init__(self) -> None:
        self.instances: dict[str, list[dict]] = {}
        self._changed = False
        self._last: dict[str, dict] = {}

    def begin(self, api: StepApi, machines: Sequence[str], observe: Sequence[str], every: bool) -> None:
        mine = set(machines)
        self.instances = {name: [] for name in (machines if every else observe) if name in mine}

    def note(self, entry: Mapping[str, Any]) -> None:
        if str(entry["what"]).startswith(JOURNAL_KIND):
            self._changed = True

    def observe(self, api: StepApi, run: RunRecord, everything: bool) -> None:
        changed, self._changed = self._changed, False
        if not self.instances or not (changed or everything):
            return
        for row in api.get("/v1/gce/instances"):
            if row["name"] in self.instances:
                self._observe(run, row)

    def _observe(self, run: RunRecord, row: dict) -> None:
        name = row["name"]
        upcoming = row.get("upcoming")
        snapshot = {
            "maintenance_event": row["maintenance_event"],
            "status": row["status"] + (" (deleted)" if row["deleted"] else ""),
            "host": row["host"],
            "preempted": row["preempted"],
            "upcoming": None if upcoming is None else upcoming["window_start"],
        }
        if self._last.get(name) == snapshot:
            return
        first = name not in self._last
        self._last[name] = snapshot
        self.instances[name].append({**run.stamp(), **snapshot})
        if not first:
            detail = f"{snapshot['maintenance_event']}, {snapshot['status']} on {snapshot['host']}"
            if snapshot["preempted"]:
                detail += ", preempted"
            if snapshot["upcoming"]:
                detail += f", upcoming maintenance at {snapshot['upcoming']}"
            run.line(name, "", detail)

    def quiet_until(self) -> tuple[bool, datetime | None]:
        """Unknown while instances are observed (a maintenance's notice, start and end are deadlines of their
        own); nothing to wait for otherwise."""
        return (False, None) if self.instances else (True, None)

    def finish(self, api: StepApi, start: datetime, journal: Mapping[str, list[dict]] | None) -> None:
        return None

    def timeline(self) -> dict[str, Any]:
        return {"gce_instances": self.instances}
