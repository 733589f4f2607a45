"""Scenario files (YAML): reading, validating, and resolving them for one timing.

A scenario names a fleet, the steps to take at given simulated times (through the control API, or the EC2 Query
API), which VMs to observe, and what their timeline must show. The format is documented in docs/scenarios.md.
Every problem is reported as ``FILE:LINE: WHERE: PROBLEM``, e.g.
``my.yaml:12: steps[2].do: unknown action 'aprove'; expected one of approve, cancel, ...``.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from forewarn import yamlfile
from forewarn.core.durations import parse_duration
from forewarn.core.errors import CoreError, did_you_mean
from forewarn.core.times import parse_time
from forewarn.scenario_steps import StepAction
from forewarn.scenarios.actions import EVENT_CHECK
from forewarn.scenarios.actions import steps as steps_of_clouds
from forewarn.scenarios.timings import DEFAULT_TIMING, TIMINGS
from forewarn.yamlfile import YamlFileError, line_of, where

LIBRARY_DIR = "library"
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
START_PLUS = re.compile(r"^start\s*\+\s*(?P<duration>\S.*)$")
EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")


class ScenarioError(Exception):
    """A scenario file was refused; the message names the file, the line, where and the problem (one per line)."""


# ``with`` keys whose values are fleet members, checked against the fleet when the file is read.
_MEMBER_KEYS = {"vms": "vm", "vm": "vm", "hosts": "host", "instances": "instance", "instance": "instance"}
_LIST_KEYS = ("vms", "hosts", "instances", "groups")

STEP_KEYS = ("at", "after", "do", "id", "as", "with", "fails", "note", "only")
TOP_KEYS = (
    "name",
    "title",
    "description",
    "source",
    "start",
    "fleet",
    "timing",
    "server",
    "observe",
    "steps",
    "expect",
)
SERVER_KEYS = ("notice", "impact_window", "hardware_failure_type")

# The check of a step's events (`event: $ID`); each cloud gives its checks of a machine (ScenarioSteps.checks).
EVENT_KEYS = ("status", "journal", "approved_by", "count", "not_before", "not_after")
EVENT_LISTS = ("journal", "approved_by")
EXPECT_COMMON = ("note", "only")


# ---------------------------------------------------------------------------------------------- resolved forms
@dataclass(frozen=True)
class Step:
    index: int
    time: timedelta  # from the start of the run
    do: str
    id: str | None
    actor: str | None  # `as`
    params: dict  # timing resolved; `$step` references and start+D times are resolved when the step runs
    fails: str | None
    note: str | None


@dataclass(frozen=True)
class Expectation:
    index: int
    kind: str  # the key naming what it is about: a cloud's machine check's (vm, instance, gce), or event
    target: str  # a machine's name in the fleet, or `$step`
    checks: dict
    vm: str | None = None  # event expectations: only the step's events whose Resources include this VM
    note: str | None = None


@dataclass(frozen=True)
class Scenario:
    """A scenario resolved for one timing: what the runner executes."""

    name: str
    title: str
    description: str
    source: str
    path: str
    timing: str
    start: datetime | None
    fleet_text: str  # the fleet file a private server is started with
    vms: tuple[str, ...]
    instances: tuple[str, ...]
    observe: tuple[str, ...]
    observe_all: bool  # no `observe:` given: every VM and instance, replacements included
    server: dict  # notice / impact_window: {TYPE: duration}; hardware_failure_type
    steps: tuple[Step, ...]
    expectations: tuple[Expectation, ...]

    def server_args(self) -> list[str]:
        """``forewarn serve`` options a private server gets for this scenario's timing."""
        args: list[str] = []
        for option, key in (("--notice", "notice"), ("--impact-window", "impact_window")):
            for event_type, duration in (self.server.get(key) or {}).items():
                args += [option, f"{event_type}={duration}"]
        if self.server.get("hardware_failure_type"):
            args += ["--hardware-failure-type", str(self.server["hardware_failure_type"])]
        return args


