"""Grading a case from what was observed: each check gives pass, fail or not judged (a check that needs a probe
the user did not give), with its reason; the case takes the worst of its checks."""

from __future__ import annotations

from collections.abc import Callable

from forewarn.conformance.model import (
    FAIL,
    NOT_JUDGED,
    PASS,
    Approval,
    CaseResult,
    Check,
    EventState,
    Grade,
    Observation,
    worst,
)

NO_DRAINED_PROBE = "no --drained probe was given"
NO_RESTORED_PROBE = "no --restored probe was given"


def named_machines(obs: Observation, event: EventState) -> list[str]:
    return [machine for machine in obs.case.machines if machine in event.resources]


def first_approval(obs: Observation, event_id: str) -> Approval | None:
    return next((a for a in sorted(obs.approvals, key=lambda a: a.at) if a.event_id == event_id), None)


def drained_by(obs: Observation, machine: str, moment: float) -> bool:
    return any(at <= moment for at in obs.drained.get(machine, []))


def noticed(obs: Observation, check: Check) -> Grade:
    within = float(check.options.get("within", 5.0))
    ids = {event_id: obs.appeared[event_id] for event_id in obs.event_ids}
    if not ids:
        return Grade("noticed", FAIL, "the case made no event (its step was refused)")
    slowest = []
    for machine in obs.case.machines:
        seen = [
            (call.at, event_id)
            for call in obs.calls
            if call.machine == machine
            for event_id in ids
            if obs.observer.seen(call, event_id)
        ]
        if not seen:
            return Grade("noticed", FAIL, f"{machine} never read an answer that told of the event")
        at, event_id = min(seen)
        slowest.append((max(0.0, at - ids[event_id]), machine))
    latency, machine = max(slowest)
    grade = PASS if latency <= within else FAIL
    return Grade("noticed", grade, f"{machine} read it {latency:.1f} s after it appeared (at most {within:g} s)")


def drained_in_time(obs: Observation, check: Check) -> Grade:
    """Each machine an event names is drained before the event goes ahead: before its first approval, else
    before NotBefore."""
    if not obs.probes[0]:
        return Grade("drained_in_time", NOT_JUDGED, NO_DRAINED_PROBE)
    for event in obs.events.values():
        approval = first_approval(obs, event.event_id)
        moment = approval.at if approval else event.not_before
        if moment is None:
            continue
        went = f"its approval by {approval.machine}" if approval else "NotBefore"
        for machine in named_machines(obs, event):
            if not drained_by(obs, machine, moment):
                return Grade("drained_in_time", FAIL, f"{machine} was not drained at {went} ({moment:.1f} s)")
    return Grade("drained_in_time", PASS, "every named machine was drained before its event went ahead")


def drained_within(obs: Observation, check: Check) -> Grade:
    """Each machine an event names drained within ``within`` seconds of the event's appearance (for notices with no
    NotBefore to drain before, such as a preemption's)."""
    within = float(check.options.get("within", 10.0))
    if not obs.probes[0]:
        return Grade("drained_within", NOT_JUDGED, NO_DRAINED_PROBE)
    for event in obs.events.values():
        appeared = obs.appeared.get(event.event_id, 0.0)
        for machine in named_machines(obs, event):
            if not drained_by(obs, machine, appeared + within):
                return Grade("drained_within", FAIL, f"{machine} was not drained within {within:g} s of the notice")
    return Grade("drained_within", PASS, f"drained within {within:g} s of the notice")


def approved_before_not_before(obs: Observation, check: Check) -> Grade:
    if not obs.events:
        return Grade("approved_before_not_before", FAIL, "the case made no event")
    for event in obs.events.values():
        approval = first_approval(obs, event.event_id)
        if approval is None:
            return Grade("approved_before_not_before", FAIL, f"{event.event_id} was never approved: it waited")
        if event.not_before is not None and approval.at > event.not_before:
            reason = f"approved at {approval.at:.1f} s, after NotBefore ({event.not_before:.1f} s)"
            return Grade("approved_before_not_before", FAIL, reason)
    latest = max(a.at for a in obs.approvals)
    return Grade("approved_before_not_before", PASS, f"approved by {latest:.1f} s, before NotBefore")


