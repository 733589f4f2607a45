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

    def text(self, path: str, **params: Any) -> str:
        """The exact bytes a GET of the control API answers (a metadata document as the machine reads it)."""
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

    @property
    def checks(self) -> Mapping[str, MachineCheck]:
        """The cloud's checks of one machine in a scenario's ``expect:``, by the key that names the machine."""
        ...

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        """What of the run's own is still live on this cloud: for each, the earliest time it can change (None: it
        cannot be told). ``created``: the events the run's steps and waves created; ``targets``: the instances its
        steps acted on (``targets_instances``). Empty: nothing is live."""
        ...


class CheckRecord(Protocol):
    """One check of a scenario's ``expect:`` about a machine, as its cloud's :class:`MachineCheck` runs it on a
    run's timeline (the runner's ``scenarios/expect.py``)."""

    @property
    def target(self) -> str:
        """The machine it is about."""
        ...

    @property
    def checks(self) -> Mapping[str, Any]:
        """Its keys and what they expect, as the run's timing resolved them."""
        ...

    @property
    def tolerance(self) -> float:
        """How far, in seconds, a recorded time may be from an expected one (0: exact, on a manual clock)."""
        ...

    def add(self, name: str, passed: bool, detail: str) -> None:
        """One result: what was checked, whether it held, what was seen."""
        ...

    def observed(self, key: str) -> list[dict] | None:
        """What the timeline's ``key`` (an observer's) recorded of the target; None, reported as a failed result,
        when it was not observed."""
        ...

    def time(self, value: Any) -> datetime:
        """A time as a scenario writes it (ISO 8601, or start+DURATION from the run's start)."""
        ...

    def seconds(self, value: Any) -> float:
        """A duration as a scenario writes it (``15m``, ``PT15M``), in seconds."""
        ...

    def offset(self, seconds: float) -> str:
        """Seconds from the run's start as the run's output shows them (``+00:15:00``)."""
        ...


@dataclass(frozen=True)
class MachineCheck:
    """A kind of check in a scenario's ``expect:`` about one machine of a cloud (``vm: NAME``): the keys it takes,
    the fleet members it may name, how its values are checked when the file is read, and how it runs on a timeline.
    A cloud gives its own through ``ScenarioSteps.checks``, each under the key that names its machine."""

    run: Callable[[CheckRecord, Mapping[str, Any]], None]  # (the check, the run's timeline)
    keys: tuple[str, ...]
    member: str  # the kind of fleet member it names: "vm" or "instance"
    noun: str  # how a problem names one: "a VM", "an EC2 instance"
    lists: tuple[str, ...] = ()  # keys whose value is a list
    flags: tuple[str, ...] = ()  # keys whose value is true or false
    numbers: tuple[str, ...] = ()  # keys whose value is a whole number
    durations: tuple[str, ...] = ()  # keys whose value is a duration
    times: tuple[str, ...] = ()  # keys whose value is a list of times
    # What else is wrong with its values, as a timing resolved them: problems, each (where under the check, message).
    check: Callable[[Mapping[str, Any]], list[tuple[tuple, str]]] | None = None


class RunRecord(Protocol):
    """The run an observer records into (the scenario runner)."""

    def stamp(self) -> dict[str, Any]:
        """Where the run is now: ``time`` (the server's clock at its last reading) and ``offset`` (seconds since the
        run began), the start of every record in the timeline."""
        ...

    def line(self, who: str, mark: str, text: str) -> None:
        """One line of the run's output, at the run's current time (``who``: the machine, ``mark``: a version)."""
        ...


class ScenarioObserver(Protocol):
    """What a scenario run records of one cloud's machines, a new one for each run (``Cloud.scenario_observer``):
    which of them it watches, what it reads when the server's journal says they changed, what it adds to the run's
    timeline. A client of the server, as the steps are."""

    @property
    def event_keys(self) -> Sequence[str]:
        """Its timeline keys that hold the run's events of the cloud, in the control API's JSON (each with
        ``event_id``): where an ``event`` check of a scenario finds a step's events."""
        ...

    def begin(self, api: StepApi, machines: Sequence[str], observe: Sequence[str], every: bool) -> None:
        """The run begins: ``machines``, the fleet's machines of this cloud (``GET /v1/fleet/machines``);
        ``observe``, the names the scenario observes (of every cloud); ``every``: the scenario names none, so every
        machine is observed, those that appear later (a replacement) too."""
        ...

    def note(self, entry: Mapping[str, Any]) -> None:
        """One entry of the server's journal since the last observation: what it says changed (its ``what`` and the
        names it carries) is what the next observation reads again."""
        ...

    def observe(self, api: StepApi, run: RunRecord, everything: bool) -> None:
        """Read what the noted entries changed of the watched machines, and record what is new (``everything``:
        read all of them, at the start or when the journal moved on too far to tell)."""
        ...

    def quiet_until(self) -> tuple[bool, datetime | None]:
        """(known, until): the earliest time a deadline can change what it records (until None: none can); known
        False when that cannot be told (then the clock goes deadline by deadline)."""
        ...

    def finish(self, api: StepApi, start: datetime, journal: Mapping[str, list[dict]] | None) -> None:
        """Read the final state: the cloud's events created since ``start``, each with its history (``journal``:
        the journal's entries by event id, None when the run could not read all of them)."""
        ...

    def timeline(self) -> dict[str, Any]:
        """Its keys of the run's timeline (what it recorded, and what ``finish`` read)."""
        ...


def flat(value: Any) -> list[str]:
    """A step's parameter as a list of names (a ``$step`` reference is a list already; lists may nest)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [item for part in value for item in flat(part)]


def check_changed(check: CheckRecord, entries: list[dict], flag: str, field: str, shown: str) -> None:
    """The ``flag: true|false`` check of a machine (``moved``, ``rebooted``): whether ``field`` differs between the
    first state observed and the last, said as ``shown first -> last``."""
    if flag not in check.checks:
        return
    changed = bool(entries) and entries[0][field] != entries[-1][field]
    check.add(
        flag if check.checks[flag] else f"not {flag}",
        changed == check.checks[flag],
        f"{shown} {entries[0][field]} -> {entries[-1][field]}" if entries else "no state seen",
    )


def distinct(values: list) -> list:
    """The values with each run of equal ones kept once: what a machine went through, each change once."""
    result: list = []
    for value in values:
        if not result or result[-1] != value:
            result.append(value)
    return result


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
    checks: Mapping[str, MachineCheck] = field(default_factory=dict)

    def pending(self, api: StepApi, created: set[str], targets: set[str], now: datetime) -> list[datetime | None]:
        return []


NO_STEPS: ScenarioSteps = NoSteps()
