"""Checking a scenario's expectations against a recorded timeline."""

from __future__ import annotations

from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from forewarn.core.times import format_time, parse_optional_time, parse_time
from forewarn.scenarios.spec import Expectation, Scenario, duration_value, format_offset, time_value


def event_matches(event: dict, pattern: Any) -> bool:
    """A pattern is ``"Status [Type [Source]]"`` or a mapping of document fields, all of which must be equal."""
    if isinstance(pattern, dict):
        return all(event.get(key) == value for key, value in pattern.items())
    words = str(pattern).split()
    fields = ("EventStatus", "EventType", "EventSource")
    return all(event.get(field) == word for field, word in zip(fields, words, strict=False))


def render_pattern(pattern: Any) -> str:
    if isinstance(pattern, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in pattern.items()) + "}"
    return str(pattern)


def render_document(entry: dict) -> str:
    events = entry["document"].get("Events") or []
    inside = ", ".join(f"{e.get('EventStatus')} {e.get('EventType')}" for e in events)
    return f"{entry['incarnation']}: [{inside}] at {format_offset(entry['offset'])}"


def _distinct(values: list) -> list:
    result: list = []
    for value in values:
        if not result or result[-1] != value:
            result.append(value)
    return result


class _Check:
    def __init__(self, expectation: Expectation):
        self.expectation = expectation
        self.results: list[dict] = []

    def add(self, name: str, passed: bool, detail: str) -> None:
        e = self.expectation
        label = e.target + (f" ({e.vm})" if e.vm else "")
        self.results.append(
            {
                "check": e.index,
                "what": f"{e.kind} {label}: {name}",
                "passed": bool(passed),
                "detail": detail,
                **({"note": e.note} if e.note else {}),
            }
        )


def evaluate(scenario: Scenario, timeline: dict, tolerance: float = 0.0) -> list[dict]:
    start = parse_time(timeline["start"])  # a run is checked only once it has begun
    results: list[dict] = []
    for expectation in scenario.expectations:
        check = _Check(expectation)
        if expectation.kind == "vm":
            _vm(check, timeline, tolerance)
        elif expectation.kind == "instance":
            _instance(check, timeline, start)
        elif expectation.kind == "gce":
            _gce(check, timeline, start)
        else:
            _event(check, timeline, start)
        results += check.results
    return results


def _observed(check: _Check, timeline: dict, kind: str) -> list[dict] | None:
    """What the timeline recorded of the expectation's VM or instance; None, reported, when it was not observed."""
    target = check.expectation.target
    recorded = timeline[kind].get(target)
    if recorded is None:
        check.add("observed", False, f"{target} was not observed (add it to `observe`)")
    return recorded


def _document_problems(expected: list[dict], documents: list[dict], tolerance: float) -> list[str]:
    """How the recorded documents differ from the expected ones: their count, and each one's incarnation, events
    and time."""
    problems = []
    if len(expected) != len(documents):
        problems.append(f"{len(documents)} documents, expected {len(expected)}")
    for number, (want, entry) in enumerate(zip(expected, documents, strict=False)):
        if "incarnation" in want and want["incarnation"] != entry["incarnation"]:
            problems.append(f"document {number}: incarnation {entry['incarnation']}, expected {want['incarnation']}")
        if "events" in want:
            events = entry["document"].get("Events") or []
            patterns = want["events"]
            matched = all(event_matches(ev, p) for ev, p in zip(events, patterns, strict=False))
            if len(patterns) != len(events) or not matched:
                shown = [f"{ev.get('EventStatus')} {ev.get('EventType')}" for ev in events]
                problems.append(
                    f"document {number} (incarnation {entry['incarnation']}): events {shown}, "
                    f"expected {[render_pattern(p) for p in patterns]}"
                )
        if "at" in want:
            at = duration_value(want["at"]).total_seconds()
            if abs(entry["offset"] - at) > tolerance:
                problems.append(
                    f"document {number} (incarnation {entry['incarnation']}) at "
                    f"{format_offset(entry['offset'])}, expected {format_offset(at)}"
                )
    return problems


