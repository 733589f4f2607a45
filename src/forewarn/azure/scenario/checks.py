"""Azure's check of a machine in a scenario's ``expect:`` (``vm: NAME``): the Scheduled Events documents the VM
saw, events it never saw, its EventIds, the notice each event gave, and its power, host and boot; read from what
Azure's observer recorded (``vms``, ``vm_states``)."""

from __future__ import annotations

from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from forewarn.core.durations import parse_duration
from forewarn.core.errors import CoreError
from forewarn.core.times import parse_time
from forewarn.core.words import counted
from forewarn.scenario_steps import CheckRecord, MachineCheck, check_changed, distinct

DOCUMENT_KEYS = ("incarnation", "events", "at")


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


def render_document(check: CheckRecord, entry: dict) -> str:
    events = entry["document"].get("Events") or []
    inside = ", ".join(f"{e.get('EventStatus')} {e.get('EventType')}" for e in events)
    return f"{entry['incarnation']}: [{inside}] at {check.offset(entry['offset'])}"


def vm_check(check: CheckRecord, timeline: Mapping[str, Any]) -> None:
    documents = check.observed("vms")
    if documents is None:
        return
    checks = check.checks
    seen = " -> ".join(render_document(check, entry) for entry in documents)
    if "documents" in checks:
        problems = _document_problems(check, checks["documents"], documents)
        check.add("documents", not problems, "; ".join(problems) + (f" (seen: {seen})" if problems else seen))
    if "never" in checks:
        _never(check, documents)
    if "event_ids" in checks:
        ids = _distinct_ids(documents)
        check.add(
            counted(checks["event_ids"], "EventId"),
            len(ids) == checks["event_ids"],
            f"saw {len(ids)}: {', '.join(ids) or 'none'}",
        )
    _notice_bounds(check, documents)
    _states(check, timeline["vm_states"].get(check.target) or [])


def _document_problems(check: CheckRecord, expected: list[dict], documents: list[dict]) -> list[str]:
    """How the recorded documents differ from the expected ones: their count, and each one's incarnation, events
    and time."""
    problems = []
    if len(expected) != len(documents):
        problems.append(f"{counted(len(documents), 'document')}, expected {len(expected)}")
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
            at = check.seconds(want["at"])
            if abs(entry["offset"] - at) > check.tolerance:
                problems.append(
                    f"document {number} (incarnation {entry['incarnation']}) at "
                    f"{check.offset(entry['offset'])}, expected {check.offset(at)}"
                )
    return problems


def _never(check: CheckRecord, documents: list[dict]) -> None:
    patterns = check.checks["never"]
    found = [
        (entry, ev)
        for entry in documents
        for ev in entry["document"].get("Events") or []
        for p in patterns
        if event_matches(ev, p)
    ]
    check.add(
        f"never {', '.join(render_pattern(p) for p in patterns)}",
        not found,
        f"seen at incarnation {found[0][0]['incarnation']}: {found[0][1].get('EventStatus')} "
        f"{found[0][1].get('EventType')}"
        if found
        else "never seen",
    )


def _notice_bounds(check: CheckRecord, documents: list[dict]) -> None:
    for key, compare in (
        ("min_notice", lambda notice, bound: notice >= bound),
        ("max_notice", lambda notice, bound: notice <= bound),
    ):
        if key in check.checks:
            bound = check.seconds(check.checks[key])
            notices = _notices(documents)
            slack = -check.tolerance if key == "min_notice" else check.tolerance
            bad = {event_id: n for event_id, n in notices.items() if not compare(n, bound + slack)}
            detail = ", ".join(f"{event_id}: {check.offset(n)}" for event_id, n in notices.items())
            check.add(f"{key} {check.checks[key]}", bool(notices) and not bad, detail or "no Scheduled event was seen")


def _states(check: CheckRecord, states: list[dict]) -> None:
    checks = check.checks
    if "power" in checks:
        seen_power = distinct([s["power"] for s in states])
        check.add("power", seen_power == checks["power"], f"saw {' -> '.join(seen_power)}")
    check_changed(check, states, "moved", "host", "host")
    check_changed(check, states, "rebooted", "booted_at", "booted at")


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


def documents_problems(checks: Mapping[str, Any]) -> list[tuple[tuple, str]]:
    """A VM check's expected documents: each {incarnation, events, at}, its ``at`` a duration from the start."""
    documents = checks.get("documents")
    if documents is None:
        return []
    if not isinstance(documents, list):
        return [(("documents",), "expected a list of {incarnation, events, at}")]
    problems: list[tuple[tuple, str]] = []
    for number, document in enumerate(documents):
        where = ("documents", number)
        if not isinstance(document, dict):
            problems.append((where, "expected {incarnation: N, events: [...]}"))
            continue
        for key in document:
            if key not in DOCUMENT_KEYS:
                problems.append((where + (key,), f"unknown key {key!r}; expected {', '.join(DOCUMENT_KEYS)}"))
        if "events" in document and not isinstance(document["events"], list):
            problems.append(
                (where + ("events",), "expected a list: 'Status Type' strings or mappings of document fields")
            )
        if "at" in document:
            try:
                parse_duration(str(document["at"]))
            except CoreError as error:
                problems.append((where + ("at",), str(error)))
    return problems


VM_CHECK = MachineCheck(
    vm_check,
    ("documents", "never", "event_ids", "min_notice", "max_notice", "power", "moved", "rebooted"),
    member="vm",
    noun="a VM",
    lists=("never", "power"),
    flags=("moved", "rebooted"),
    numbers=("event_ids",),
    durations=("min_notice", "max_notice"),
    check=documents_problems,
)
