"""What a scenario run records of the example's machines: each observed machine's reboot state whenever the journal
says one of its reboots changed, and the ``example:`` check of a scenario's ``expect:`` on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from forewarn.scenario_steps import CheckRecord, MachineCheck, RunRecord, StepApi, distinct

JOURNAL_KIND = "example reboot "  # what records.py journals for each change of a reboot


class ExampleObserver:
    event_keys = ()  # a scenario's `event` check reads no example reboot

    def __init__(self) -> None:
        self.machines: dict[str, list[dict]] = {}
        self._changed = False

    def begin(self, api: StepApi, machines: Sequence[str], observe: Sequence[str], every: bool) -> None:
        self.machines = {name: [] for name in observe if name in set(machines)}

    def note(self, entry: Mapping[str, Any]) -> None:
        self._changed = self._changed or str(entry["what"]).startswith(JOURNAL_KIND)

    def observe(self, api: StepApi, run: RunRecord, everything: bool) -> None:
        changed, self._changed = self._changed, False
        if not self.machines or not (changed or everything):
            return
        latest = {reboot["machine"]: reboot["state"] for reboot in api.get("/v1/example/maintenance")}
        for name, recorded in self.machines.items():
            state = latest.get(name, "none")
            if not recorded or recorded[-1]["state"] != state:
                recorded.append({**run.stamp(), "state": state})
                run.line(name, "", f"reboot {state}")

    def quiet_until(self) -> tuple[bool, datetime | None]:
        return (False, None) if self.machines else (True, None)

    def finish(self, api: StepApi, start: datetime, journal: Mapping[str, list[dict]] | None) -> None:
        return None

    def timeline(self) -> dict[str, Any]:
        return {"example_machines": self.machines}


def states_check(check: CheckRecord, timeline: Mapping[str, Any]) -> None:
    recorded = check.observed("example_machines")
    if recorded is not None:
        seen = distinct([entry["state"] for entry in recorded])
        check.add("states", seen == check.checks["states"], f"saw {' -> '.join(seen)}")


EXAMPLE_CHECK = MachineCheck(states_check, ("states",), member="instance", noun="an example machine", lists=("states",))
