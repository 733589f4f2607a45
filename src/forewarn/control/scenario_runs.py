"""Shipped scenarios run on this server, for the dashboard: the scenario runner (a control-API client, the one
``forewarn scenario run NAME --server URL`` uses) in a thread of the server, talking to the server's own control
port like any client, with the server's token. One run at a time; the last few runs are kept with their progress,
their lines and their expectations, until dismissed.

A scenario is written against its own fleet (its expectations name its machines), so it runs only on a server whose
fleet has every machine it names. The list says, for each scenario, whether it fits this server's fleet and, when
not, which machines are missing and the command that serves its fleet (``forewarn serve --fleet scenario:NAME``);
a run of one that does not fit is refused at once (409), rather than recorded as a failed run."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict
from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from forewarn.app.runtime import Maintenance
from forewarn.control.models import ERRORS
from forewarn.core.clock import MANUAL
from forewarn.core.errors import Conflict, Invalid, NotFound

# The ports suggested for a server of a scenario's own fleet: none of a default server's (8169-8173), which the server
# showing the suggestion usually holds; the same last digits, for a user who knows those.
SCENARIO_SERVER_PORTS = "--port 8470 --imds-port 8469 --arm-port 8471 --ec2-port 8472 --gce-port 8473"
SCENARIO_SERVER_PAGE = "http://127.0.0.1:8470/"
KEPT_RUNS = 10
KEPT_LINES = 200


class RunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timing: str = Field(default="fast", description="fast (seconds) or realistic (the mock server's minutes)")


class ScenarioRuns:
    def __init__(self, service: Maintenance, control_url: str, ec2_url: str | None = None, token: str | None = None):
        self.service = service
        self.control_url = control_url
        self.ec2_url = ec2_url
        self.token = token
        self.runs: deque[dict[str, Any]] = deque(maxlen=KEPT_RUNS)
        self._lock = threading.Lock()
        self._count = 0

    def machines(self) -> set[str]:
        """The names of the served fleet's machines, every cloud's (an EC2 instance: its id), as the runner checks them."""
        return {name for part in self.service.settled_engine().fleet.parts.values() for name in part.machines}

    def listed(self) -> list[dict[str, Any]]:
        """Every shipped scenario: its name and title, whether it fits this server's fleet, and if not, why and the
        command that serves its own."""
        from forewarn.scenarios.spec import load_library

        machines = self.machines()
        return [fitting(found, machines) for found in load_library()]

    def start(self, name: str, timing: str) -> dict[str, Any]:
        from forewarn.scenarios.spec import ScenarioError, load_scenario, shipped_names

        if name not in shipped_names():
            raise NotFound(f"no shipped scenario named {name!r}", name=name, known=shipped_names())
        try:
            found = load_scenario(name)
            scenario = found.resolve(timing)
        except ScenarioError as error:
            raise Invalid(str(error)) from None
        fit = fitting(found, self.machines())
        if not fit["fits"]:
            raise Conflict(fit["why"])
        with self._lock:
            if any(run["status"] == "running" for run in self.runs):
                raise Conflict("a scenario is running; wait for it to end")
            self._count += 1
            run: dict[str, Any] = {
                "run_id": f"run-{self._count}",
                "scenario": name,
                "title": scenario.title,
                "timing": timing,
                "status": "running",
                "progress": None,
                "lines": [],
                "expectations": [],
                "error": None,
                "started": time.time(),
            }
            self.runs.append(run)
        threading.Thread(target=self._run, args=(run, scenario), daemon=True, name=run["run_id"]).start()
        return run

    def dismiss(self, run_id: str) -> None:
        """Forget a run that has ended (its result read): the panel shows it no more, after a reload either."""
        with self._lock:
            run = next((run for run in self.runs if run["run_id"] == run_id), None)
            if run is None:
                known = [run["run_id"] for run in self.runs]
                raise NotFound(f"no scenario run {run_id!r} is kept", name=run_id, known=known)
            if run["status"] == "running":
                raise Conflict(f"{run_id} is running; it can be dismissed once it has ended")
            self.runs.remove(run)

    def _run(self, run: dict[str, Any], scenario) -> None:
        from forewarn.scenarios.runner import RunOptions, run_scenario

        lines: deque[str] = deque(maxlen=KEPT_LINES)

        def emit(line: str) -> None:
            lines.append(line)
            run["lines"] = list(lines)

        def progress(state) -> None:
            run["progress"] = asdict(state)

        # On a manual clock the runner moves it, deadline by deadline; on a real one it waits for the server's time.
        options = RunOptions(mode="manual" if self.service.clock.mode == MANUAL else "auto")
        try:
            timeline = run_scenario(
                scenario,
                server=self.control_url,
                ec2_url=self.ec2_url,
                options=options,
                emit=emit,
                progress=progress,
                control_token=self.token,
            )
            run["expectations"] = timeline["expectations"]
            run["error"] = timeline["aborted"]
            run["status"] = "passed" if timeline["passed"] else "failed"
        except Exception as error:  # the run's own failure (the fleet lacks its VMs, ...) is the run's result
            run["error"] = str(error)
            run["status"] = "failed"


def fitting(found: Any, machines: set[str]) -> dict[str, Any]:
    """A shipped scenario (a ScenarioFile) as the list shows it: whether this server serves its fleet (the same
    machines: its expectations are written against them, the documents of a VM that shares a set or a host with them
    included), and if not, why and the command that serves it."""
    own = [*found.vms, *found.instances]
    missing = [machine for machine in own if machine not in machines]
    others = sorted(machines - set(own))
    start = found.data.get("start")
    if isinstance(start, datetime):  # YAML reads an unquoted time as one
        start = start.isoformat().replace("+00:00", "Z")
    serve = " ".join(
        [f"forewarn serve --fleet scenario:{found.name} --db :memory: --clock manual"]
        + ([f"--start {start}"] if start else [])  # its expectations may name times from its start
        + [SCENARIO_SERVER_PORTS]
    )
    lacks = f"has no {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}" if missing else ""
    more = f"has {len(others)} other machine{'s' if len(others) != 1 else ''} ({', '.join(others[:3])}{' ...' if len(others) > 3 else ''})"
    why = (
        f"{found.name} is written against a fleet of its own, and this server's {lacks or more}: serve its fleet "
        f"(`{serve}`, then open {SCENARIO_SERVER_PAGE}) and run it there, or print its timeline on a private server "
        f"(`forewarn scenario run {found.name}`)"
        if missing or others
        else None
    )
    return {
        "name": found.name,
        "title": found.title,
        "fits": why is None,
        "missing": missing,
        "differs": (lacks or more) if why else None,
        "why": why,
        "serve": serve,
        "page": SCENARIO_SERVER_PAGE,
    }


def scenarios_router(runs: ScenarioRuns) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/scenarios", tags=["scenarios"])
    async def shipped() -> list[dict]:
        """The shipped scenarios: name, title, whether each fits this server's fleet (``fits``), and for one that
        does not, the machines it lacks (``missing``), how this fleet differs (``differs``), why (``why``) and the command that serves its fleet
        (``serve``, with ports of its own, and ``page``, the dashboard it then serves)."""
        return runs.listed()

    @router.post("/v1/scenarios/{name}/run", tags=["scenarios"], status_code=202, responses=ERRORS)
    async def run(name: str, body: RunIn) -> dict:
        """Run a shipped scenario on this server (its fleet must have the scenario's VMs), as `forewarn scenario run
        NAME --server URL` does; one at a time. Follow it with GET /v1/scenarios/runs."""
        return runs.start(name, body.timing)

    @router.get("/v1/scenarios/runs", tags=["scenarios"])
    async def listed() -> list[dict]:
        """The last runs, newest last: status (running, passed, failed), progress, lines, expectations, started
        (seconds since the epoch)."""
        return list(runs.runs)

    @router.delete("/v1/scenarios/runs/{run_id}", tags=["scenarios"], status_code=204, responses=ERRORS)
    async def dismissed(run_id: str) -> None:
        """Forget a run that has ended (409 while it runs)."""
        runs.dismiss(run_id)

    return router
