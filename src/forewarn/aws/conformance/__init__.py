"""EC2's part of the conformance battery (docs/conformance.md): its cases (``cases.yaml`` beside this module) and
what only EC2's metadata says. Scheduled events carry an EventId in ``events/maintenance/scheduled``; a Spot
interruption and a rebalance recommendation have none, and are told by their own paths answering 200. EC2 has no
approval: the handler drains before NotBefore (or the Spot action's time)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any

from forewarn.conformance_cases import FAIL, NOT_JUDGED, PASS, CloudCases, EventState, Grade, ObserverWithoutApproval

if TYPE_CHECKING:
    from forewarn.conformance_cases import Call, Check, Observation

SPOT = "spot:"  # the id the battery gives a Spot interruption of an instance: spot:INSTANCE
REBALANCE = "rebalance:"
LIFECYCLE = "lifecycle:"  # an Auto Scaling group's termination of an instance, held by a lifecycle hook
TERMINATING = re.compile(r"<Description>Terminating EC2 instance: (i-[0-9a-f]+)</Description>")
TOKEN_HEADER = "x-aws-ec2-metadata-token"
NOTICE_PATHS = {
    SPOT: ("spot/instance-action", "spot/termination-time"),
    REBALANCE: ("events/recommendations/rebalance",),
}


class Ec2Observer(ObserverWithoutApproval):
    live = frozenset({"active"})  # EC2 asks for no approval: after NotBefore, what happens is the platform's

    def event_ids(self, answer: Any) -> list[str]:
        if isinstance(answer, str):  # the Auto Scaling API's TerminateInstanceInAutoScalingGroup
            return [LIFECYCLE + instance_id for instance_id in TERMINATING.findall(answer)]
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
        if event_id.startswith(LIFECYCLE):
            return "autoscaling/target-lifecycle-state" in call.path and call.answer.strip() == b"Terminated"
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
            if event_id.startswith(LIFECYCLE):
                instance_id = event_id.removeprefix(LIFECYCLE)
                instance = client.call("GET", f"/v1/ec2/instances/{instance_id}")
                status = "active" if instance.get("state") == "running" else "over"
                states[event_id] = EventState(event_id, status, [instance_id], None, [])
                continue
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
            not_before, ended = event.get("not_before"), event.get("ended_at")
            states[event_id] = EventState(
                event_id,
                str(event["state"]),
                [event["instance_id"]],
                seconds_since_start(not_before) if not_before else None,
                [],
                seconds_since_start(ended) if ended else None,
            )
        return states

    def checks(self) -> Mapping[str, Callable[[Observation, Check], Grade]]:
        return {
            "imdsv2": imdsv2,
            "noticed_reschedule": noticed_reschedule,
            "restored_after_completed": restored_after_completed,
        }


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


def not_befores(call: Call) -> set[datetime]:
    """The NotBefore of each event in a scheduled-events answer (IMDS writes ``1 Jan 2021 02:00:00 GMT``)."""
    if call.status != 200 or "events/maintenance/scheduled" not in call.path:
        return set()
    try:
        events = json.loads(call.answer)
        return {
            datetime.strptime(str(event["NotBefore"]), "%d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
            for event in events
            if isinstance(event, dict) and "NotBefore" in event
        }
    except (ValueError, TypeError):
        return set()


def noticed_reschedule(obs: Observation, check: Check) -> Grade:
    """Each machine read the event's new NotBefore within ``within`` seconds of the reschedule."""
    within = float(check.options.get("within", 5.0))
    moved = [(at, answer) for at, call, answer in obs.steps_done if call.rstrip("/").endswith("/reschedule")]
    if not moved:
        return Grade("noticed_reschedule", FAIL, "the case rescheduled nothing (its step was refused)")
    at, answer = moved[-1]
    new = datetime.fromisoformat(str(answer["not_before"]).replace("Z", "+00:00"))
    for machine in obs.case.machines:
        read = [c.done for c in obs.calls if c.machine == machine and c.done >= at and new in not_befores(c)]
        if not read:
            return Grade("noticed_reschedule", FAIL, f"{machine} never read the new NotBefore ({answer['not_before']})")
        if read[0] - at > within:
            reason = (
                f"{machine} read the new NotBefore {read[0] - at:.1f} s after the reschedule (at most {within:g} s)"
            )
            return Grade("noticed_reschedule", FAIL, reason)
    return Grade("noticed_reschedule", PASS, f"the new NotBefore was read within {within:g} s of the reschedule")


def restored_after_completed(obs: Observation, check: Check) -> Grade:
    """The events completed, and each machine they name was back in service within ``within`` seconds of it."""
    within = float(check.options.get("within", 5.0))
    unfinished = [f"{e.event_id} {e.status}" for e in obs.events.values() if e.ended is None or e.status != "completed"]
    if not obs.events or unfinished:
        return Grade("restored_after_completed", FAIL, f"the event did not complete ({', '.join(unfinished)})")
    if not obs.probes[1]:
        return Grade("restored_after_completed", NOT_JUDGED, "no --restored probe was given")
    for event in obs.events.values():
        ended = event.ended or 0.0
        for machine in (m for m in obs.case.machines if m in event.resources):
            after = [at for at in obs.restored.get(machine, []) if at >= ended]
            if not after or after[0] - ended > within:
                return Grade(
                    "restored_after_completed", FAIL, f"{machine} was not restored within {within:g} s of completion"
                )
    return Grade("restored_after_completed", PASS, f"restored within {within:g} s of completion")


def cases() -> CloudCases:
    return CloudCases("aws", [resources.files(__name__) / "cases.yaml"], Ec2Observer())
