"""Azure central delivery, the parts on the ARM port: the Maintenance acknowledge API, access control (tokens and
roles), and Resource Graph queries; against a real `forewarn serve` process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import requests

from central_helpers import CENTRAL, FLEET, RG, SUB_A, SUB_B
from helpers import ROOT, Server, fresh

ACK_API = "2023-10-01-preview"
LIST_API = "2025-10-01-preview"


def ack_url(server: Server, resource: str, event_id: str) -> str:
    return f"{server.arm}{resource}/providers/Microsoft.Maintenance/scheduledevents/{event_id}/acknowledge"


def list_url(server: Server, resource: str) -> str:
    return f"{server.arm}{resource}/providers/Microsoft.Maintenance/scheduledevents"


def status(server: Server, event_id: str) -> str:
    return server.get(f"/v1/events/{event_id}")["status"]


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("central"), FLEET) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


# ------------------------------------------------------------------------------------------- acknowledge API
def test_acknowledge_starts_the_event_seen_in_imds(server):
    [event] = server.schedule(type="Freeze", vms=["web_0"])
    url = ack_url(server, f"{RG}/virtualMachineScaleSets/web", event["event_id"].lower())
    response = requests.post(url, params={"api-version": ACK_API}, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json() == {"value": "Successfully Approved"}
    assert response.headers["x-ms-request-id"]
    assert status(server, event["event_id"]) == "Started"
    journal = server.get(f"/v1/events/{event['event_id']}/journal")
    assert [entry["what"] for entry in journal][:2] == ["scheduled", "approved"]
    assert journal[1]["reason"] == "by maintenance-rp:anonymous"
    again = requests.post(url, params={"api-version": ACK_API}, timeout=10)
    assert again.status_code == 409 and again.json()["error"]["code"] == "Conflict"


def test_acknowledge_through_a_member_vm_and_what_is_not_found(server):
    [web] = server.schedule(type="Reboot", vms=["web_1"])
    [db] = server.schedule(type="Reboot", vms=["db-0"])  # the set did not opt in: not published centrally
    through_vm = ack_url(server, f"{RG}/virtualMachines/web_1", web["event_id"])
    assert requests.post(through_vm, params={"api-version": ACK_API}, timeout=10).status_code == 200
    for resource, event_id in (
        (f"{RG}/availabilitySets/db", db["event_id"]),
        (f"{RG}/virtualMachines/solo", web["event_id"]),  # not solo's event
        (f"{RG}/virtualMachines/solo", "C7061BAC-AFDC-4513-B24B-AA5F13A16123"),
        (f"{RG}/virtualMachines/solo", "not-a-guid"),
    ):
        response = requests.post(ack_url(server, resource, event_id), params={"api-version": ACK_API}, timeout=10)
        assert response.status_code == 404 and response.json()["error"]["code"] == "NotFound", resource
    assert status(server, db["event_id"]) == "Scheduled"
    missing = requests.post(
        ack_url(server, f"{RG}/virtualMachines/nope", db["event_id"]), params={"api-version": ACK_API}, timeout=10
    )
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "ResourceNotFound"


def test_acknowledge_refuses_bad_requests_in_arm_style(server):
    [event] = server.schedule(type="Freeze", vms=["solo"])
    url = ack_url(server, f"{RG}/virtualMachines/solo", event["event_id"])
    for params, code in (
        ({}, "MissingApiVersionParameter"),
        ({"api-version": "2020-01-01"}, "InvalidApiVersionParameter"),
    ):
        response = requests.post(url, params=params, timeout=10)
        assert response.status_code == 400 and response.json()["error"]["code"] == code
    assert requests.get(url, params={"api-version": ACK_API}, timeout=10).status_code == 405
    wrong_type = ack_url(server, f"{RG}/disks/solo", event["event_id"])
    assert requests.post(wrong_type, params={"api-version": ACK_API}, timeout=10).status_code == 400
    assert status(server, event["event_id"]) == "Scheduled"


def test_list_acknowledge_reports_each_event(server):
    first, second = (server.schedule(type="Freeze", vms=[name])[0] for name in ("web_0", "web_1"))
    url = list_url(server, f"{RG}/virtualMachineScaleSets/web")
    old = requests.post(url, params={"api-version": ACK_API}, json={"value": [first["event_id"]]}, timeout=10)
    assert old.status_code == 400  # the list form exists from 2025-10-01-preview on
    for body in ({}, {"value": []}, {"value": [1]}, [first["event_id"]]):
        bad = requests.post(url, params={"api-version": LIST_API}, json=body, timeout=10)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "InvalidRequestContent", body
    unknown = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"
    mixed = requests.post(
        url, params={"api-version": LIST_API}, json={"value": [first["event_id"], unknown]}, timeout=10
    )
    assert mixed.status_code == 207
    error = mixed.json()["error"]
    assert error["code"] == "MultiStatusResponse"
    assert error["details"] == [
        {"target": unknown, "code": "NotFound", "message": f"The scheduled event '{unknown}' was not found."}
    ]
    assert status(server, first["event_id"]) == "Started"
    assert status(server, second["event_id"]) == "Scheduled"
    both = requests.post(
        url, params={"api-version": "2026-02-01-preview"}, json={"value": [second["event_id"]]}, timeout=10
    )
    assert both.status_code == 200 and both.json() == {"value": "Successfully Approved"}


# ------------------------------------------------------------------------------------------ access control
ACCESS = f"""
principals:
  - name: controller
    token: controller-token
    roles: [{{role: Scheduled Events Contributor, scope: /subscriptions/{SUB_A}}}]
  - name: auditor
    token: auditor-token
    roles: [{{role: Reader, scope: /subscriptions/{SUB_A}/resourceGroups/contoso-rg}}]
  - name: fabrikam
    token: fabrikam-token
    roles: [{{role: ScheduledEventContributor, scope: /subscriptions/{SUB_B}}}]
  - name: ops-team
    token: ops-team-token
    roles: [{{role: Scheduled Events Contributor, scope: /subscriptions/{SUB_A}/resourceGroups/OPS-RG}}]
