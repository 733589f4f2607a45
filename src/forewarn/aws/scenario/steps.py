"""Amazon EC2's steps of a scenario (``do: ec2-schedule``, ``ec2-interrupt``, ``ec2-api``, ...): each a call of the
control API, or a form of the EC2 Query API for what only it can do (event windows).

A client of the server: it reads and writes through the runner's client (forewarn.scenarios.api), never through
EC2's engine component or model (tests/test_dependencies.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from forewarn.core.times import parse_optional_time
from forewarn.scenario_steps import StepAction, StepApi, StepCall, StepRefused, event_ids_of, event_of, flat


def schedule(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    events = api.post("/v1/ec2/events", params)
    return events, event_ids_of(events)


def cancel(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params["event"])
    return [api.post(f"/v1/ec2/events/{i}/cancel") for i in ids], ids


def reschedule(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    ids = flat(params["event"])
    return [api.post(f"/v1/ec2/events/{i}/reschedule", {"not_before": params["not_before"]}) for i in ids], ids


def start(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    outcome = api.post(f"/v1/ec2/instances/{params['instance']}/start")
    return outcome, event_ids_of(outcome)


def spot(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    path = "/v1/ec2/spot/interrupt" if step.do == "ec2-interrupt" else "/v1/ec2/spot/rebalance"
    outcome = api.post(path, params)
    return outcome, event_ids_of(outcome)


def query_api(api: StepApi, step: StepCall, params: dict) -> tuple[Any, list[str]]:
    """A form of the EC2 Query API: one text value a parameter (a `$step` reference gives a list of one)."""
    form = {}
    for key, value in params.items():
        if isinstance(value, list):
            if len(value) != 1:
                raise StepRefused(f"steps[{step.index}].with.{key}: {len(value)} values for one Query parameter")
            value = value[0]
        form[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return api.ec2_query(form)


SCHEDULE_KEYS = ("notice", "not_before", "window", "no_not_after", "deadline", "no_deadline", "description")

ACTIONS: dict[str, StepAction] = {
    "ec2-schedule": StepAction(schedule, ("code", "instances"), SCHEDULE_KEYS, summary="POST /v1/ec2/events"),
    "ec2-cancel": StepAction(cancel, ("event",), (), summary="POST /v1/ec2/events/{id}/cancel"),
    "ec2-reschedule": StepAction(
        reschedule, ("event", "not_before"), (), summary="POST /v1/ec2/events/{id}/reschedule"
    ),
    "ec2-start": StepAction(start, ("instance",), (), summary="POST /v1/ec2/instances/{instance}/start"),
    "ec2-interrupt": StepAction(
        spot, ("instances",), ("action",), summary="POST /v1/ec2/spot/interrupt", targets_instances=True
    ),
    "ec2-rebalance": StepAction(
        spot, ("instances",), (), summary="POST /v1/ec2/spot/rebalance", targets_instances=True
    ),
    "ec2-api": StepAction(
        query_api, ("Action",), (), any_keys=True, summary="the EC2 Query API (form POST to --ec2-url)"
    ),
}


class Ec2Steps:
    actions = ACTIONS
    time_keys = ("not_before", "NotBefore")
    scheduled_by_wave = None

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        """The run's live events, the impacts they left on instances, and the Spot actions it asked for that are
        still to come: none of them can be timed from here, so the clock goes deadline by deadline."""
        times: list[datetime | None] = []
        if any(event["event_id"] in created for event in api.get("/v1/ec2/events")):
            times.append(None)
        for instance in api.get("/v1/ec2/instances"):
            if event_of(instance.get("impacted_by")) in created:
                times.append(None)
            action_time = parse_optional_time(instance.get("spot_action_time"))
            if instance["instance_id"] in targets and action_time is not None and action_time > now:
                times.append(None)
        return times


STEPS = Ec2Steps()
