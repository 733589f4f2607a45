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
from urllib.parse import parse_qs

from forewarn.conformance_cases import FAIL, NOT_JUDGED, PASS, CloudCases, EventState, Grade, ObserverWithoutApproval
from forewarn.core.words import counted

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
# What a message received from a queue says of each kind of notice (queue mode): the EventBridge event's detail-type,
# or the lifecycle hook's transition in the message the hook sends its notification target.
QUEUE_MARKERS = {
    SPOT: (b"EC2 Spot Instance Interruption Warning",),
    REBALANCE: (b"EC2 Instance Rebalance Recommendation",),
    LIFECYCLE: (b"EC2_INSTANCE_TERMINATING", b"EC2 Instance-terminate Lifecycle Action"),
}
RECEIPT_XML = re.compile(rb"<ReceiptHandle>([^<]+)</ReceiptHandle>")


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
        if sqs_action(call) == "ReceiveMessage":
            return call.status == 200 and queue_told(call.answer, event_id)
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
                states[event_id] = lifecycle_state(client, event_id, seconds_since_start)
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
            "deleted_messages": deleted_messages,
            "completed_lifecycle_action": completed_lifecycle_action,
        }


def lifecycle_state(client: Any, event_id: str, seconds_since_start: Callable[[str], float]) -> EventState:
    """An instance's termination by its group: ``active`` while a lifecycle hook holds it (Terminating:Wait), then
    how the wait ended as the journal says (``completed``: a CompleteLifecycleAction; ``timed-out``: the hook's
    heartbeat or global timeout) and when; ``over`` once the instance is gone without a hook."""
    instance_id = event_id.removeprefix(LIFECYCLE)
    ends = [
        entry
        for entry in client.call("GET", "/v1/journal", limit=1000)
        if entry.get("instance") == instance_id and str(entry.get("what", "")).startswith("lifecycle action ")
    ]
    if ends:
        last = ends[-1]
        what = str(last["what"]).removeprefix("lifecycle action ")
        if what in ("completed", "timed-out"):
            return EventState(event_id, what, [instance_id], None, [], seconds_since_start(str(last["at"])))
        return EventState(event_id, "active", [instance_id], None, [])
    instance = client.call("GET", f"/v1/ec2/instances/{instance_id}")
    status = "active" if instance.get("state") == "running" else "over"
    return EventState(event_id, status, [instance_id], None, [])


def sqs_action(call: Call) -> str | None:
    """The SQS action a call of a queue-mode handler is (JSON protocol: its ``X-Amz-Target``; query protocol: its
    ``Action``), or None for any other call."""
    target = call.headers.get("x-amz-target", "")
    if target.startswith("AmazonSQS."):
        return target.removeprefix("AmazonSQS.")
    if call.method == "POST" and b"Version=2012-11-05" in call.body:
        return next(iter(parse_qs(call.body.decode(errors="replace")).get("Action", [])), None)
    return None


def queue_told(answer: bytes, event_id: str) -> bool:
    """Whether messages received from a queue tell of the event: they name its instance, as its kind of notice."""
    for prefix, markers in QUEUE_MARKERS.items():
        if event_id.startswith(prefix):
            instance = event_id.removeprefix(prefix).encode()
            return instance in answer and any(marker in answer for marker in markers)
    return event_id.encode() in answer  # a scheduled event, in an AWS Health event's detail


def receipts(call: Call) -> set[str]:
    """The receipt handles of the messages a ReceiveMessage answered with, or a delete named (either protocol)."""
    if sqs_action(call) == "ReceiveMessage":
        if call.headers.get("x-amz-target"):
            try:
                messages = json.loads(call.answer or b"{}").get("Messages", [])
            except ValueError:
                return set()
            return {str(message.get("ReceiptHandle")) for message in messages}
        return {found.decode() for found in RECEIPT_XML.findall(call.answer)}
    if call.headers.get("x-amz-target"):
        try:
            given = json.loads(call.body or b"{}")
        except ValueError:
            return set()
        entries = given.get("Entries") or [given]
        return {str(entry.get("ReceiptHandle")) for entry in entries if isinstance(entry, dict)}
    form = parse_qs(call.body.decode(errors="replace"))
    return {value for key, values in form.items() if key.endswith("ReceiptHandle") for value in values}