"""


@pytest.fixture(scope="module")
def shared_guarded(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("guarded")
    access = tmp_path / "access.yaml"
    access.write_text(ACCESS)
    with Server(tmp_path, FLEET, extra=["--access", str(access)]) as running:
        yield running


@pytest.fixture
def guarded(shared_guarded):
    return shared_guarded.reset()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_tokens_are_required_and_checked(guarded):
    [event] = guarded.schedule(type="Freeze", vms=["solo"])
    url = ack_url(guarded, f"{RG}/virtualMachines/solo", event["event_id"])
    for headers, code in (
        ({}, "AuthenticationFailed"),
        ({"Authorization": "Basic abc"}, "AuthenticationFailed"),
        (bearer("wrong-token"), "InvalidAuthenticationToken"),
    ):
        response = requests.post(url, params={"api-version": ACK_API}, headers=headers, timeout=10)
        assert response.status_code == 401 and response.json()["error"]["code"] == code
        assert response.headers["www-authenticate"].startswith("Bearer ")
    vm = requests.get(f"{guarded.arm}{RG}/virtualMachines/solo", params={"api-version": "2024-07-01"}, timeout=10)
    assert vm.status_code == 401
    assert status(guarded, event["event_id"]) == "Scheduled"


def test_roles_decide_who_may_do_what_and_where(guarded):
    [event] = guarded.schedule(type="Freeze", vms=["solo"])
    url = ack_url(guarded, f"{RG}/virtualMachines/solo", event["event_id"])
    for token in ("auditor-token", "fabrikam-token"):
        response = requests.post(url, params={"api-version": ACK_API}, headers=bearer(token), timeout=10)
        assert response.status_code == 403, token
        error = response.json()["error"]
        assert error["code"] == "AuthorizationFailed"
        assert (
            "does not have authorization to perform action "
            "'Microsoft.Maintenance/scheduledevents/acknowledge/action' over scope "
            f"'/subscriptions/{SUB_A}/resourceGroups/contoso-rg/providers/Microsoft.Compute/virtualMachines/solo'"
            in error["message"]
        )
    assert status(guarded, event["event_id"]) == "Scheduled"
    done = requests.post(url, params={"api-version": ACK_API}, headers=bearer("controller-token"), timeout=10)
    assert done.status_code == 200
    journal = guarded.get(f"/v1/events/{event['event_id']}/journal")
    assert journal[1]["reason"] == "by maintenance-rp:controller"

    vm_url = f"{guarded.arm}{RG}/virtualMachines/solo"
    read = requests.get(vm_url, params={"api-version": "2024-07-01"}, headers=bearer("auditor-token"), timeout=10)
    assert read.status_code == 200
    write = requests.patch(
        vm_url,
        params={"api-version": "2024-07-01"},
        headers=bearer("auditor-token"),
        json={"properties": {}},
        timeout=10,
    )
    assert write.status_code == 403 and "'Microsoft.Compute/virtualMachines/write'" in write.json()["error"]["message"]
    restart = requests.post(
        f"{vm_url}/restart", params={"api-version": "2024-07-01"}, headers=bearer("controller-token"), timeout=10
    )
    assert restart.status_code == 403
    assert "'Microsoft.Compute/virtualMachines/restart/action'" in restart.json()["error"]["message"]


def test_a_bad_access_file_is_refused_at_start(tmp_path):
    access = tmp_path / "access.yaml"
    access.write_text("principals:\n  - {name: x, token: short-token, roles: [{role: Janitor, scope: /}]}\n")
    server = Server(tmp_path, FLEET, extra=["--access", str(access)])
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", *server.args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},  # this tree's forewarn, not the installed one
    )
    assert run.returncode == 1 and "unknown role 'Janitor'" in run.stderr


# ------------------------------------------------------------------------------------------- Resource Graph
ARG = "/providers/Microsoft.ResourceGraph/resources"


def arg_query(server: Server, query: str, token: str | None = None, **extra) -> requests.Response:
    headers = bearer(token) if token else {}
    return requests.post(
        f"{server.arm}{ARG}",
        params={"api-version": "2022-10-01"},
        headers=headers,
        json={"query": query, **extra},
        timeout=30,
    )


def test_resource_graph_rows_follow_the_events_of_opted_in_owners(server):
    [web] = server.schedule(type="Freeze", vms=["web_0"])
    server.schedule(type="Reboot", vms=["db-0"])  # not opted in: never a row
    response = arg_query(server, 'maintenanceresources | where type == "microsoft.maintenance/scheduledevents"')
    assert response.status_code == 200, response.text
    assert response.headers["x-ms-user-quota-remaining"] == "14"
    assert response.headers["x-ms-user-quota-resets-after"] == "00:00:05"
    body = response.json()
    assert (body["totalRecords"], body["count"], body["resultTruncated"]) == (1, 1, "false")
    [row] = body["data"]
    assert (
        row["id"]
        == (
            f"/subscriptions/{SUB_A}/resourcegroups/contoso-rg/providers/microsoft.compute/"
            f"virtualmachinescalesets/web/providers/microsoft.maintenance/scheduledevents/"
            f"{web['event_id']}"
        ).lower()
    )
    assert row["properties"]["EventStatus"] == "Scheduled"
    assert row["properties"]["NotBefore"].endswith(" GMT") and row["properties"]["Resources"] == ["web_0"]
    server.post(f"/v1/events/{web['event_id']}/approve", expect=200)
    server.advance("1h")
    documented = (
        'Maintenanceresources | where type == "microsoft.maintenance/scheduledevents" '
        "| sort by tostring(properties.EventStatus), tostring(properties.EventId) asc "
        "| project resourceGroup, zones, properties.EventStatus, properties.NotBefore, "
        "properties.Resources, properties.EventId, properties.TargetResourceId, properties.EventType, "
        "properties.Description"
    )
    [row] = arg_query(server, documented).json()["data"]
    assert row["properties_EventStatus"] == "Completed" and row["properties_NotBefore"] == ""
    assert row["properties_TargetResourceId"].endswith("/virtualMachineScaleSets/web")
    counted = arg_query(server, "maintenanceresources | summarize count() by tostring(properties.EventType)")
    assert counted.json()["data"] == [{"properties_EventType": "Freeze", "count_": 1}]


def test_resource_graph_survives_a_restart_and_refuses_bad_requests(tmp_path):
    with Server(tmp_path, FLEET) as first:
        first.schedule(type="Freeze", vms=["solo"])
    with Server(tmp_path, None, db=first.db) as again:
        assert arg_query(again, "maintenanceresources | count").json()["data"] == [{"Count": 1}]
        bad = arg_query(again, "maintenanceresources | where")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "BadRequest"
        unsupported = arg_query(again, "maintenanceresources | make-series count() on todatetime(name) step 1d")
        assert unsupported.status_code == 400
        no_query = requests.post(f"{again.arm}{ARG}", params={"api-version": "2021-03-01"}, json={}, timeout=10)
        assert no_query.status_code == 400
        missing_version = requests.post(f"{again.arm}{ARG}", json={"query": "maintenanceresources"}, timeout=10)
        assert missing_version.status_code == 400
        assert missing_version.json()["error"]["code"] == "MissingApiVersionParameter"


def test_resource_graph_shows_a_principal_only_its_subscriptions(shared_guarded):
    with fresh(shared_guarded) as guarded:
        guarded.schedule(type="Freeze", vms=["solo"])
        guarded.schedule(type="Freeze", vms=["other"])  # subscription B
        guarded.schedule(type="Freeze", vms=["ops"])  # subscription A, resource group ops-rg
        query = "maintenanceresources | project subscriptionId, resourceGroup | sort by resourceGroup asc"
        assert arg_query(guarded, query).status_code == 401
        mine = arg_query(guarded, query, token="controller-token").json()["data"]
        theirs = arg_query(guarded, query, token="fabrikam-token", subscriptions=[SUB_A, SUB_B]).json()["data"]
        group = arg_query(guarded, query, token="ops-team-token").json()["data"]
        assert mine == [
            {"subscriptionId": SUB_A, "resourceGroup": "contoso-rg"},
            {"subscriptionId": SUB_A, "resourceGroup": "ops-rg"},
        ]
        assert theirs == [{"subscriptionId": SUB_B, "resourceGroup": "fabrikam-rg"}]
        assert group == [{"subscriptionId": SUB_A, "resourceGroup": "ops-rg"}]
        # a Reader may query Resource Graph but not read scheduled events
        assert arg_query(guarded, query, token="auditor-token").json()["data"] == []


def test_the_official_resource_graph_client_runs_the_documented_query(server):
    resourcegraph = pytest.importorskip("azure.mgmt.resourcegraph")
    from azure.core.credentials import AccessToken
    from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions

    class StaticToken:
        def get_token(self, *scopes, **kwargs):
            return AccessToken("any-token", 4102444800)

    server.schedule(type="Freeze", vms=["web_0", "web_1"])
    client = resourcegraph.ResourceGraphClient(StaticToken(), base_url=server.arm)
    request = QueryRequest(
        subscriptions=[SUB_A],
        query=(
            'Maintenanceresources | where type == "microsoft.maintenance/scheduledevents" '
            "| project properties.EventId, properties.EventStatus, properties.Resources"
        ),
        options=QueryRequestOptions(result_format="objectArray", top=10),
    )
    result = client.resources(request, enforce_https=False)  # azure-core sends tokens over https only otherwise
    assert result.total_records == 2 and result.result_truncated == "false"
    assert {tuple(row["properties_Resources"]) for row in result.data} == {("web_0",), ("web_1",)}


def test_opting_in_through_the_cli_publishes_the_owners_new_events(server):
    from helpers import forewarn

    [before] = server.schedule(type="Freeze", vms=["db-0"])
    shown = forewarn(server, "policy", "set", "db", "--central", "--json")
    assert '"publish_central": true' in shown.stdout
    [after] = server.schedule(type="Freeze", vms=["db-1"])
    rows = arg_query(server, "maintenanceresources | project name").json()["data"]
    assert rows == [{"name": after["event_id"]}]
    assert before["event_id"] != after["event_id"]


def test_resource_graph_facets_count_the_result_by_an_expression(server):
    for vms in (["web_0"], ["web_1"], ["solo"]):
        server.schedule(type="Freeze", vms=vms)
    server.schedule(type="Reboot", vms=["web_0"])
    facets = [
        {"expression": "properties.EventType", "options": {"sortBy": "count", "sortOrder": "desc", "$top": 1}},
        {"expression": "location", "options": {"filter": "properties.EventType == 'Reboot'"}},
        {"expression": "nosuchcolumn"},
    ]
    body = arg_query(server, "maintenanceresources", facets=facets, options={"$top": 2}).json()
    assert body["count"] == 2 and body["totalRecords"] == 4
    by_type, by_location, broken = body["facets"]
    assert by_type == {
        "expression": "properties.EventType",
        "resultType": "FacetResult",
        "totalRecords": 2,
        "count": 1,
        "data": [{"properties_EventType": "Freeze", "count": 3}],
    }
    assert by_location["data"] == [{"location": "westeurope", "count": 1}]
    assert broken["resultType"] == "FacetError" and broken["errors"][0]["code"]
    bad = arg_query(server, "maintenanceresources", facets=[{"options": {}}])
    assert bad.status_code == 400


def test_cli_graph_and_acknowledge_speak_to_the_arm_port(shared_guarded):
    from helpers import forewarn

    with fresh(shared_guarded) as guarded:
        [event] = guarded.schedule(type="Freeze", vms=["solo"])
        arm = ["--arm", guarded.arm]
        denied = forewarn(guarded, "graph", "maintenanceresources | project id", *arm, check=False)
        assert denied.returncode == 1 and "AuthenticationFailed" in denied.stderr
        token = ["--token", "controller-token"]
        table = forewarn(guarded, "graph", "maintenanceresources | project name, properties.EventStatus", *arm, *token)
        assert table.stdout.splitlines() == [
            "name                                  properties_EventStatus",
            f"{event['event_id']}  Scheduled",
        ]
        rows = json.loads(
            forewarn(guarded, "graph", "maintenanceresources | project id", *arm, *token, "--json").stdout
        )
        acked = forewarn(guarded, "acknowledge", rows[0]["id"], *arm, *token)
        assert acked.stdout.strip() == f"{event['event_id'].lower()}: Successfully Approved"
        assert status(guarded, event["event_id"]) == "Started"
        again = forewarn(guarded, "acknowledge", rows[0]["id"], "not-an-id", *arm, *token, check=False)
        assert (
            again.returncode == 1
            and "Conflict, HTTP 409" in again.stderr
            and "not a scheduled event id" in again.stderr
        )
        unreachable = forewarn(guarded, "graph", "maintenanceresources", "--arm", "http://127.0.0.1:9", check=False)
        assert unreachable.returncode == 1 and "--arm URL or FOREWARN_ARM" in unreachable.stderr


def test_resource_graph_rows_can_lag_the_events(tmp_path):
    with Server(tmp_path, FLEET, extra=["--resource-graph-delay", "5m"]) as lagging:
        [event] = lagging.schedule(type="Freeze", vms=["solo"], notice="30m")
        query = "maintenanceresources | project name, status = tostring(properties.EventStatus)"
        assert arg_query(lagging, query).json()["data"] == []
        lagging.advance("5m")
        assert arg_query(lagging, query).json()["data"] == [{"name": event["event_id"], "status": "Scheduled"}]
        lagging.post(f"/v1/events/{event['event_id']}/approve", expect=200)  # Started now, visible in 5 minutes
        assert arg_query(lagging, query).json()["data"][0]["status"] == "Scheduled"
        lagging.advance("5m")
        assert arg_query(lagging, query).json()["data"][0]["status"] == "Started"


def _loaded_duckdb(pid: int) -> bool:
    """Whether the process has DuckDB's native library mapped (imported by any module)."""
    with open(f"/proc/{pid}/maps") as maps:
        paths = {line.split()[-1] for line in maps if line.count(" ") >= 5}
    return any("duckdb" in Path(path).name and ".so" in Path(path).name for path in paths)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the server's memory map from /proc")
def test_duckdb_is_loaded_only_when_resource_graph_is_used(tmp_path):
    """A server whose fleet publishes nothing centrally does not load DuckDB for IMDS, ARM Compute or acknowledge
    traffic; its first Resource Graph query does."""
    with Server(tmp_path, fleet_text=FLEET.replace(str(CENTRAL), "{}")) as plain:
        pid = plain.process.pid
        plain.schedule(type="Reboot", vms=["solo"], notice="15m")
        assert requests.get(f"{plain.arm}{RG}/virtualMachines?api-version=2024-07-01", timeout=5).status_code == 200
        assert requests.get(f"{plain.control}/healthz", timeout=5).status_code == 200
        assert not _loaded_duckdb(pid)
        answer = requests.post(
            f"{plain.arm}{ARG}?api-version=2022-10-01", json={"query": "maintenanceresources"}, timeout=10
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["totalRecords"] == 0
        assert _loaded_duckdb(pid)
