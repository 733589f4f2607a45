"""Scenarios: maintenance stories as data (YAML), run against a forewarn server through its control API.

``forewarn scenario list | show NAME | run NAME``; the format is in docs/scenarios.md. The shipped scenarios are
the YAML files in ``library/``.
"""

from forewarn.scenarios.spec import (
    TIMINGS,
    Scenario,
    ScenarioError,
    ScenarioFile,
    load_library,
    load_scenario,
    parse_scenario,
    shipped_names,
)

__all__ = [
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


def __getattr__(name):  # the runner (httpx, subprocesses) is loaded only when a scenario runs
    if name in ("run_scenario", "RunOptions"):
        from forewarn.scenarios import runner

        return getattr(runner, name)
    raise AttributeError(name)
