"""Case files: YAML, one or more cases each, shipped inside each cloud's package and written by users the same way
(docs/conformance.md). A value given as ``{fast: X, realistic: Y}`` takes the one of the run's timing."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from forewarn.conformance_cases import TIMINGS, Case, Check, Step
from forewarn.core.durations import parse_duration
from forewarn.core.errors import Invalid

CASE_KEYS = {
    "name",
    "title",
    "source",
    "machines",
    "limit",
    "settle",
    "steps",
    "checks",
    "required",
    "serve",
    "mode",
    "endpoint",
    "setup",
    "placeholders",
}
PLACEHOLDER_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
BUILT_IN_PLACEHOLDERS = {"metadata_url", "machine", "state_dir", "endpoint_url"}
ACTIONS = ("call", "kill", "drop", "throttle", "advance", "expire")
STEP_KEYS = {
    "at",
    "call",
    "body",
    "kill",
    "restart",
    "after",
    "machine",
    "drop",
    "advance",
    "port",
    "throttle",
    "expire",
    "target",
}


class CaseFileError(Exception):
    pass


def by_timing(value: Any, timing: str) -> Any:
    """``value`` with every ``{fast: X, realistic: Y}`` replaced by the one for ``timing``."""
    if isinstance(value, dict):
        if value and set(value) == set(TIMINGS):
            return by_timing(value[timing], timing)
        return {key: by_timing(item, timing) for key, item in value.items()}
    if isinstance(value, list):
        return [by_timing(item, timing) for item in value]
    return value


def seconds(value: Any, where: str) -> float:
    try:
        return parse_duration(str(value)).total_seconds()
    except Invalid as error:
        raise CaseFileError(f"{where}: {error}") from None


def load_cases(source: Any, cloud: str, timing: str, cloud_checks: Iterable[str] = ()) -> list[Case]:
    """The cases of one file (a path or a packaged resource), for ``timing``; ``cloud_checks``: the names of the
    cloud's own checks, beside the common ones."""
    name = getattr(source, "name", str(source))
    try:
        data = yaml.safe_load(source.read_text())
    except yaml.YAMLError as error:
        raise CaseFileError(f"{name}: not valid YAML: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise CaseFileError(f"{name}: a case file is a mapping with a list of cases under 'cases'")
    checks = set(cloud_checks)
    return [
        case_of(entry, cloud, timing, f"{name}: cases[{index}]", checks) for index, entry in enumerate(data["cases"])
    ]


def case_of(entry: Any, cloud: str, timing: str, where: str, cloud_checks: set[str]) -> Case:
    if not isinstance(entry, dict):
        raise CaseFileError(f"{where}: a case is a mapping")
    unknown = set(entry) - CASE_KEYS
    if unknown:
        raise CaseFileError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    for key in ("name", "title", "source", "machines", "checks"):
        if key not in entry:
            raise CaseFileError(f"{where}: {key!r} is missing")
    entry = by_timing(entry, timing)
    checks = [check_of(check, f"{where}.checks[{i}]", cloud_checks) for i, check in enumerate(entry["checks"])]
    return Case(
        name=str(entry["name"]),
        cloud=cloud,
        title=str(entry["title"]),
        machines=[str(machine) for machine in entry["machines"]],
        steps=[step_of(step, f"{where}.steps[{i}]") for i, step in enumerate(entry.get("steps", []))],
        checks=checks,
        source=str(entry["source"]),
        limit=seconds(entry.get("limit", "60s"), f"{where}.limit"),
        settle=max(seconds(entry.get("settle", "1s"), f"{where}.settle"), restore_window(checks)),
        required=bool(entry.get("required", True)),
        file=str(where.split(":")[0]),
        serve=[str(option) for option in entry.get("serve", [])],
        mode=mode_of(entry.get("mode", "metadata"), f"{where}.mode"),
        endpoint=endpoint_of(entry.get("endpoint"), f"{where}.endpoint"),
        setup=[step_of(step, f"{where}.setup[{i}]") for i, step in enumerate(entry.get("setup", []))],
        placeholders=placeholders_of(entry.get("placeholders", {}), f"{where}.placeholders"),
    )


def mode_of(value: Any, where: str) -> str:
    if not isinstance(value, str) or not PLACEHOLDER_NAME.match(value):
        raise CaseFileError(f"{where}: a mode is a word: metadata (the default), queue, ...")
    return value


def endpoint_of(value: Any, where: str) -> str | None:
    if value is not None and not str(value).isalnum():
        raise CaseFileError(f"{where}: names one of the server's ports (ec2, gce, arm)")
    return None if value is None else str(value)


def placeholders_of(value: Any, where: str) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise CaseFileError(f"{where}: a mapping of placeholder names to their values")
    for name in value:
        if not PLACEHOLDER_NAME.match(str(name)) or name in BUILT_IN_PLACEHOLDERS:
            raise CaseFileError(
                f"{where}.{name}: a placeholder is lower-case letters, digits and _, not a built-in one"
            )
    return {str(name): str(text) for name, text in value.items()}


def restore_window(checks: list[Check]) -> float:
    """The longest window a restore check grades (``within``): a case goes on that long once its events settled,
    so that a restore that comes within the window is seen, not cut off by the case's end."""
    windows = [float(c.options.get("within", 10.0)) for c in checks if c.kind.startswith("restored")]
    return max(windows, default=0.0)


def step_of(entry: Any, where: str) -> Step:
    if not isinstance(entry, dict) or set(entry) - STEP_KEYS:
        raise CaseFileError(f"{where}: a step has the keys {', '.join(sorted(STEP_KEYS))}")
    if sum(key in entry for key in ACTIONS) != 1:
        raise CaseFileError(
            f"{where}: a step is one of a 'call' (METHOD /v1/PATH), a 'kill' (a signal name), a 'drop', 'throttle'"
            " or 'advance' (a duration), an 'expire' (a header name)"
        )
    if "after" in entry and entry["after"] != "noticed":
        raise CaseFileError(f"{where}: 'after' can only be 'noticed'")
    if "port" in entry and ("call" not in entry or not str(entry["port"]).isalnum()):
        raise CaseFileError(f"{where}: 'port' names one of the server's ports (ec2, gce, arm), for a 'call'")
    if "target" in entry and "port" not in entry:
        raise CaseFileError(f"{where}: 'target' (an X-Amz-Target action) goes with a 'port'")
    durations = {
        key: seconds(entry[key], f"{where}.{key}") for key in ("restart", "drop", "throttle", "advance") if key in entry
    }
    return Step(
        at=seconds(entry.get("at", 0), f"{where}.at"),
        call=entry.get("call"),
        body=entry.get("body"),
        kill=entry.get("kill"),
        restart=durations.get("restart"),
        after=entry.get("after"),
        machine=entry.get("machine"),
        drop=durations.get("drop"),
        advance=durations.get("advance"),
        throttle=durations.get("throttle"),
        expire=None if entry.get("expire") is None else str(entry["expire"]),
        port=None if entry.get("port") is None else str(entry["port"]),
        target=None if entry.get("target") is None else str(entry["target"]),
    )


def check_of(entry: Any, where: str, cloud_checks: set[str]) -> Check:
    from forewarn.conformance.grading import CHECKS

    kind, options = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()), ("", {}))
    if isinstance(entry, dict) and len(entry) != 1:
        raise CaseFileError(f"{where}: a check is a name, or one name with its options")
    if kind not in CHECKS and kind not in cloud_checks:
        known = ", ".join(sorted({*CHECKS, *cloud_checks}))
        raise CaseFileError(f"{where}: unknown check {kind!r}; the checks are {known}")
    options = dict(options or {})
    if "within" in options:
        options["within"] = seconds(options["within"], f"{where}.within")
    return Check(kind, options)


def select(cases: Iterable[Case], names: Sequence[str] | None) -> list[Case]:
    cases = list(cases)
    if not names:
        return cases
    known = {case.name for case in cases}
    missing = [name for name in names if name not in known]
    if missing:
        raise CaseFileError(f"no case {missing[0]!r}; the cases are {', '.join(sorted(known))}")
    return [case for case in cases if case.name in names]


def user_file(path: str) -> Path:
    file = Path(path)
    if not file.is_file():
        raise CaseFileError(f"{path}: no such case file")
    return file
