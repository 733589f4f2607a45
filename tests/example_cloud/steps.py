"""The example cloud's step of a scenario file: ``do: example-maintain`` (a client of the control API)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from example_cloud.observer import EXAMPLE_CHECK
from forewarn.scenario_steps import MachineCheck, StepAction, StepApi, StepCall


def maintain(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    reboots = api.post("/v1/example/maintenance", params)
    return reboots, [reboot["event_id"] for reboot in reboots]


class ExampleSteps:
    actions = {
        "example-maintain": StepAction(
            maintain, ("machine",), ("notice",), summary="POST /v1/example/maintenance: announce a reboot"
        )
    }
    time_keys = ()
    scheduled_by_wave = None
    checks: Mapping[str, MachineCheck] = {"example": EXAMPLE_CHECK}  # `expect: [{example: ex-9, states: [...]}]`

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        """When each reboot the run announced happens (the clock goes there before the run settles)."""
        return [
            datetime.fromisoformat(reboot["at"])
            for reboot in api.get("/v1/example/maintenance")
            if reboot["event_id"] in created and reboot["state"] == "announced"
        ]


STEPS = ExampleSteps()
