"""EC2's part of the conformance battery (docs/conformance.md): its cases (``cases.yaml`` beside this module) and
what only EC2's metadata says. Scheduled events carry an EventId in ``events/maintenance/scheduled``; a Spot
interruption and a rebalance recommendation have none, and are told by their own paths answering 200. EC2 has no
approval: the handler drains before NotBefore (or the Spot action's time)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from forewarn.conformance_cases import FAIL, NOT_JUDGED, PASS, CloudCases, EventState, Grade, ObserverWithoutApproval

if TYPE_CHECKING:
    from forewarn.conformance_cases import Call, Check, Observation

SPOT = "spot:"  # the id the battery gives a Spot interruption of an instance: spot:INSTANCE
REBALANCE = "rebalance:"
TOKEN_HEADER = "x-aws-ec2-metadata-token"
NOTICE_PATHS = {
    SPOT: ("spot/instance-action", "spot/termination-time"),
    REBALANCE: ("events/recommendations/rebalance",),
}


class Ec2Observer(ObserverWithoutApproval):
    live = frozenset({"active"})  # EC2 asks for no approval: after NotBefore, what happens is the platform's

    def event_ids(self, answer: Any) -> list[str]:
        if isinstance(answer, list):
            return [str(event["event_id"]) for event in answer if isinstance(event, dict) and "event_id" in event]
        if isinstance(answer, dict) and isinstance(answer.get("instances"), list):
            ids = []
            for instance in answer["instances"]:
                if instance.get("spot_action_time"):
                    ids.append(SPOT + instance["instance_id"])
                elif instance.get("rebalance_at"):
                    ids.append(REBALANCE + instance["instance_id"])
            return ids
        return []

    def seen(self, call: Call, event_id: str) -> bool:
        for prefix, paths in NOTICE_PATHS.items():
            if event_id.startswith(prefix):
                return call.status == 200 and any(path in call.path for path in paths)
        return event_id.encode() in call.answer

    def event_states(
        self, client: Any, event_ids: Sequence[str], seconds_since_start: Callable[[str], float]
    ) -> dict[str, EventState]:
        states = {}
        events = self.listed_events(client, "/v1/ec2/events")
        for event_id in event_ids:
            if event_id.startswith((SPOT, REBALANCE)):
                instance_id = event_id.split(":", 1)[1]
                instance = client.call("GET", f"/v1/ec2/instances/{instance_id}")
                when = instance.get("spot_action_time") if event_id.startswith(SPOT) else None
                live = instance.get("state") == "running" and (when is not None or event_id.startswith(REBALANCE))
                status = "active" if live else "over"
                states[event_id] = EventState(
                    event_id, status, [instance_id], seconds_since_start(when) if when else None, []
                )
                continue
            event = events[event_id]
            not_before = event.get("not_before")
            states[event_id] = EventState(
                event_id,
                str(event["state"]),
                [event["instance_id"]],
                seconds_since_start(not_before) if not_before else None,
                [],
            )
        return states

    def checks(self) -> Mapping[str, Callable[[Observation, Check], Grade]]:
        return {"imdsv2": imdsv2}


def imdsv2(obs: Observation, check: Check) -> Grade:
    """Every metadata read carries an IMDSv2 session token (the instance may require it)."""
    reads = [call for call in obs.calls if call.method == "GET"]
    if not reads:
        return Grade("imdsv2", NOT_JUDGED, "the handler read no metadata")
    without = [call for call in reads if TOKEN_HEADER not in call.headers]
    if without:
        first = without[0]
        return Grade("imdsv2", FAIL, f"{len(without)} of {len(reads)} reads had no token (first: {first.path})")
    return Grade("imdsv2", PASS, f"all {len(reads)} reads carried a session token")


def cases() -> CloudCases:
    return CloudCases("aws", [resources.files(__name__) / "cases.yaml"], Ec2Observer())
