"""EC2's check of a machine in a scenario's ``expect:`` (``instance: ID``): the states an instance went through, the
NotBefore times of its events, whether it moved, rebooted or was replaced; read from what EC2's observer recorded
(``instances``, ``ec2_instances``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forewarn.core.times import parse_optional_time
from forewarn.scenario_steps import CheckRecord, MachineCheck, check_changed, distinct


def instance_check(check: CheckRecord, timeline: Mapping[str, Any]) -> None:
    entries = check.observed("instances")
    if entries is None:
        return
    checks = check.checks
    if "states" in checks:
        seen = distinct([entry["state"] for entry in entries])
        check.add("states", seen == checks["states"], f"saw {' -> '.join(seen)}")
    if "not_befores" in checks:
        seen_times = distinct([parse_optional_time(ev["not_before"]) for entry in entries for ev in entry["events"]])
        want = [check.time(value) for value in checks["not_befores"]]
        check.add(
            "NotBefore " + " -> ".join(map(str, checks["not_befores"])),
            seen_times == want,
            "saw " + " -> ".join(t.isoformat().replace("+00:00", "Z") for t in seen_times),
        )
    check_changed(check, entries, "moved", "host", "host")
    check_changed(check, entries, "rebooted", "booted_at", "booted at")
    if "replaced" in checks:
        replacements = [
            i["instance_id"] for i in timeline.get("ec2_instances") or [] if i.get("replaces") == check.target
        ]
        check.add(
            "replaced" if checks["replaced"] else "not replaced",
            bool(replacements) == checks["replaced"],
            f"replaced by {', '.join(replacements)}" if replacements else "no replacement",
        )


INSTANCE_CHECK = MachineCheck(
    instance_check,
    ("states", "not_befores", "moved", "rebooted", "replaced"),
    member="instance",
    noun="an EC2 instance",
    lists=("states", "not_befores"),
    flags=("moved", "rebooted", "replaced"),
    times=("not_befores",),
)
