"""What each scenario step does on the server (``do:`` in a scenario file): every registered cloud's steps
(``Cloud.scenario_steps``), and the steps of no one cloud (waves), each a call or two of the control API that returns
the answer and the ids the step produced (its ``id:`` names them for later steps)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forewarn.cloud import registered
from forewarn.scenario_steps import MachineCheck, ScenarioSteps, StepAction, StepApi, StepCall, flat

WAVE = "wave"
EVENT_CHECK = "event"  # the check of a step's events in `expect:`, of no one cloud


def wave(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    outcome = api.post("/v1/waves", params)
    return outcome, [outcome["wave"]["wave_id"]]


def cancel_wave(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params["wave"])
    return [api.post(f"/v1/waves/{wave_id}/cancel") for wave_id in ids], ids


WAVE_KEYS = (
    "cloud",
    "type",
    "by",
    "concurrency",
    "groups",
    "source",
    "notice",
    "duration_seconds",
    "impact_window",
    "description",
    "window",
    "can_reschedule",
    "latest",
    "name",
)

# The steps of no one cloud: a wave names its cloud in its `with`.
WAVE_ACTIONS: dict[str, StepAction] = {
    WAVE: StepAction(
        wave, (), WAVE_KEYS, summary="POST /v1/waves: roll maintenance by update domain, fault domain, zone or host"
    ),
    "cancel-wave": StepAction(cancel_wave, ("wave",), (), summary="POST /v1/waves/{wave}/cancel"),
}

# `with` keys whose values are times in every cloud's steps (a cloud adds its own: ScenarioSteps.time_keys).
COMMON_TIME_KEYS = ("not_before", "not_after", "start")


@dataclass(frozen=True)
class Steps:
    """Every step a scenario can take, each with the cloud it belongs to (None: a wave's)."""

    actions: Mapping[str, StepAction]
    cloud_of: Mapping[str, str | None]
    clouds: Mapping[str, ScenarioSteps]
    time_keys: tuple[str, ...]
    checks: Mapping[str, MachineCheck]  # every cloud's checks of a machine in `expect:`, by the key naming it


@functools.cache
def steps() -> Steps:
    """The registered clouds' steps in the registry's order, then the waves'. Loaded once per process, when a
    scenario is first read."""
    return steps_of({cloud.name: cloud.scenario_steps() for cloud in registered()})


def steps_of(clouds: Mapping[str, ScenarioSteps]) -> Steps:
    """The clouds' steps (by cloud name, in order), then the waves'; a step name two of them give is refused."""
    actions: dict[str, StepAction] = {}
    cloud_of: dict[str, str | None] = {}
    for name, cloud_steps in clouds.items():
        twice = sorted((set(actions) | set(WAVE_ACTIONS)) & set(cloud_steps.actions))
        if twice:
            raise ValueError(f"the {name} cloud's scenario steps {', '.join(twice)} are another's already")
        actions.update(cloud_steps.actions)
        cloud_of.update(dict.fromkeys(cloud_steps.actions, name))
    actions.update(WAVE_ACTIONS)
    cloud_of.update(dict.fromkeys(WAVE_ACTIONS))
    time_keys = dict.fromkeys(COMMON_TIME_KEYS)
    checks: dict[str, MachineCheck] = {}
    for name, cloud_steps in clouds.items():
        time_keys.update(dict.fromkeys(cloud_steps.time_keys))
        twice = sorted((set(checks) | {EVENT_CHECK}) & set(cloud_steps.checks))
        if twice:
            raise ValueError(f"the {name} cloud's scenario checks {', '.join(twice)} are another's already")
        checks.update(cloud_steps.checks)
    return Steps(actions, cloud_of, dict(clouds), tuple(time_keys), checks)