@dataclass
class ScenarioFile:
    """A validated scenario file, for both timings."""

    name: str
    title: str
    description: str
    source: str
    path: str
    text: str
    data: dict
    fleet_text: str
    vms: tuple[str, ...]
    instances: tuple[str, ...]
    lines: dict = field(repr=False, default_factory=dict)
    fleet_ports: bool = False  # some VM or instance of the fleet has an IMDS port of its own
    _server_fleet: str | None = field(default=None, init=False, repr=False)

    def server_fleet_text(self) -> str:
        """The fleet a private server gets (worked out once: on a large fleet it takes seconds)."""
        if self._server_fleet is None:
            self._server_fleet = server_fleet(self.fleet_text) if self.fleet_ports else self.fleet_text
        return self._server_fleet

    def resolve(self, timing: str = DEFAULT_TIMING) -> Scenario:
        if timing not in TIMINGS:
            raise ScenarioError(f"unknown timing {timing!r}; expected one of {', '.join(TIMINGS)}")
        return _resolve(self, timing)

    def summary(self) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "source": self.source,
            "file": self.path,
        }


# ---------------------------------------------------------------------------------------------------- problems
class _Report:
    """Collects problems with their lines, and raises them all at once."""

    def __init__(self, filename: str, lines: dict):
        self.filename = filename
        self.lines = lines
        self.problems: list[str] = []

    def line_of(self, path: tuple) -> int:
        return line_of(path, self.lines)

    def add(self, path: tuple, message: str) -> None:
        text = f"{self.filename}:{self.line_of(path)}: {where(path)}: {message}"
        if text not in self.problems:
            self.problems.append(text)

    def raw(self, text: str) -> None:
        self.problems.append(text)

    def check(self) -> None:
        if self.problems:
            raise ScenarioError("\n".join(self.problems))


# ---------------------------------------------------------------------------------------------------- library
def library_path() -> Path:
    return Path(str(resources.files("forewarn.scenarios").joinpath(LIBRARY_DIR)))


def shipped_names() -> list[str]:
    return sorted(path.stem for path in library_path().glob("*.yaml"))