def _vm(check: _Check, timeline: dict, tolerance: float) -> None:
    e = check.expectation
    documents = _observed(check, timeline, "vms")
    if documents is None:
        return
    checks = e.checks
    seen = " -> ".join(render_document(entry) for entry in documents)
    if "documents" in checks:
        problems = _document_problems(checks["documents"], documents, tolerance)
        check.add("documents", not problems, "; ".join(problems) + (f" (seen: {seen})" if problems else seen))
    if "never" in checks:
        found = [
            (entry, ev, p)
            for entry in documents
            for ev in entry["document"].get("Events") or []
            for p in checks["never"]
            if event_matches(ev, p)
        ]
        check.add(
            f"never {', '.join(render_pattern(p) for p in checks['never'])}",
            not found,
            f"seen at incarnation {found[0][0]['incarnation']}: {found[0][1].get('EventStatus')} "
            f"{found[0][1].get('EventType')}"
            if found
            else "never seen",
        )
    if "event_ids" in checks:
        ids = _distinct_ids(documents)
        check.add(
            f"{checks['event_ids']} EventId(s)",
            len(ids) == checks["event_ids"],
            f"saw {len(ids)}: {', '.join(ids) or 'none'}",
        )
    for key, compare in (
        ("min_notice", lambda notice, bound: notice >= bound),
        ("max_notice", lambda notice, bound: notice <= bound),
    ):
        if key in checks:
            bound = duration_value(checks[key]).total_seconds()
            notices = _notices(documents)
            bad = {
                event_id: n
                for event_id, n in notices.items()
                if not compare(n, bound - tolerance if key == "min_notice" else bound + tolerance)
            }
            detail = ", ".join(f"{event_id}: {format_offset(n)}" for event_id, n in notices.items())
            check.add(f"{key} {checks[key]}", bool(notices) and not bad, detail or "no Scheduled event was seen")
    states = timeline["vm_states"].get(e.target) or []
    if "power" in checks:
        seen_power = _distinct([s["power"] for s in states])
        check.add("power", seen_power == checks["power"], f"saw {' -> '.join(seen_power)}")
    if "moved" in checks:
        moved = bool(states) and states[0]["host"] != states[-1]["host"]
        check.add(
            "moved" if checks["moved"] else "not moved",
            moved == checks["moved"],
            f"host {states[0]['host']} -> {states[-1]['host']}" if states else "no state seen",
        )
    if "rebooted" in checks:
        rebooted = bool(states) and states[0]["booted_at"] != states[-1]["booted_at"]
        check.add(
            "rebooted" if checks["rebooted"] else "not rebooted",
            rebooted == checks["rebooted"],
            f"booted at {states[0]['booted_at']} -> {states[-1]['booted_at']}" if states else "no state seen",
        )


def _distinct_ids(documents: list[dict]) -> list[str]:
    ids: list[str] = []
    for entry in documents:
        for event in entry["document"].get("Events") or []:
            if event.get("EventId") not in ids:
                ids.append(event.get("EventId"))
    return ids


def _notices(documents: list[dict]) -> dict[str, float]:
    """Per event first seen Scheduled: NotBefore minus the time it was first seen."""
    notices: dict[str, float] = {}
    for entry in documents:
        seen_at = parse_time(entry["time"])
        for event in entry["document"].get("Events") or []:
            if (
                event.get("EventStatus") == "Scheduled"
                and event.get("NotBefore")
                and event.get("EventId") not in notices
            ):
                not_before = parsedate_to_datetime(event["NotBefore"])
                notices[event["EventId"]] = (not_before - seen_at).total_seconds()
    return notices


def _instance(check: _Check, timeline: dict, start: datetime) -> None:
    e = check.expectation
    entries = _observed(check, timeline, "instances")
    if entries is None:
        return
    checks = e.checks
    if "states" in checks:
        seen = _distinct([entry["state"] for entry in entries])
        check.add("states", seen == checks["states"], f"saw {' -> '.join(seen)}")
    if "not_befores" in checks:
        seen_times = _distinct([parse_optional_time(ev["not_before"]) for entry in entries for ev in entry["events"]])
        want = [time_value(str(value), start) for value in checks["not_befores"]]
        check.add(
            "NotBefore " + " -> ".join(map(str, checks["not_befores"])),
            seen_times == want,
            "saw " + " -> ".join(t.isoformat().replace("+00:00", "Z") for t in seen_times),
        )
    if "moved" in checks:
        moved = entries[0]["host"] != entries[-1]["host"]
        check.add(
            "moved" if checks["moved"] else "not moved",
            moved == checks["moved"],
            f"host {entries[0]['host']} -> {entries[-1]['host']}",
        )
    if "rebooted" in checks:
        rebooted = entries[0]["booted_at"] != entries[-1]["booted_at"]
        check.add(
            "rebooted" if checks["rebooted"] else "not rebooted",
            rebooted == checks["rebooted"],
            f"booted at {entries[0]['booted_at']} -> {entries[-1]['booted_at']}",
        )
    if "replaced" in checks:
        replacements = [i["instance_id"] for i in timeline.get("ec2_instances") or [] if i.get("replaces") == e.target]
        check.add(
            "replaced" if checks["replaced"] else "not replaced",
            bool(replacements) == checks["replaced"],
            f"replaced by {', '.join(replacements)}" if replacements else "no replacement",
        )


