"""What a scenario run records of EC2's instances: a snapshot of each observed instance (state, host, boot, Auto
Scaling lifecycle, Spot action, its scheduled events) whenever one changes, and at the end the run's EC2 events
and every instance (a replacement names the instance it replaces).

A client of the server, as EC2's steps are: it reads the control API through the runner's client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from forewarn.core.times import parse_time
from forewarn.scenario_steps import RunRecord, StepApi

# The journal's entries about EC2: by what they are, or by the instance they name.
JOURNAL_KINDS = ("ec2 ", "instance ", "notification ")
EVENT_FIELDS = ("event_id", "code", "state", "description", "not_before", "not_after", "not_before_deadline")


class Ec2Observer:
    event_keys = ("ec2_events",)

    def __init__(self) -> None:
        self.instances: dict[str, list[dict]] = {}
        self.every = False  # every instance, those that appear later (replacements) too
        self.events: list[dict] = []
        self.all_instances: list[dict] = []
        self.fleet_has_instances = False
        self._changed = False
        self._last: dict[str, dict] = {}

    @property
    def watching(self) -> bool:
        return bool(self.instances) or self.every

    def begin(self, api: StepApi, machines: Sequence[str], observe: Sequence[str], every: bool) -> None:
        mine = set(machines)
        self.instances = {name: [] for name in observe if name in mine}
        self.every = every and bool(mine)
        self.fleet_has_instances = bool(mine)

    def note(self, entry: Mapping[str, Any]) -> None:
        if str(entry["what"]).startswith(JOURNAL_KINDS) or "instance" in entry:
            self._changed = True

    def observe(self, api: StepApi, run: RunRecord, everything: bool) -> None:
        changed, self._changed = self._changed, False
        if not self.watching or not (changed or everything):
            return
        rows = api.get("/v1/ec2/instances")
        events = api.get("/v1/ec2/events", all="true")
        for row in rows:
            self._observe(run, row, events)

    def _observe(self, run: RunRecord, row: dict, events: list[dict]) -> None:
        iid = row["instance_id"]
        if iid not in self.instances:
            if not self.every:
                return
            self.instances[iid] = []
        snapshot = {
            "state": row["state"],
            "host": row["host"],
            "booted_at": row["booted_at"],
            "lifecycle_state": row["lifecycle_state"],
            "replaces": row["replaces"],
            "spot_action": row["spot_action"],
            "spot_action_time": row["spot_action_time"],
            "events": [{key: e[key] for key in EVENT_FIELDS} for e in events if e["instance_id"] == iid],
        }
        if self._last.get(iid) == snapshot:
            return
        self._last[iid] = snapshot
        version = len(self.instances[iid]) + 1
        self.instances[iid].append({**run.stamp(), "version": version, **snapshot})
        run.line(iid, f"v{version}", instance_summary(snapshot))

    def quiet_until(self) -> tuple[bool, datetime | None]:
        """Unknown while instances are watched (an event, a Spot action, a lifecycle hook can change one at any
        deadline); nothing to wait for otherwise."""
        return (False, None) if self.watching else (True, None)

    def finish(self, api: StepApi, start: datetime, journal: Mapping[str, list[dict]] | None) -> None:
        if not self.fleet_has_instances:
            return
        self.events = [e for e in api.get("/v1/ec2/events", all="true") if parse_time(e["created_at"]) >= start]
        self.all_instances = api.get("/v1/ec2/instances")

    def timeline(self) -> dict[str, Any]:
        return {"instances": self.instances, "ec2_events": self.events, "ec2_instances": self.all_instances}


def instance_summary(snapshot: dict) -> str:
    """A snapshot in one line of the run's output: state, host, Spot action, each event."""
    text = f"{snapshot['state']} on {snapshot['host']}"
    if snapshot.get("spot_action"):
        text += f"; spot {snapshot['spot_action']} at {snapshot['spot_action_time']}"
    for event in snapshot["events"]:
        text += f"; {event['code']} {event['state']} NotBefore {event['not_before']}"
    return text
