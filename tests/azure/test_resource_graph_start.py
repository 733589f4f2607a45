"""DuckDB is loaded as the Resource Graph API is built (before the server serves) when the fleet publishes centrally:
its import holds the interpreter (a C extension's set-up, about 35 ms), and loaded by the first central row on the
writer thread it held every metadata GET that long. A fleet that publishes nothing centrally does not load it."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys, tempfile
sys.path.insert(0, "tests")
from helpers import T0, open_store
from forewarn.app.runtime import Maintenance
from forewarn.azure.resource_graph.api import ResourceGraphApi
from forewarn.fleet.file import parse_fleet
policy = {policy!r}
fleet = parse_fleet("hosts: [{{name: h1}}]\\nvms:\\n  - {{name: vm1, host: h1" + policy + "}}\\n")
service = Maintenance.open(open_store(tempfile.mkdtemp() + "/a.db"), fleet, "manual", 1.0, T0, "seed")
before = "duckdb" in sys.modules
ResourceGraphApi(service)
print(before, "duckdb" in sys.modules)
"""
CENTRAL = (
    ", scheduled_events_policy: "
    "{scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}"
)


@pytest.mark.parametrize(("policy", "loaded"), [(CENTRAL, True), ("", False)])
def test_duckdb_is_loaded_as_the_api_is_built_when_the_fleet_publishes_centrally(policy, loaded):
    done = subprocess.run(
        [sys.executable, "-c", CHECK.format(policy=policy)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", str(loaded)]