def _gce(check: _Check, timeline: dict, start: datetime) -> None:
    """A Compute Engine instance: the maintenance-event values and statuses it went through, in order (each change
    once), when the notice came, whether it moved to another host, was preempted, had upcoming maintenance
    announced."""
    entries = _observed(check, timeline, "gce_instances")
    if entries is None:
        return
    checks = check.expectation.checks
    for key, field_name in (("values", "maintenance_event"), ("statuses", "status")):
        if key in checks:
            seen = _distinct([entry[field_name] for entry in entries])
            check.add(key, seen == checks[key], f"saw {' -> '.join(seen)}")
    if "moved" in checks:
        moved = entries[0]["host"] != entries[-1]["host"]
        check.add(
            "moved" if checks["moved"] else "not moved",
            moved == checks["moved"],
            f"host {entries[0]['host']} -> {entries[-1]['host']}",
        )
    if "preempted" in checks:
        preempted = any(entry["preempted"] for entry in entries)
        check.add("preempted" if checks["preempted"] else "not preempted", preempted == checks["preempted"], "")
    if "upcoming" in checks:
        windows = _distinct([entry["upcoming"] for entry in entries if entry["upcoming"]])
        want = [format_time(time_value(str(value), start)) for value in checks["upcoming"]]
        check.add("upcoming " + " -> ".join(map(str, checks["upcoming"])), windows == want, f"saw {windows}")
    if "notified" in checks:
        # The times maintenance-event left NONE: how long before a start the notice came (an hour for GPU VMs).
        seen = [
            entry["time"]
            for before, entry in zip([None, *entries], entries, strict=False)
            if entry["maintenance_event"] != "NONE" and (before is None or before["maintenance_event"] == "NONE")
        ]
        want = [format_time(time_value(str(value), start)) for value in checks["notified"]]
        check.add("notified " + " -> ".join(map(str, checks["notified"])), seen == want, f"saw {seen}")


def _event(check: _Check, timeline: dict, start: datetime) -> None:
    e = check.expectation
    step_id = e.target[1:]
    action = next((a for a in timeline["actions"] if a.get("id") == step_id and "produced" in a), None)
    if action is None:
        check.add("created", False, f"step {step_id!r} did not run or failed")
        return
    ids = action["produced"]
    azure = {ev["event_id"]: ev for ev in timeline["events"]}
    ec2 = {ev["event_id"]: ev for ev in timeline["ec2_events"]}
    found = [azure.get(i) or ec2.get(i) for i in ids]
    events = [ev for ev in found if ev is not None]
    if e.vm:
        events = [ev for ev in events if e.vm in ev.get("resources", [])]
    checks = e.checks
    if "count" in checks:
        check.add(
            f"{checks['count']} event(s)",
            len(events) == checks["count"],
            f"{len(events)}: {', '.join(ev['event_id'] for ev in events) or 'none'}",
        )
    if not events:
        if "count" not in checks:
            check.add("events", False, "the step created no event" + (f" for {e.vm}" if e.vm else ""))
        return

    def each(name: str, value_of, want) -> None:
        seen = {ev["event_id"]: value_of(ev) for ev in events}
        bad = {i: v for i, v in seen.items() if v != want}
        check.add(name, not bad, "; ".join(f"{i}: {v}" for i, v in seen.items()))

    if "status" in checks:
        each(f"status {checks['status']}", lambda ev: ev.get("status") or ev.get("state"), checks["status"])
    if "journal" in checks:
        each(
            "journal " + " -> ".join(checks["journal"]),
            lambda ev: [entry["what"] for entry in ev.get("journal", [])],
            checks["journal"],
        )
    if "approved_by" in checks:
        each(
            "approved by " + (", ".join(checks["approved_by"]) or "nobody"),
            lambda ev: ev.get("approvals"),
            checks["approved_by"],
        )
    for key in ("not_before", "not_after"):
        if key in checks:
            want = time_value(str(checks[key]), start)
            each(f"{key} {checks[key]}", lambda ev, key=key: parse_optional_time(ev.get(key)), want)
