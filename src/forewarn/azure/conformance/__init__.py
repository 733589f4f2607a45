"""Azure's part of the conformance battery (docs/conformance.md): its cases (``cases.yaml`` beside this module) and
what only Azure's metadata says: an approval is a POST of ``StartRequests`` to /metadata/scheduledevents."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any

from forewarn.conformance.model import Approval, Call, Check, CloudCases, EventState, Grade, Observation

SCHEDULED_EVENTS = "/metadata/scheduledevents"


class AzureObserver:
    def event_ids(self, answer: Any) -> list[str]:
        events = answer.get("events", []) if isinstance(answer, dict) else answer
        if not isinstance(events, list):
            return []
        return [str(event["event_id"]) for event in events if isinstance(event, dict) and "event_id" in event]

    def seen(self, call: Call, event_id: str) -> bool:
        return event_id.encode() in call.answer

    def checks(self) -> Mapping[str, Callable[[Observation, Check], Grade]]:
        return {}

    def approvals(self, calls: Sequence[Call]) -> list[Approval]:
        found = []
        for call in calls:
            if call.method != "POST" or not call.path.startswith(SCHEDULED_EVENTS) or call.status != 200:
                continue
            try:
                requests = json.loads(call.body or b"{}").get("StartRequests", [])
            except (ValueError, AttributeError):
                continue
            found += [Approval(call.machine, call.at, str(r.get("EventId"))) for r in requests if isinstance(r, dict)]
        return found

    def event_states(
        self, client: Any, event_ids: Sequence[str], seconds_since_start: Callable[[str], float]
    ) -> dict[str, EventState]:
        states = {}
        for event_id in event_ids:
            event = client.call("GET", f"/v1/events/{event_id}")
            not_before = event.get("not_before")
            states[event_id] = EventState(
                event_id,
                str(event["status"]),
                list(event.get("resources", [])),
                seconds_since_start(not_before) if not_before else None,
                list(event.get("approvals", [])),
            )
        return states

    def settled(self, states: Mapping[str, EventState], now: float) -> bool:
        return all(state.status != "Scheduled" for state in states.values())


def cases() -> CloudCases:
    return CloudCases("azure", [resources.files(__name__) / "cases.yaml"], AzureObserver())
