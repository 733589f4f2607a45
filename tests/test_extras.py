"""The extras (src/forewarn/extras.py): pyproject.toml lists what extras.py says, and a base install serves a user who
tests, the pytest fixture with Azure IMDS, EC2 and Compute Engine, without any extra's module.

"Without" is made here by a ``sitecustomize`` that sets each extra's modules to None in ``sys.modules`` (importing one
then fails as if it were not installed), in the pytest process the user's tests run in and in the servers it starts
(they inherit PYTHONPATH). A real install into a fresh virtual environment is docs/testing.md's check, not run here:
it needs the package registry and half a minute.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from forewarn.extras import EXTRAS, banner_lines

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
BLOCKED = sorted({module for extra in EXTRAS for module in extra.modules} | {"psycopg_binary", "psycopg_c"})
BLOCKER = "import sys\nfor name in %r:\n    sys.modules[name] = None\n" % (BLOCKED,)


def requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_pyproject_has_each_extra_all_of_them_and_test_installs_all():
    optional = PROJECT["optional-dependencies"]
    assert set(optional) == {extra.name for extra in EXTRAS} | {"all", "test"}
    assert optional["all"] == [f"forewarn[{','.join(extra.name for extra in EXTRAS)}]"]
    assert "forewarn[all]" in optional["test"]  # make test covers every extra
    in_extras = {requirement_name(r) for extra in EXTRAS for r in optional[extra.name]}
    assert not in_extras & {requirement_name(r) for r in PROJECT["dependencies"]}  # none is in the base too


def test_the_one_line_message_names_the_extra():
    postgres = next(extra for extra in EXTRAS if extra.name == "postgres")
    assert postgres.message == "PostgreSQL needs the extra: pip install 'forewarn[postgres]'"


def test_the_banner_says_what_is_off_and_which_extra_turns_it_on(monkeypatch):
    assert banner_lines() == []  # the test environment has every extra
    monkeypatch.setitem(sys.modules, "duckdb", None)
    assert banner_lines() == [
        "  off           Resource Graph queries (the ARM port answers them with an error naming the extra): "
        "pip install 'forewarn[resource-graph]'"
    ]


USER_TESTS = """
import json, urllib.error, urllib.request

def request(url, body=None, headers=None, method=None):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(headers or {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers, method=method), timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()

def test_azure_imds_approval(forewarn):
    [event] = forewarn.schedule("Reboot", "WestNO_2", notice="15m")
    url = forewarn.metadata_url("WestNO_2") + "/metadata/scheduledevents?api-version=2020-07-01"
    status, body = request(url, headers={"Metadata": "true"})
    assert status == 200 and json.loads(body)["Events"][0]["EventId"] == event["event_id"]
    assert request(url, {"StartRequests": [{"EventId": event["event_id"]}]}, {"Metadata": "true"})[0] == 200
    assert forewarn.event(event["event_id"])["status"] == "Started"

def test_ec2_and_compute_engine(forewarn):
    forewarn.schedule_ec2("system-reboot", "i-0a1b2c3d4e5f60718", notice="1h")
    assert [e["Code"] for e in forewarn.ec2_document("i-0a1b2c3d4e5f60718")] == ["system-reboot"]
    assert forewarn.gce_maintenance_event("web-1") == "NONE"  # watched: the notice comes
    forewarn.maintain_gce("web-1", kind="migrate", notice="5m")
    forewarn.advance("4m30s")
    assert forewarn.gce_maintenance_event("web-1") == "MIGRATE_ON_HOST_MAINTENANCE"

def test_resource_graph_answers_with_the_extra_it_needs(forewarn):
    url = forewarn.arm_url + "/providers/Microsoft.ResourceGraph/resources?api-version=2022-10-01"
    status, body = request(url, {"query": "maintenanceresources | take 1"})
    assert status == 501
    error = json.loads(body)["error"]
    assert error == {"code": "NotImplemented",
                     "message": "Resource Graph needs the extra: pip install 'forewarn[resource-graph]'"}

def test_an_event_grid_webhook_names_the_extra_it_needs(forewarn):
    topic = (forewarn.arm_url + "/subscriptions/6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01/resourceGroups/events-rg"
             "/providers/Microsoft.EventGrid/systemTopics/maintenance")
    properties = {"source": "/subscriptions/6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01",
                  "topicType": "Microsoft.ResourceNotifications.MaintenanceResources"}
    assert request(topic + "?api-version=2025-02-15", {"location": "global", "properties": properties}, method="PUT")[0] == 201
    destination = {"endpointType": "WebHook", "properties": {"endpointUrl": "http://127.0.0.1:9/events"}}
    status, body = request(topic + "/eventSubscriptions/ops?api-version=2025-02-15",
                           {"properties": {"destination": destination}}, method="PUT")
    assert status == 400
    assert "Delivery to webhooks needs the extra: pip install 'forewarn[webhooks]'." in json.loads(body)["error"]["message"]
"""


@pytest.fixture
def without_extras(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    monkeypatch.setenv("PYTHONPATH", f"{blocker}:{ROOT / 'src'}")
    return blocker


def test_the_fixture_azure_imds_ec2_and_compute_engine_work_without_any_extra(pytester, without_extras):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "forewarn.testing.plugin", "-p", "no:cacheprovider", "-q",
        "-p", "no:schemathesis", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:xdist",
    )  # fmt: skip
    result.assert_outcomes(passed=4)


def serve(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", "--fleet", "demo", "--clock", "manual", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_postgresql_without_its_extra_is_one_line_naming_it(without_extras, tmp_path):
    done = serve("--db", "postgresql://127.0.0.1/test", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == "forewarn: PostgreSQL needs the extra: pip install 'forewarn[postgres]'"


def test_ec2_credentials_without_botocore_is_one_line_naming_its_extra(without_extras, tmp_path):
    done = serve("--db", ":memory:", "--ec2-credential", "AKID:secret", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    message = "Checking EC2 API signatures (--ec2-credential) needs the extra: pip install 'forewarn[sigv4]'"
    assert done.stderr.splitlines()[-1] == f"forewarn: {message}"
