"""Scenarios: maintenance stories as data (YAML), run against a forewarn server through its control API.

``forewarn scenario list | show NAME | run NAME``; the format is in docs/scenarios.md. The shipped scenarios are
the YAML files in ``library/``.
"""

from typing import Any

from forewarn.scenarios.timings import DEFAULT_TIMING, TIMINGS

__all__ = [
    "DEFAULT_TIMING",
    "TIMINGS",
    "Scenario",
    "ScenarioError",
    "ScenarioFile",
    "load_library",
    "load_scenario",
    "parse_scenario",
    "shipped_names",
    "run_scenario",
    "RunOptions",
]


_SPEC = (
    "Scenario",
    "ScenarioError",
    "ScenarioFile",
    "load_library",
    "load_scenario",
    "parse_scenario",
    "shipped_names",
)


def __getattr__(name: str) -> Any:
    # Loaded on first use: the spec (YAML) and the runner (subprocesses) cost start-up time to every forewarn command,
    # which all import this package for the `scenario` group.
    if name in _SPEC:
        from forewarn.scenarios import spec

        return getattr(spec, name)
    if name in ("run_scenario", "RunOptions"):
        from forewarn.scenarios import runner

        return getattr(runner, name)
    raise AttributeError(name)