def not_approved(obs: Observation, check: Check) -> Grade:
    ours = [a for a in obs.approvals if a.event_id in obs.events]
    if ours:
        first = ours[0]
        event = obs.events[first.event_id]
        reason = f"{first.machine} approved {first.event_id} at {first.at:.1f} s; it names {', '.join(event.resources)}"
        return Grade("not_approved", FAIL, reason)
    return Grade("not_approved", PASS, "no approval")


def not_drained(obs: Observation, check: Check) -> Grade:
    if not obs.probes[0]:
        return Grade("not_drained", NOT_JUDGED, NO_DRAINED_PROBE)
    named = {machine for event in obs.events.values() for machine in named_machines(obs, event)}
    for machine in obs.case.machines:
        if machine not in named and obs.drained.get(machine):
            return Grade(
                "not_drained", FAIL, f"{machine} drained at {obs.drained[machine][0]:.1f} s; no event names it"
            )
    return Grade("not_drained", PASS, "no machine that no event names was drained")


def no_approval_before_all_drained(obs: Observation, check: Check) -> Grade:
    """An approval lets the event go ahead for every VM it names: none may come before all of them are drained."""
    approvals = [a for a in obs.approvals if a.event_id in obs.events]
    if not approvals:
        return Grade("no_approval_before_all_drained", PASS, "no approval: the event waited for NotBefore")
    if not obs.probes[0]:
        return Grade("no_approval_before_all_drained", NOT_JUDGED, NO_DRAINED_PROBE)
    for approval in approvals:
        for machine in named_machines(obs, obs.events[approval.event_id]):
            if not drained_by(obs, machine, approval.at):
                reason = f"{approval.machine} approved at {approval.at:.1f} s while {machine} was not drained"
                return Grade("no_approval_before_all_drained", FAIL, reason)
    return Grade("no_approval_before_all_drained", PASS, "every approval came after every named machine drained")


def restored(obs: Observation, check: Check) -> Grade:
    within = float(check.options.get("within", 10.0))
    canceled = [e for e in obs.events.values() if e.status.lower() == "canceled"]
    if len(canceled) < len(obs.events) or not obs.events:
        states = ", ".join(f"{e.event_id} {e.status}" for e in obs.events.values())
        return Grade("restored", FAIL, f"the event was not canceled ({states}): it had gone ahead")
    if not obs.probes[1]:
        return Grade("restored", NOT_JUDGED, NO_RESTORED_PROBE)
    canceled_at = max(obs.cancels) if obs.cancels else 0.0
    for event in canceled:
        for machine in named_machines(obs, event):
            after = [at for at in obs.restored.get(machine, []) if at >= canceled_at]
            if not after or after[0] - canceled_at > within:
                return Grade("restored", FAIL, f"{machine} was not restored within {within:g} s of the cancellation")
    return Grade("restored", PASS, "restored after the cancellation")


CHECKS: dict[str, Callable[[Observation, Check], Grade]] = {
    "noticed": noticed,
    "drained_in_time": drained_in_time,
    "drained_within": drained_within,
    "approved_before_not_before": approved_before_not_before,
    "not_approved": not_approved,
    "not_drained": not_drained,
    "no_approval_before_all_drained": no_approval_before_all_drained,
    "restored": restored,
}


def stayed_up(obs: Observation) -> Grade:
    if obs.exits:
        machine, at, status = obs.exits[0]
        return Grade("stayed_up", FAIL, f"the handler of {machine} exited with status {status} at {at:.1f} s")
    return Grade("stayed_up", PASS, "the handler kept running")


def poll_rates(obs: Observation) -> list[str]:
    """Per machine: how many metadata calls, and the median time between two (its poll rate)."""
    lines = []
    for machine in obs.case.machines:
        times = [call.at for call in obs.calls if call.machine == machine]
        gaps = sorted(later - earlier for earlier, later in zip(times, times[1:]))
        every = f", one every {gaps[len(gaps) // 2]:.2f} s (median)" if gaps else ""
        lines.append(f"{machine}: {len(times)} metadata calls{every}")
    return lines


def grade_case(obs: Observation) -> CaseResult:
    known = {**CHECKS, **obs.observer.checks()}
    grades = [known[check.kind](obs, check) for check in obs.case.checks]
    grades.append(stayed_up(obs))
    notes = (*obs.notes, *poll_rates(obs))
    return CaseResult(obs.case, worst([g.grade for g in grades]), grades, obs.wall, notes)
