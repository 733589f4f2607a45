"""What a cloud gives a scenario (``do:`` in a scenario file): its steps, their fields, and how each runs.

A cloud's steps are a client of the server, as the scenario runner is: they speak the control API (and a cloud's own
API, such as EC2's Query API) over HTTP, through the runner's client, and never import the engine or a cloud's
component or model (tests/test_dependencies.py). Each cloud gives its steps through ``Cloud.scenario_steps``
(forewarn/cloud.py); the scenario parser and runner iterate the registered clouds.

This module names no scenario type: the runner's client and its resolved step reach a cloud's steps as the
structural types below, so that a cloud's steps, the runner and the ``Cloud`` protocol each depend on this module and
not on each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


class StepRefused(Exception):
    """A step's parameters cannot be sent as asked (not an answer of the server)."""


class StepApi(Protocol):
    """The runner's client of a server, as a step uses it (``forewarn.scenarios.api.Api``). A refused request raises
    its ``ApiError``."""

    def get(self, path: str, **params: Any) -> Any: ...

    def post(self, path: str, body: dict | None = None) -> Any: ...

    def patch(self, path: str, body: dict) -> Any: ...

    def put(self, path: str, body: dict) -> Any: ...

    def document(self, vm: str) -> str:
        """The exact bytes the VM's Scheduled Events document is now."""
        ...

    def ec2_query(self, params: dict[str, str]) -> tuple[str, list[str]]:
        """An EC2 Query API form's answer (XML) and the ids it names."""
        ...

    def ec2_json(self, target: str, body: dict) -> dict:
        """A JSON-protocol call on the EC2 API's port (``X-Amz-Target``, e.g. ``AmazonSQS.ReceiveMessage``): its
        answer."""
        ...


class StepCall(Protocol):
    """A step as the runner takes it: its place in the file, its action, who it acts as (``as``)."""

    @property
    def index(self) -> int: ...

    @property
    def do(self) -> str: ...

    @property
    def actor(self) -> str | None: ...


# A step's run: its answer, and the ids it produced (its ``id:`` names them for later steps).
StepRun = Callable[[StepApi, StepCall, dict], tuple[Any, list[str]]]

# A check of a step when the file is read, beyond its keys: (the step's mapping, its ``with``, the fleet's members
# by kind: vm, host, instance) -> the problems, each (where under the step, message).
StepCheck = Callable[[Mapping, Mapping, Mapping[str, Any]], list[tuple[tuple, str]]]


@dataclass(frozen=True)
class StepAction:
    """What a step's ``do`` can be: the keys its ``with`` takes, which are required, and how it runs."""

    run: StepRun
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    any_keys: bool = False  # a cloud API's own parameters, free-form (ec2-api)
    summary: str = ""
    actor: str | None = None  # what its ``as`` names (e.g. "who approves"); None: it takes no ``as``
    check: StepCheck | None = None
    targets_instances: bool = False  # the instances in its ``with`` are the run's to wait for (a Spot interruption)


class ScenarioSteps(Protocol):
    """A cloud's steps of a scenario, and what a run that took them waits for before it settles."""

    @property
    def actions(self) -> Mapping[str, StepAction]:
        """The cloud's steps by their ``do`` name, in the order ``forewarn scenario`` lists them."""
        ...

    @property
    def time_keys(self) -> Sequence[str]:
        """``with`` keys of its steps whose values are times (ISO 8601, or start+DURATION)."""
        ...

    @property
    def scheduled_by_wave(self) -> str | None:
        """The journal's ``what`` for an event of this cloud that a wave scheduled (the run waits for those of its
        own waves), or None when a wave schedules none."""
        ...

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        """What of the run's own is still live on this cloud: for each, the earliest time it can change (None: it
        cannot be told). ``created``: the events the run's steps and waves created; ``targets``: the instances its
        steps acted on (``targets_instances``). Empty: nothing is live."""
        ...


def flat(value: Any) -> list[str]:
    """A step's parameter as a list of names (a ``$step`` reference is a list already; lists may nest)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [item for part in value for item in flat(part)]


def event_of(impacted_by: str | None) -> str | None:
    """The event id of a VM's or an instance's ``impacted_by`` ("EVENTID" or "EVENTID (extra impact)")."""
    return impacted_by.split(" ", 1)[0] if impacted_by else None


def event_ids_of(answer: Any) -> list[str]:
    """The ids of the events an answer holds: a list of events, or a mapping with ``events``."""
    events = answer if isinstance(answer, list) else (answer or {}).get("events", [])
    return [event["event_id"] for event in events]


@dataclass(frozen=True)
class NoSteps:
    """The steps of a cloud that gives a scenario none (``Cloud.scenario_steps``'s default)."""

    actions: Mapping[str, StepAction] = field(default_factory=dict)
    time_keys: Sequence[str] = ()
    scheduled_by_wave: str | None = None

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        return []


NO_STEPS: ScenarioSteps = NoSteps()
