"""The pytest plugin, run as a user runs it: pytest in a process of its own on a test file of a user's, with the
plugin named by ``-p``, loaded from its ``pytest11`` entry point, and under pytest-xdist with several workers."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "forewarn.testing.plugin"
# The test environment's other plugins (schemathesis above all) cost seconds of start-up in every pytest process and
# xdist worker, and have nothing to do with these tests.
QUIET_PLUGINS = "-p no:schemathesis -p no:hypothesispytest -p no:anyio"

# Each test writes which server it had and what it saw first, so that the outer test can check sharing and isolation.
USER_TESTS = """
import json, os, pytest, requests

FLEET = '''
hosts: [{name: h1}]
availability_sets: [{name: web}]
vms:
  - {name: web-0, host: h1, availability_set: web, imds: {address: 127.0.0.90}}
  - {name: web-1, host: h1, availability_set: web, imds: {port: 9010}}
'''

@pytest.fixture
def forewarn_fleet():
    return FLEET

def record(forewarn, name):
    seen = forewarn.events(all=True)
    with open(os.environ["RECORD"], "a") as out:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        out.write(json.dumps({"test": name, "worker": worker, "port": forewarn.port, "seen": len(seen)}) + "\\n")

@pytest.mark.parametrize("n", range(%(count)d))
def test_drain(forewarn, n):
    record(forewarn, f"drain{n}")
    [event] = forewarn.schedule("Reboot", ["web-0", "web-1"], notice="10m")
    for vm in ("web-0", "web-1"):
        document = requests.get(forewarn.metadata_url(vm) + "/metadata/scheduledevents?api-version=2020-07-01",
                                headers={"Metadata": "true"}, timeout=10).json()
        assert document["DocumentIncarnation"] == 2
        assert document["Events"][0]["EventId"] == event["event_id"]
    forewarn.advance("11m")
    assert forewarn.event(event["event_id"])["status"] == "Started"

@pytest.mark.forewarn(fresh=True, fleet="hosts: [{name: h}]\\nvms: [{name: lone, host: h}]\\n")
def test_fresh(forewarn):
    record(forewarn, "fresh")
    assert [vm["name"] for vm in forewarn.call("GET", "/v1/fleet")["vms"]] == ["lone"]
"""


def records(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def user_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """A user's project: one test file; this checkout's forewarn on the path of the pytest processes it runs."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    monkeypatch.setenv("PYTEST_ADDOPTS", QUIET_PLUGINS)
    monkeypatch.setenv("RECORD", str(pytester.path / "record.jsonl"))

    def write(count: int) -> Path:
        pytester.makepyfile(test_user=USER_TESTS % {"count": count})
        return pytester.path / "record.jsonl"

    return write


def test_tests_share_one_server_each_from_a_fresh_state_and_a_fresh_marker_gets_its_own(pytester, user_project):
    record = user_project(3)
    result = pytester.runpytest_subprocess("-p", PLUGIN, "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=4)
    rows = records(record)
    drains = [row for row in rows if row["test"].startswith("drain")]
    assert len({row["port"] for row in drains}) == 1  # one server for the three
    assert all(row["seen"] == 0 for row in rows)  # none sees the events of the test before
    fresh = next(row for row in rows if row["test"] == "fresh")
    assert fresh["port"] != drains[0]["port"]


def test_under_xdist_each_worker_has_its_own_server_and_every_test_passes(pytester, user_project):
    record = user_project(8)
    result = pytester.runpytest_subprocess("-p", PLUGIN, "-p", "no:cacheprovider", "-n", "3", "-q")
    result.assert_outcomes(passed=9)
    rows = [row for row in records(record) if row["test"].startswith("drain")]
    assert len({row["worker"] for row in rows}) > 1  # the tests did spread over the workers
    by_worker: dict[str, set[int]] = {}
    for row in rows:
        by_worker.setdefault(row["worker"], set()).add(row["port"])
    assert all(len(ports) == 1 for ports in by_worker.values())
    assert len(set().union(*by_worker.values())) == len(by_worker)  # no two workers share a server
    assert all(row["seen"] == 0 for row in rows)


def test_a_failing_assertion_in_a_users_test_fails_it(pytester, user_project):
    user_project(0)
    pytester.makepyfile(
        test_wrong="""
        def test_wrong(forewarn):
            forewarn.schedule("Freeze", ["WestNO_0"], notice="5m")
            assert forewarn.document("WestNO_0")["Events"] == []
        """
    )
    result = pytester.runpytest_subprocess("-p", PLUGIN, "-p", "no:cacheprovider", "-q", "test_wrong.py")
    result.assert_outcomes(failed=1)


def test_the_entry_point_declared_in_pyproject_loads_the_plugin_without_p(pytester, monkeypatch, tmp_path):
    """The pyproject's pytest11 entry point, installed as pip would write it (a dist-info directory on the path):
    pytest finds the fixture with no -p and no conftest."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert PLUGIN in declared and all(name == module for name, module in declared.items())  # one name a plugin
    site = tmp_path / "site"
    dist_info = site / "forewarn_plugin_check-0.1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: forewarn-plugin-check\nVersion: 0.1.0\n")
    entries = "".join(f"{name} = {value}\n" for name, value in declared.items())
    (dist_info / "entry_points.txt").write_text(f"[pytest11]\n{entries}")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT / 'src'}:{site}")
    monkeypatch.setenv("PYTEST_ADDOPTS", QUIET_PLUGINS)
    pytester.makepyfile(
        test_found="""
        def test_found(forewarn):
            assert forewarn.clock()["mode"] == "manual"
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "test_found.py")
    result.assert_outcomes(passed=1)
    # Named by -p as well: one plugin, not two (pytest refuses a module registered under two names)
    result = pytester.runpytest_subprocess("-p", PLUGIN, "-p", "no:cacheprovider", "-q", "test_found.py")
    result.assert_outcomes(passed=1)
