"""Checking a scenario's expectations against a recorded timeline: a step's events here, a machine by the check its
cloud gives (``ScenarioSteps.checks``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from forewarn.core.times import parse_optional_time, parse_time
from forewarn.core.words import counted
from forewarn.scenarios.actions import steps
from forewarn.scenarios.spec import Expectation, Scenario, duration_value, format_offset, time_value


class _Check:
    """One expectation's results; for a cloud's check of a machine, its ``CheckRecord`` (scenario_steps.py)."""

    def __init__(self, expectation: Expectation, timeline: Mapping[str, Any], start: datetime, tolerance: float):
        self.expectation = expectation
        self.timeline = timeline
        self.start = start
        self.tolerance = tolerance
        self.results: list[dict] = []

    @property
    def target(self) -> str:
        return self.expectation.target

    @property
    def checks(self) -> Mapping[str, Any]:
        return self.expectation.checks

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

    def observed(self, key: str) -> list[dict] | None:
        recorded = (self.timeline.get(key) or {}).get(self.target)
        if recorded is None:
            self.add("observed", False, f"{self.target} was not observed (add it to `observe`)")
        return recorded

    def time(self, value: Any) -> datetime:
        return time_value(str(value), self.start)

    def seconds(self, value: Any) -> float:
        return duration_value(value).total_seconds()

    def offset(self, seconds: float) -> str:
        return format_offset(seconds)


def evaluate(scenario: Scenario, timeline: dict, event_keys: Sequence[str], tolerance: float = 0.0) -> list[dict]:
    """The expectations' results on ``timeline``; ``event_keys``: its keys that hold the run's events (each
    observer's ``event_keys``), where an ``event`` check finds a step's events."""
    start = parse_time(timeline["start"])  # a run is checked only once it has begun
    results: list[dict] = []
    machines = steps().checks
    for expectation in scenario.expectations:
        check = _Check(expectation, timeline, start, tolerance)
        machine = machines.get(expectation.kind)
        if machine is not None:
            machine.run(check, timeline)
        else:
            _event(check, timeline, event_keys, start)
        results += check.results
    return results


def _event(check: _Check, timeline: dict, event_keys: Sequence[str], start: datetime) -> None:
    e = check.expectation
    step_id = e.target[1:]
    action = next((a for a in timeline["actions"] if a.get("id") == step_id and "produced" in a), None)
    if action is None:
        check.add("created", False, f"step {step_id!r} did not run or failed")
        return
    ids = action["produced"]
    by_id = {ev["event_id"]: ev for key in reversed(event_keys) for ev in timeline[key]}
    found = [by_id.get(i) for i in ids]
    events = [ev for ev in found if ev is not None]
    if e.vm:
        events = [ev for ev in events if e.vm in ev.get("resources", [])]
    checks = e.checks
    if "count" in checks:
        check.add(
            counted(checks["count"], "event"),
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
