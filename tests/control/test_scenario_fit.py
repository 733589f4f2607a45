"""Shipped scenarios beside the fleet a server serves (control/scenario_runs.py): each is written against a fleet of
its own, so the list says which fit the served fleet, and for the others what they lack and the command that serves
their fleet (``forewarn serve --fleet scenario:NAME``), on which they run; a run that has ended is kept until
dismissed."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import cast

import pytest
import requests

from forewarn.app.runtime import Maintenance
from forewarn.control.scenario_runs import ScenarioRuns
from forewarn.core.errors import Conflict
from forewarn.scenarios.spec import shipped_names
from helpers import ROOT, Server


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with Server(
        tmp_path_factory.mktemp("demo"), fleet_text=(ROOT / "src/forewarn/data/demo-fleet.yaml").read_text()
    ) as running:
        yield running


@pytest.fixture(scope="module")
def own_fleet(tmp_path_factory):
    """A server on the fleet of the shipped live-migration scenario, as its `serve` line starts one."""
    with Server(
        tmp_path_factory.mktemp("own"), fleet_text=None, extra=["--fleet", "scenario:live-migration"]
    ) as running:
        yield running


def test_on_the_demo_fleet_every_scenario_says_what_it_lacks_and_how_to_serve_its_fleet(demo):
    listed = demo.get("/v1/scenarios")
    assert [found["name"] for found in listed] == shipped_names()
    live = next(found for found in listed if found["name"] == "live-migration")
    assert live["fits"] is False and live["missing"] == ["app-01"]
    assert live["serve"].startswith(
        "forewarn serve --fleet scenario:live-migration --db :memory: --clock manual --start 2026-04-20T22:11:58Z --port "
    )
    for default in ("8169", "8170", "8171", "8172", "8173"):  # beside the server it is shown on, usually make run's
        assert f" {default}" not in live["serve"]
    assert live["page"] == "http://127.0.0.1:8470/"
    assert "no app-01" in live["why"] and "forewarn scenario run live-migration" in live["why"]
    assert live["differs"] == "has no app-01"
    # Its VMs' names are the demo fleet's, but not its fleet: WestNO_2 shares their availability set, and sees more.
    two = next(found for found in listed if found["name"] == "two-vm-live-migration")
    assert two["fits"] is False and two["missing"] == []
    assert two["differs"].startswith("has 12 other machines (WestNO_2, ")
    assert not any(found["fits"] for found in listed)  # the demo fleet is none of theirs
    refused = demo.post("/v1/scenarios/two-vm-live-migration/run", {}, expect=409).json()["error"]
    assert refused["code"] == "Conflict" and refused["message"] == two["why"]


def test_a_scenario_runs_on_a_server_of_its_own_fleet_and_its_run_is_kept_until_dismissed(own_fleet):
    live = next(found for found in own_fleet.get("/v1/scenarios") if found["name"] == "live-migration")
    assert live["fits"] is True and live["missing"] == [] and live["why"] is None
    run = own_fleet.post("/v1/scenarios/live-migration/run", {"timing": "fast"}, expect=202).json()
    deadline = time.monotonic() + 120
    while (kept := own_fleet.get("/v1/scenarios/runs")[-1])["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kept["status"] == "passed", kept
    assert abs(kept["started"] - time.time()) < 300
    assert own_fleet.get("/v1/scenarios/runs")[-1]["run_id"] == run["run_id"]  # kept: a reload shows it
    assert requests.delete(f"{own_fleet.control}/v1/scenarios/runs/{run['run_id']}", timeout=10).status_code == 204
    assert all(found["run_id"] != run["run_id"] for found in own_fleet.get("/v1/scenarios/runs"))
    again = requests.delete(f"{own_fleet.control}/v1/scenarios/runs/{run['run_id']}", timeout=10)
    assert again.status_code == 404 and again.json()["error"]["code"] == "NotFound"


def test_a_running_run_cannot_be_dismissed():
    runs = ScenarioRuns(cast(Maintenance, None), "http://127.0.0.1:1")  # dismissing reads only the runs
    runs.runs.append({"run_id": "run-1", "status": "running"})
    with pytest.raises(Conflict, match="run-1 is running; it can be dismissed once it has ended"):
        runs.dismiss("run-1")
    runs.runs[0]["status"] = "failed"
    runs.dismiss("run-1")
    assert not runs.runs


def test_a_dismissal_while_a_run_ends_is_refused_or_forgets_it(own_fleet):
    # On a manual clock even a realistic run may end before the DELETE arrives (it moves the clock itself).
    own_fleet.reset()
    run = own_fleet.post("/v1/scenarios/live-migration/run", {"timing": "realistic"}, expect=202).json()
    answer = requests.delete(f"{own_fleet.control}/v1/scenarios/runs/{run['run_id']}", timeout=10)
    kept = [found for found in own_fleet.get("/v1/scenarios/runs") if found["run_id"] == run["run_id"]]
    if answer.status_code == 409:
        assert answer.json()["error"]["code"] == "Conflict" and kept
    else:
        assert answer.status_code == 204 and not kept
    deadline = time.monotonic() + 120
    while any(found["status"] == "running" for found in own_fleet.get("/v1/scenarios/runs")):
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_the_cli_serves_a_scenarios_fleet_and_names_a_misspelt_one(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", "--fleet", "scenario:live-migraton", "--db", ":memory:"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    assert run.returncode == 1
    assert "no shipped scenario named 'live-migraton'; did you mean 'live-migration'" in run.stderr
