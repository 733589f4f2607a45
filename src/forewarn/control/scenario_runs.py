"""Shipped scenarios run on this server, for the dashboard: the scenario runner (a control-API client, the one
``forewarn scenario run NAME --server URL`` uses) in a thread of the server, talking to the server's own control
port like any client, with the server's token. One run at a time; the last few runs are kept with their progress,
their lines and their expectations."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from forewarn.app.runtime import Maintenance
from forewarn.control.models import ERRORS
from forewarn.core.clock import MANUAL
from forewarn.core.errors import Conflict, Invalid, NotFound

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

    def start(self, name: str, timing: str) -> dict[str, Any]:
        from forewarn.scenarios.spec import ScenarioError, load_scenario, shipped_names

        if name not in shipped_names():
            raise NotFound(f"no shipped scenario named {name!r}", name=name, known=shipped_names())
        try:
            scenario = load_scenario(name).resolve(timing)
        except ScenarioError as error:
            raise Invalid(str(error)) from None
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


def scenarios_router(runs: ScenarioRuns) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/scenarios", tags=["scenarios"])
    async def shipped() -> list[dict]:
        """The shipped scenarios: name and title."""
        from forewarn.scenarios.spec import load_library

        return [{"name": found.name, "title": found.title} for found in load_library()]

    @router.post("/v1/scenarios/{name}/run", tags=["scenarios"], status_code=202, responses=ERRORS)
    async def run(name: str, body: RunIn) -> dict:
        """Run a shipped scenario on this server (its fleet must have the scenario's VMs), as `forewarn scenario run
        NAME --server URL` does; one at a time. Follow it with GET /v1/scenarios/runs."""
        return runs.start(name, body.timing)

    @router.get("/v1/scenarios/runs", tags=["scenarios"])
    async def listed() -> list[dict]:
        """The last runs, newest last: status (running, passed, failed), progress, lines, expectations."""
        return list(runs.runs)

    return router