def find_scenario(name_or_path: str) -> Path:
    """A shipped scenario's name, or a path to a scenario file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists() or "/" in name_or_path:
        if not candidate.is_file():
            raise ScenarioError(f"{name_or_path}: no such scenario file")
        return candidate
    shipped = library_path() / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    names = shipped_names()
    raise ScenarioError(
        f"unknown scenario {name_or_path!r}{did_you_mean(name_or_path, names) or ';'} shipped scenarios: "
        f"{', '.join(names)} (or give the path of a scenario file)"
    )


def load_scenario(name_or_path: str | Path) -> ScenarioFile:
    path = find_scenario(str(name_or_path))
    try:
        text = yamlfile.read_text(path, "scenario file")
    except YamlFileError as error:
        raise ScenarioError(str(error)) from None
    return parse_scenario(text, str(path), base_dir=path.parent)


def load_library() -> list[ScenarioFile]:
    return [load_scenario(library_path() / f"{name}.yaml") for name in shipped_names()]


# ---------------------------------------------------------------------------------------------------- parsing
def parse_scenario(text: str, filename: str = "<scenario>", base_dir: Path | None = None) -> ScenarioFile:
    try:
        document = yamlfile.parse(text, filename)
    except YamlFileError as error:
        raise ScenarioError(str(error)) from None
    data, lines = document.data, document.lines
    report = _Report(filename, lines)
    if data is None:
        raise ScenarioError(
            f"{filename}:1: the scenario file is empty; a scenario file is a mapping with keys "
            "name, description, fleet, steps, ... (docs/scenarios.md)"
        )
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{filename}:1: a scenario file is a mapping with keys name, description, fleet, steps, ..."
        )
    for key in data:
        if key not in TOP_KEYS:
            report.add((key,), f"unknown key {key!r}; expected {', '.join(TOP_KEYS)}")
    for key in ("name", "description", "fleet", "steps"):
        if key not in data:
            report.add((), f"missing key {key!r}")
    name = data.get("name")
    if "name" in data and (not isinstance(name, str) or not NAME.match(name)):
        report.add(("name",), "a name is lowercase letters, digits, '-', '_' and '.'")
    for key in ("title", "description", "source"):
        if key in data and not isinstance(data[key], str):
            report.add((key,), "expected text")
    if "start" in data:
        try:
            _parse_time(str(data["start"]))
        except ValueError as error:
            report.add(("start",), str(error))

    timing_names = _check_timing(data.get("timing"), report)
    fleet_text, vms, hosts, instances, fleet_ports = _check_fleet(
        data, document.marks, text, filename, base_dir, report
    )
    # A fleet that could not be read has had its problems reported; names are not checked against it.
    names: tuple[Container[str], Container[str], Container[str]] = (
        (set(vms), set(hosts), set(instances)) if fleet_text else (_ANY_NAME, _ANY_NAME, _ANY_NAME)
    )
    _check_server(data.get("server"), timing_names, report)
    step_ids = _check_steps(data.get("steps"), timing_names, *names, report)
    _check_observe(data.get("observe"), names[0], names[2], report)
    _check_expect(data.get("expect"), timing_names, step_ids, names[0], names[2], report)
    report.check()
    name = data["name"]  # text, now that the checks passed
    scenario = ScenarioFile(
        name=name,
        title=(data.get("title") or name).strip(),
        description=data["description"].strip(),
        source=(data.get("source") or "").strip(),
        path=filename,
        text=text,
        data=data,
        fleet_text=fleet_text,
        vms=tuple(vms),
        instances=tuple(instances),
        lines=lines,
        fleet_ports=fleet_ports,
    )
    for timing in TIMINGS:  # every value must resolve, and the steps must be in time order, in both timings
        _resolve(scenario, timing, report)
    report.check()
    return scenario


class _AnyName:
    """Every name: what the members of a fleet that could not be read are checked against."""

    def __contains__(self, name: object) -> bool:
        return True


_ANY_NAME = _AnyName()


def _check_timing(timing: Any, report: _Report) -> set[str]:
    if timing is None:
        return set()
    if not isinstance(timing, dict):
        report.add(("timing",), "expected a mapping of names to {fast: ..., realistic: ...}")
        return set()
    for key, value in timing.items():
        if not isinstance(key, str) or not IDENT.match(key):
            report.add(("timing", key), "a timing name is a letter followed by letters, digits, '-' or '_'")
        if not _is_choice(value):
            report.add(("timing", key), "expected {fast: VALUE, realistic: VALUE}")
    return {key for key in timing if isinstance(key, str)}


def _is_choice(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == set(TIMINGS)


def _check_fleet(
    data: dict, marks: dict, text: str, filename: str, base_dir: Path | None, report: _Report
) -> tuple[str, list[str], list[str], list[str], bool]:
    """The fleet's text (as the server will read it) and its members; fleet-file errors with this file's lines."""
    from forewarn.fleet.file import FleetFileError, parse_fleet  # the fleet file's own parser, not the engine

    fleet = data.get("fleet")
    if fleet is None:
        return "", [], [], [], False
    offset, label = 0, None
    if fleet == "demo":
        fleet_text = resources.files("forewarn.data").joinpath("demo-fleet.yaml").read_text()
        label = "demo-fleet.yaml"
    elif isinstance(fleet, str):
        path = Path(fleet) if Path(fleet).is_absolute() or base_dir is None else base_dir / fleet
        try:
            fleet_text = yamlfile.read_text(path, "fleet file")
        except YamlFileError as error:
            report.add(("fleet",), str(error))
            return "", [], [], [], False
        label = str(path)
    elif isinstance(fleet, dict):
        start, end = marks[("fleet",)]
        fleet_text = textwrap.dedent(" " * start.column + text[start.index : end.index])
        offset = start.line
    else:
        report.add(("fleet",), "expected `demo`, the path of a fleet file, or a fleet (mapping) inline")
        return "", [], [], [], False
    token = "\x00fleet"
    try:
        parsed = parse_fleet(fleet_text, token)
    except FleetFileError as error:
        for problem in str(error).splitlines():
            match = re.match(re.escape(token) + r":(\d+): (.*)$", problem)
            if match is None:
                report.raw(f"{filename}:{report.line_of(('fleet',))}: fleet: {problem.replace(token, 'fleet')}")
            elif label is None:
                report.raw(f"{filename}:{int(match.group(1)) + offset}: fleet.{match.group(2)}")
            else:
                report.raw(
                    f"{filename}:{report.line_of(('fleet',))}: fleet: {label}:{match.group(1)}: {match.group(2)}"
                )
        return "", [], [], [], False
    ports = any(machine.imds_port is not None for machine in parsed.machines())
    # Every cloud's instances are `instances` of a scenario (their names never collide in a fleet).
    vms = [name for part in parsed.parts.values() if part.machine_kind == "vm" for name in part.machines]
    instances = [name for part in parsed.parts.values() if part.machine_kind != "vm" for name in part.machines]
    return fleet_text, vms, list(parsed.hosts), instances, ports


def _check_server(server: Any, timing_names: set[str], report: _Report) -> None:
    if server is None:
        return
    if not isinstance(server, dict):
        report.add(("server",), f"expected a mapping with keys {', '.join(SERVER_KEYS)}")
        return
    for key, value in server.items():
        path = ("server", key)
        if key not in SERVER_KEYS:
            report.add(path, f"unknown key {key!r}; expected {', '.join(SERVER_KEYS)}")
        elif key == "hardware_failure_type":
            if value not in ("Redeploy", "Reboot"):
                report.add(path, "expected Redeploy or Reboot")
        elif not isinstance(value, dict):
            report.add(path, "expected a mapping of event types to durations, e.g. {Reboot: 10s}")
        else:
            for event_type in value:
                if event_type not in EVENT_TYPES:
                    report.add(path + (event_type,), f"unknown event type; expected {', '.join(EVENT_TYPES)}")
            _check_refs(value, path, timing_names, set(), report)


def _check_refs(value: Any, path: tuple, timing_names: set[str], step_ids: set[str], report: _Report) -> None:
    """Every `$name` is a timing or an earlier step's id."""
    if isinstance(value, str) and value.startswith("$"):
        ref = value[1:]
        if ref not in timing_names and ref not in step_ids:
            known = sorted(timing_names | step_ids)
            report.add(
                path,
                f"unknown reference {value!r}: not a timing name nor the id of an earlier step"
                + (f" (known: {', '.join('$' + k for k in known)})" if known else ""),
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_refs(item, path + (key,), timing_names, step_ids, report)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_refs(item, path + (index,), timing_names, step_ids, report)


def _check_steps(
    steps: Any,
    timing_names: set[str],
    vms: Container[str],
    hosts: Container[str],
    instances: Container[str],
    report: _Report,
) -> set[str]:
    ids: set[str] = set()
    if steps is None:
        return ids
    if not isinstance(steps, list) or not steps:
        report.add(("steps",), "expected a list of steps (at least one)")
        return ids
    members = {"vm": vms, "host": hosts, "instance": instances}
    for index, step in enumerate(steps):
        path = ("steps", index)
        if not isinstance(step, dict):
            report.add(path, "a step is a mapping: {at: 0s, do: schedule, with: {...}}")
            continue
        _check_step_timing(step, path, timing_names, report)
        action = _check_action(step, path, report)
        params = _step_params(step, path, report)
        if action is not None:
            _check_params(step, params, action, members, path, report)
        if "fails" in step and (not isinstance(step["fails"], str) or not step["fails"]):
            report.add(path + ("fails",), "expected the error code the step must fail with, e.g. Conflict")
        for key in steps_of_clouds().time_keys:
            value = params.get(key)
            if isinstance(value, str) and not value.startswith("$"):
                try:
                    _parse_time_expression(value)
                except ValueError as error:
                    report.add(path + ("with", key), str(error))
        _check_refs(params, path + ("with",), timing_names, ids, report)
        _check_step_id(step, path, timing_names, ids, report)
    return ids


def _check_step_timing(step: dict, path: tuple, timing_names: set[str], report: _Report) -> None:
    """Its keys, and when it runs (`at` or `after`, and `only` a timing)."""
    for key in step:
        if key not in STEP_KEYS:
            report.add(path + (key,), f"unknown key {key!r}; a step takes {', '.join(STEP_KEYS)}")
    if ("at" in step) == ("after" in step):
        report.add(path, "give exactly one of `at` (time from the start) and `after` (time after the previous step)")
    for key in ("at", "after"):
        if key in step:
            _check_refs(step[key], path + (key,), timing_names, set(), report)
    if "only" in step and step["only"] not in TIMINGS:
        report.add(path + ("only",), f"expected one of {', '.join(TIMINGS)}")


def _check_action(step: dict, path: tuple, report: _Report) -> StepAction | None:
    actions = steps_of_clouds().actions
    do = step.get("do")
    action = actions.get(do) if isinstance(do, str) else None
    if "do" not in step:
        report.add(path, "missing key 'do' (the action)")
    elif action is None:
        hint = did_you_mean(do, actions) if isinstance(do, str) else ""
        report.add(path + ("do",), f"unknown action {do!r}; expected one of {', '.join(actions)}{hint}")
    return action


def _step_params(step: dict, path: tuple, report: _Report) -> dict:
    params = step.get("with", {})
    if params is None:
        return {}
    if not isinstance(params, dict):
        report.add(path + ("with",), "expected a mapping of the action's parameters")
        return {}
    return params


def _check_params(
    step: dict, params: dict, action: StepAction, members: dict[str, Container[str]], path: tuple, report: _Report
) -> None:
    """What the step's action takes: its keys, the fleet's members it names, its own checks, and who it acts as."""
    do = step["do"]
    for key in action.required:
        if key not in params:
            report.add(path + ("with",), f"{do} needs `{key}`")
    if not action.any_keys:
        allowed = action.required + action.optional
        for key in params:
            if key not in allowed:
                report.add(path + ("with", key), f"{do} takes no {key!r}; it takes {', '.join(allowed) or 'nothing'}")
        for key, kind in _MEMBER_KEYS.items():
            value = params.get(key)
            for name in (value if isinstance(value, list) else [value]) if key in params else []:
                if isinstance(name, str) and not name.startswith("$") and name not in members[kind]:
                    report.add(path + ("with", key), f"{name!r} is not a {kind} of the fleet")
    for where_, message in action.check(step, params, members) if action.check else []:
        report.add(path + where_, message)
    if "as" in step and action.actor is None:
        report.add(path + ("as",), _who_takes_as())


def _who_takes_as() -> str:
    actors = {name: action.actor for name, action in steps_of_clouds().actions.items() if action.actor}
    if len(actors) == 1:
        [(name, actor)] = actors.items()
        return f"only {name} takes `as` ({actor})"
    return f"only {', '.join(actors) or 'no action'} take `as`"


def _check_step_id(step: dict, path: tuple, timing_names: set[str], ids: set[str], report: _Report) -> None:
    if "id" not in step:
        return
    step_id = step["id"]
    if not isinstance(step_id, str) or not IDENT.match(step_id):
        report.add(path + ("id",), "an id is a letter followed by letters, digits, '-' or '_'")
    elif step_id in ids or step_id in timing_names:
        report.add(path + ("id",), f"id {step_id!r} is already used (ids and timing names are shared)")
    else:
        ids.add(step_id)


def _check_observe(observe: Any, vms: Container[str], instances: Container[str], report: _Report) -> None:
    if observe is None:
        return
    if not isinstance(observe, list) or not all(isinstance(item, str) for item in observe):
        report.add(("observe",), "expected a list of VM names, EC2 instance ids and Compute Engine instance names")
        return
    for index, name in enumerate(observe):
        if name not in vms and name not in instances:
            report.add(("observe", index), f"{name!r} is not a VM or an instance of the fleet")


def _check_expect(
    expect: Any,
    timing_names: set[str],
    step_ids: set[str],
    vms: Container[str],
    instances: Container[str],
    report: _Report,
) -> None:
    if expect is None:
        return
    if not isinstance(expect, list):
        report.add(("expect",), "expected a list of checks")
        return
    for index, item in enumerate(expect):
        path = ("expect", index)
        if not isinstance(item, dict):
            report.add(path, "a check is a mapping, e.g. {vm: NAME, never: [Scheduled]}")
            continue
        kinds = expect_kinds()
        kind = _kind_of(item, kinds)
        if kind is None:
            named = [f"`{name}`" for name in kinds]
            report.add(path, f"give exactly one of {', '.join(named[:-1])} and {named[-1]} (what the check is about)")
            continue
        target = item[kind]
        allowed = kinds[kind] + EXPECT_COMMON + (("vm",) if kind == EVENT_CHECK else ())
        for key in item:
            if key != kind and key not in allowed:
                report.add(path + (key,), f"a {kind} check takes {', '.join(kinds[kind])}, not {key!r}")
        if not any(key in item for key in kinds[kind]):
            report.add(path, f"nothing to check; give one of {', '.join(kinds[kind])}")
        if "only" in item and item["only"] not in TIMINGS:
            report.add(path + ("only",), f"expected one of {', '.join(TIMINGS)}")
        checks = {key: value for key, value in item.items() if key in kinds[kind]}
        _check_refs(checks, path, timing_names, set(), report)
        if kind == EVENT_CHECK:
            _check_event_expectation(item, step_ids, vms, path, report)
            _check_value_kinds(checks, path, report, lists=EVENT_LISTS, numbers=("count",))
        else:
            machine = steps_of_clouds().checks[kind]
            members = vms if machine.member == "vm" else instances
            if target not in members:
                report.add(path + (kind,), f"{target!r} is not {machine.noun} of the fleet")
            _check_value_kinds(checks, path, report, machine.lists, machine.flags, machine.numbers)


def expect_kinds() -> dict[str, tuple[str, ...]]:
    """The keys each check of `expect:` takes, by the key naming what it is about: each registered cloud's checks
    of a machine, in the registry's order, then the check of a step's events."""
    machines = {kind: check.keys for kind, check in steps_of_clouds().checks.items()}
    return {**machines, EVENT_CHECK: EVENT_KEYS}


def _kind_of(item: dict, kinds: Mapping[str, Any]) -> str | None:
    """The one key of a check that names what it is about (`vm` is also what an event check narrows to)."""
    if EVENT_CHECK in item:
        return EVENT_CHECK
    found = [kind for kind in kinds if kind in item]
    return found[0] if len(found) == 1 else None


def _check_event_expectation(item: dict, step_ids: set[str], vms: Container[str], path: tuple, report: _Report) -> None:
    target = item[EVENT_CHECK]
    if not (isinstance(target, str) and target.startswith("$") and target[1:] in step_ids):
        report.add(path + (EVENT_CHECK,), "expected `$ID`, the id of a step that creates events")
    if "vm" in item and item["vm"] not in vms:
        report.add(path + ("vm",), f"{item['vm']!r} is not a VM of the fleet")


def _check_value_kinds(
    checks: dict,
    path: tuple,
    report: _Report,
    lists: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
    numbers: tuple[str, ...] = (),
) -> None:
    for key in lists:
        if key in checks and not isinstance(checks[key], list):
            report.add(path + (key,), "expected a list")
    for key in flags:
        if key in checks and not isinstance(checks[key], bool):
            report.add(path + (key,), "expected true or false")
    for key in numbers:
        if key in checks and (not isinstance(checks[key], int) or isinstance(checks[key], bool)):
            report.add(path + (key,), "expected a number")


# -------------------------------------------------------------------------------------------------- resolving
def _parse_time(text: str) -> datetime:
    """:func:`parse_time`, raising ValueError as every check of a scenario file expects."""
    try:
        return parse_time(text)
    except CoreError as error:
        raise ValueError(str(error)) from None


def _parse_time_expression(text: str) -> tuple[str, Any]:
    """``start+DURATION`` → ("start", timedelta); ISO 8601 → ("at", datetime)."""
    match = START_PLUS.match(text.strip())
    if match:
        try:
            return "start", parse_duration(match.group("duration"))
        except CoreError as error:
            raise ValueError(str(error)) from None
    try:
        return "at", _parse_time(text)
    except ValueError:
        raise ValueError(
            f"invalid time {text!r}; use ISO 8601 (2026-04-20T22:26:58Z) or start+DURATION (start+15m)"
        ) from None


def time_value(text: str, start: datetime) -> datetime:
    kind, value = _parse_time_expression(text)
    return start + value if kind == "start" else value


def duration_value(value: Any) -> timedelta:
    try:
        return parse_duration(str(value))
    except CoreError as error:
        raise ValueError(str(error)) from None


def _choose(value: Any, timing: str, timings: dict) -> Any:
    if isinstance(value, str) and value.startswith("$") and value[1:] in timings:
        return _choose(timings[value[1:]][timing], timing, timings)
    if _is_choice(value):
        return _choose(value[timing], timing, timings)
    if isinstance(value, dict):
        return {key: _choose(item, timing, timings) for key, item in value.items()}
    if isinstance(value, list):
        return [_choose(item, timing, timings) for item in value]
    return value


def _resolve(scenario: ScenarioFile, timing: str, report: _Report | None = None) -> Scenario:
    report = report or _Report(scenario.path, scenario.lines)
    data = scenario.data
    timings = {key: value for key, value in (data.get("timing") or {}).items() if _is_choice(value)}
    steps = _resolve_steps(data["steps"], timing, timings, report)
    expectations = _resolve_expectations(data.get("expect") or [], timing, timings, report)
    server = _choose(data.get("server") or {}, timing, timings)
    for key in ("notice", "impact_window"):
        for event_type, value in (server.get(key) or {}).items():
            try:
                duration_value(value)
            except ValueError as error:
                report.add(("server", key, event_type), f"{error} ({timing} timing)")
    report.check()
    observe = data.get("observe")
    return Scenario(
        name=scenario.name,
        title=scenario.title,
        description=scenario.description,
        source=scenario.source,
        path=scenario.path,
        timing=timing,
        start=_parse_time(str(data["start"])) if data.get("start") else None,
        fleet_text=scenario.server_fleet_text(),
        vms=scenario.vms,
        instances=scenario.instances,
        observe=tuple(observe) if observe else scenario.vms + scenario.instances,
        observe_all=not observe,
        server=server,
        steps=tuple(steps),
        expectations=tuple(expectations),
    )


def _resolve_steps(raw_steps: list, timing: str, timings: dict, report: _Report) -> list[Step]:
    """The steps of the timing, each at its time from the start (in order: a step before the previous one is a
    problem)."""
    steps: list[Step] = []
    previous = timedelta(0)
    for index, raw in enumerate(raw_steps):
        path = ("steps", index)
        key = "at" if "at" in raw else "after"
        try:
            offset = duration_value(_choose(raw[key], timing, timings))
        except ValueError as error:
            report.add(path + (key,), f"{error} ({timing} timing)")
            continue
        moment = offset if key == "at" else previous + offset
        if moment < previous:
            report.add(
                path + (key,),
                f"{_clock(moment)} is before the previous step ({_clock(previous)}) in the "
                f"{timing} timing; steps run in order",
            )
        previous = max(previous, moment)
        if raw.get("only", timing) != timing:
            continue
        params = _choose(raw.get("with") or {}, timing, timings)
        for name in _LIST_KEYS:
            if isinstance(params.get(name), str) and not params[name].startswith("$"):
                params[name] = [part.strip() for part in params[name].split(",") if part.strip()]
        steps.append(
            Step(
                index=index,
                time=moment,
                do=raw["do"],
                id=raw.get("id"),
                actor=raw.get("as"),
                params=params,
                fails=raw.get("fails"),
                note=raw.get("note"),
            )
        )
    return steps


def _resolve_expectations(raw_checks: list, timing: str, timings: dict, report: _Report) -> list[Expectation]:
    expectations: list[Expectation] = []
    for index, raw in enumerate(raw_checks):
        if raw.get("only", timing) != timing:
            continue
        kinds = expect_kinds()
        kind = _kind_of(raw, kinds) or EVENT_CHECK  # the file was checked: one kind
        checks = _choose({key: value for key, value in raw.items() if key in kinds[kind]}, timing, timings)
        machine = steps_of_clouds().checks.get(kind)
        if machine is None:
            _check_resolved_times(checks, ("not_before", "not_after"), (), (), index, timing, report)
        else:
            _check_resolved_times(checks, (), machine.times, machine.durations, index, timing, report)
            for where_, problem in machine.check(checks) if machine.check else []:
                report.add(("expect", index, *where_), problem)
        expectations.append(
            Expectation(
                index=index,
                kind=kind,
                target=raw[kind],
                checks=checks,
                vm=raw.get("vm") if kind == EVENT_CHECK else None,
                note=raw.get("note"),
            )
        )
    return expectations


def _check_resolved_times(
    checks: dict,
    times: tuple[str, ...],
    time_lists: tuple[str, ...],
    durations: tuple[str, ...],
    index: int,
    timing: str,
    report: _Report,
) -> None:
    """An expectation's times (each, or each of a list) and durations, as the timing resolved them."""
    for key in durations:
        if key in checks:
            try:
                duration_value(checks[key])
            except ValueError as error:
                report.add(("expect", index, key), f"{error} ({timing} timing)")
    found: list[tuple[tuple[str | int, ...], Any]] = [((key,), checks[key]) for key in times if key in checks]
    for key in time_lists:
        if isinstance(checks.get(key), list):
            found += [((key, number), value) for number, value in enumerate(checks[key])]
    for where_, value in found:
        try:
            _parse_time_expression(str(value))
        except ValueError as error:
            report.add(("expect", index) + where_, f"{error} ({timing} timing)")


def server_fleet(fleet_text: str) -> str:
    """The fleet a private server gets: the same, without the metadata ports of its own a machine or a group of them
    has (``imds: {port: ...}`` in any cloud's section: the runner reads through the control API, and fixed ports
    would keep two private servers, or `make run`, from running side by side)."""
    data = yamlfile.parse(fleet_text, "fleet").data or {}  # read once already, so within the bounds
    if not isinstance(data, dict):
        return fleet_text
    for section in data.values():
        for member in section if isinstance(section, list) else []:
            imds = member.get("imds") if isinstance(member, dict) else None
            if isinstance(imds, dict):
                imds.pop("port", None)
                if not imds:
                    member.pop("imds")
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def _clock(delta: timedelta) -> str:
    return format_offset(delta.total_seconds())


def format_offset(seconds: float) -> str:
    """+HH:MM:SS from the start (+Nd HH:MM:SS beyond a day)."""
    sign = "-" if seconds < 0 else "+"
    whole = int(round(abs(seconds)))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{sign}{days}d {text}" if days else f"{sign}{text}"