def message_ids(handles: set[str]) -> set[str]:
    """forewarn's receipt handles begin with their message's ID (``<ID>.<receive count>.<token>``)."""
    return {handle.split(".", 1)[0] for handle in handles}


def deleted_messages(obs: Observation, check: Check) -> Grade:
    """Every message the handler received from the queue was deleted by it (DeleteMessage or DeleteMessageBatch,
    answered 200): a message handled and not deleted comes back after its visibility timeout, and is handled again."""
    calls = [call for call in obs.calls if call.status == 200]
    received = message_ids({h for c in calls if sqs_action(c) == "ReceiveMessage" for h in receipts(c)})
    deleted = message_ids(
        {h for c in calls if sqs_action(c) in ("DeleteMessage", "DeleteMessageBatch") for h in receipts(c)}
    )
    if not received:
        return Grade("deleted_messages", FAIL, "the handler received no message from the queue")
    kept = received - deleted
    if kept:
        never = f"{len(kept):,} of {counted(len(received), 'message')} received never deleted"
        return Grade("deleted_messages", FAIL, never)
    return Grade("deleted_messages", PASS, f"every one of {counted(len(received), 'message')} received was deleted")


def completion_call(obs: Observation, instance: str) -> float:
    """When the handler's CompleteLifecycleAction for ``instance`` was made (by its instance ID, or by a token), as
    the proxy saw it: the probes ran just before it went on."""
    completions = [
        call
        for call in obs.calls
        if call.status == 200 and b"Action=CompleteLifecycleAction" in call.body and b"Version=2011-01-01" in call.body
    ]
    named = [call for call in completions if instance.encode() in call.body]
    return min((call.at for call in named or completions), default=float("inf"))


def completed_lifecycle_action(obs: Observation, check: Check) -> Grade:
    """Each instance a lifecycle hook held was let go by the handler (CompleteLifecycleAction) before the hook
    timed out, and only once it was drained (the proxy runs the probes just before each call goes on)."""
    held = [event for event_id, event in obs.events.items() if event_id.startswith(LIFECYCLE)]
    if not held:
        return Grade("completed_lifecycle_action", FAIL, "no instance was held by a lifecycle hook (a step refused?)")
    for event in held:
        instance = event.resources[0]
        if event.status == "timed-out":
            reason = f"the hook's wait for {instance} timed out at {event.ended:.1f} s: the handler never completed it"
            return Grade("completed_lifecycle_action", FAIL, reason)
        if event.status != "completed" or event.ended is None:
            reason = f"{instance} still waited on its lifecycle hook at the case's end: the action was never completed"
            return Grade("completed_lifecycle_action", FAIL, reason)
        if not obs.probes[0]:
            return Grade("completed_lifecycle_action", NOT_JUDGED, "completed; no --drained probe to tell if drained")
        completed_at = completion_call(obs, instance)
        drained = [at for at in obs.drained.get(instance, []) if at <= completed_at]
        if not drained:
            reason = f"the action for {instance} was completed at {completed_at:.1f} s, before it was drained"
            return Grade("completed_lifecycle_action", FAIL, reason)
    last = max(event.ended or 0.0 for event in held)
    return Grade("completed_lifecycle_action", PASS, f"completed after the drain, by {last:.1f} s, before any timeout")


def imdsv2(obs: Observation, check: Check) -> Grade:
    """Every metadata read carries an IMDSv2 session token (the instance may require it)."""
    reads = [call for call in obs.calls if call.method == "GET"]
    if not reads:
        return Grade("imdsv2", NOT_JUDGED, "the handler read no metadata")
    without = [call for call in reads if TOKEN_HEADER not in call.headers]
    if without:
        first = without[0]
        return Grade(
            "imdsv2", FAIL, f"{len(without)} of {counted(len(reads), 'read')} had no token (first: {first.path})"
        )
    return Grade("imdsv2", PASS, f"{counted(len(reads), 'read')}, every one with a session token")


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
