"""Compute Engine's part of the conformance battery (docs/conformance.md): its cases (``cases.yaml`` beside this
module) and what only its metadata server says. Maintenance carries no id in the metadata: a handler was told when
``instance/maintenance-event`` answered something other than ``NONE`` (or ``instance/upcoming-maintenance``
answered at all, for maintenance announced ahead); a preemption when ``instance/preempted`` answered ``TRUE``.
Compute Engine asks no approval."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from forewarn.conformance_cases import FAIL, NOT_JUDGED, PASS, CloudCases, EventState, Grade, ObserverWithoutApproval
from forewarn.core.words import counted

if TYPE_CHECKING:
    from forewarn.conformance_cases import Call, Check, Observation

PREEMPTED = "preempted:"  # the id the battery gives a preemption of an instance: preempted:NAME
UPCOMING = "upcoming:"  # maintenance announced ahead, by its event id
MAINTENANCE_EVENT = "/instance/maintenance-event"


class GceObserver(ObserverWithoutApproval):
    live = frozenset({"notified", "upcoming", "scheduled", "pending"})

    def event_ids(self, answer: Any) -> list[str]:
        if isinstance(answer, list):
            return [
                (UPCOMING if event.get("announced") else "") + str(event["event_id"])
                for event in answer
                if isinstance(event, dict) and "event_id" in event
            ]
        if isinstance(answer, dict) and isinstance(answer.get("instances"), list):
            return [PREEMPTED + i["name"] for i in answer["instances"] if isinstance(i, dict) and i.get("preempted")]
        return []

    def seen(self, call: Call, event_id: str) -> bool:
        path = urlsplit(call.path).path
        if call.status != 200:
            return False
        if event_id.startswith(PREEMPTED):
            return path.endswith("/instance/preempted") and call.answer.strip() == b"TRUE"
        if event_id.startswith(UPCOMING):
            return path.endswith("/instance/upcoming-maintenance")
        return path.endswith(MAINTENANCE_EVENT) and call.answer.strip() not in (b"NONE", b"")

    def event_states(
        self, client: Any, event_ids: Sequence[str], seconds_since_start: Callable[[str], float]
    ) -> dict[str, EventState]:
        states = {}
        events = self.listed_events(client, "/v1/gce/maintenance")
        for event_id in event_ids:
            if event_id.startswith(PREEMPTED):
                name = event_id.removeprefix(PREEMPTED)
                instance = client.call("GET", f"/v1/gce/instances/{name}")
                status = "over" if instance["status"] == "TERMINATED" else "notified"
                states[event_id] = EventState(event_id, status, [name], None, [])
                continue
            event = events[event_id.removeprefix(UPCOMING)]
            start = event.get("window_start")
            when = seconds_since_start(start) if start else None
            states[event_id] = EventState(event_id, str(event["state"]), [event["instance"]], when, [])
        return states

    def checks(self) -> Mapping[str, Callable[[Observation, Check], Grade]]:
        return {"wait_for_change": wait_for_change}


def wait_for_change(obs: Observation, check: Check) -> Grade:
    """The handler waits on maintenance-event with ``wait_for_change=true`` (the metadata server answers when the
    value changes) rather than polling it."""
    reads = [call for call in obs.calls if urlsplit(call.path).path.endswith(MAINTENANCE_EVENT)]
    if not reads:
        return Grade("wait_for_change", NOT_JUDGED, "the handler never read maintenance-event")
    waiting = [call for call in reads if parse_qs(urlsplit(call.path).query).get("wait_for_change") == ["true"]]
    if not waiting:
        return Grade(
            "wait_for_change", FAIL, f"{counted(len(reads), 'read')} of maintenance-event, none with wait_for_change"
        )
    return Grade("wait_for_change", PASS, f"{len(waiting)} of {counted(len(reads), 'read')} waited for a change")


def cases() -> CloudCases:
    return CloudCases("gcp", [resources.files(__name__) / "cases.yaml"], GceObserver())
