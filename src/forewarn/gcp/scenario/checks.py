"""Compute Engine's check of a machine in a scenario's ``expect:`` (``gce: NAME``): the maintenance-event values and
statuses it went through, in order (each change once), when the notice came, whether it moved to another host, was
preempted, had upcoming maintenance announced; read from what Compute Engine's observer recorded
(``gce_instances``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forewarn.core.times import format_time
from forewarn.scenario_steps import CheckRecord, MachineCheck, check_changed, distinct


def gce_check(check: CheckRecord, timeline: Mapping[str, Any]) -> None:
    entries = check.observed("gce_instances")
    if entries is None:
        return
    checks = check.checks
    for key, field_name in (("values", "maintenance_event"), ("statuses", "status")):
        if key in checks:
            seen = distinct([entry[field_name] for entry in entries])
            check.add(key, seen == checks[key], f"saw {' -> '.join(seen)}")
    check_changed(check, entries, "moved", "host", "host")
    if "preempted" in checks:
        preempted = any(entry["preempted"] for entry in entries)
        check.add("preempted" if checks["preempted"] else "not preempted", preempted == checks["preempted"], "")
    if "upcoming" in checks:
        windows = distinct([entry["upcoming"] for entry in entries if entry["upcoming"]])
        want = [format_time(check.time(value)) for value in checks["upcoming"]]
        check.add("upcoming " + " -> ".join(map(str, checks["upcoming"])), windows == want, f"saw {windows}")
    if "notified" in checks:
        # The times maintenance-event left NONE: how long before a start the notice came (an hour for GPU VMs).
        seen = [
            entry["time"]
            for before, entry in zip([None, *entries], entries, strict=False)
            if entry["maintenance_event"] != "NONE" and (before is None or before["maintenance_event"] == "NONE")
        ]
        want = [format_time(check.time(value)) for value in checks["notified"]]
        check.add("notified " + " -> ".join(map(str, checks["notified"])), seen == want, f"saw {seen}")


GCE_CHECK = MachineCheck(
    gce_check,
    ("values", "statuses", "moved", "preempted", "upcoming", "notified"),
    member="instance",
    noun="a Compute Engine instance",
    lists=("upcoming", "notified"),
    flags=("moved",),
    times=("upcoming", "notified"),
)
