"""Azure IMDS scheduled events over HTTP, against a real server process on loopback."""

import json

import pytest
import requests

from helpers import Server, free_port

NOT_BEFORE = "Mon, 20 Apr 2026 22:26:58 GMT"  # T0 + 15 minutes


@pytest.fixture(scope="module")
def ports():
    return free_port(), free_port()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory, ports):
    fleet = f"""
default_vm: solo
hosts: [{{name: host-01}}, {{name: host-02}}, {{name: host-03}}]
vms:
  - {{name: WestNO_0, host: host-01, availability_set: westno, imds: {{address: 127.0.0.10, port: {ports[0]}}}}}
  - {{name: WestNO_1, host: host-01, availability_set: westno, imds: {{address: 127.0.0.11, port: {ports[1]}}}}}
  - {{name: solo, host: host-02}}
  - {{name: other-tenant, host: host-02, subscription: 22222222-2222-2222-2222-222222222222, imds: {{address: 127.0.0.12}}}}
scale_sets:
  - {{name: myvmss, instances: 3, hosts: [host-03], imds: {{address: 127.0.0.20}}}}
"""
    with Server(tmp_path_factory.mktemp("imds"), fleet) as running:  # restarted in place by the kill -9 test
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


def as_vm(server, vm: str) -> str:
    """The base URL a VM's client uses: its loopback address on the IMDS port."""
    address = {
        "WestNO_0": "127.0.0.10",
        "WestNO_1": "127.0.0.11",
        "other-tenant": "127.0.0.12",
        "myvmss_0": "127.0.0.20",
        "myvmss_1": "127.0.0.21",
    }[vm]
    return f"http://{address}:{server.imds_port}"


def document(server, vm: str, version: str = "2020-07-01") -> dict:
    response = server.scheduled_events(as_vm(server, vm), version)
    assert response.status_code == 200, response.text
    return response.json()


def test_seed_example_flow_byte_for_byte(server):
    """000/001: two VMs frozen by one live migration: incarnation 1 [] -> 2 Scheduled -> 3 Started -> 4 []."""
    assert server.scheduled_events(as_vm(server, "WestNO_0")).content == b'{"DocumentIncarnation":1,"Events":[]}'
    [event] = server.schedule(type="Freeze", vms=["WestNO_0", "WestNO_1"])
    scheduled = (
        '{"DocumentIncarnation":2,"Events":[{"EventId":"%s","EventStatus":"Scheduled","EventType":"Freeze",'
        '"ResourceType":"VirtualMachine","Resources":["WestNO_0","WestNO_1"],"NotBefore":"%s",'
        '"Description":"Virtual machine is being paused because of a memory-preserving Live Migration operation.",'
        '"EventSource":"Platform","DurationInSeconds":5}]}' % (event["event_id"], NOT_BEFORE)
    ).encode()
    for vm in ("WestNO_0", "WestNO_1"):
        response = server.scheduled_events(as_vm(server, vm))
        assert response.content == scheduled
        assert response.headers["content-type"] == "application/json; charset=utf-8"
    # WestNO_1 approves; the event starts for both Resources.
    approval = requests.post(
        f"{as_vm(server, 'WestNO_1')}/metadata/scheduledevents?api-version=2020-07-01",
        headers={"Metadata": "true"},
        data=json.dumps({"StartRequests": [{"EventId": event["event_id"]}]}),
    )
    assert approval.status_code == 200
    started = (
        scheduled.replace(b'"DocumentIncarnation":2', b'"DocumentIncarnation":3')
        .replace(b'"EventStatus":"Scheduled"', b'"EventStatus":"Started"')
        .replace(NOT_BEFORE.encode(), b"")
    )
    assert server.scheduled_events(as_vm(server, "WestNO_0")).content == started
    server.advance("4m59s")
    assert server.scheduled_events(as_vm(server, "WestNO_0")).content == started
    server.advance("1s")
    assert server.scheduled_events(as_vm(server, "WestNO_0")).content == b'{"DocumentIncarnation":4,"Events":[]}'
    history = server.get("/v1/events", all="true")
    assert [(e["event_id"], e["status"]) for e in history] == [(event["event_id"], "Completed")]


def test_an_agent_polling_on_one_connection_sees_each_change(server):
    """The same request on a kept-alive connection, as an agent polls: each answer is the document of its moment."""
    url = f"{as_vm(server, 'WestNO_0')}/metadata/scheduledevents?api-version=2020-07-01"
    with requests.Session() as agent:
        assert agent.get(url, headers={"Metadata": "true"}).content == b'{"DocumentIncarnation":1,"Events":[]}'
        assert agent.get(url, headers={"Metadata": "true"}).content == b'{"DocumentIncarnation":1,"Events":[]}'
        [event] = server.schedule(type="Freeze", vms=["WestNO_0"])
        polled = agent.get(url, headers={"Metadata": "true"}).json()
        assert (polled["DocumentIncarnation"], polled["Events"][0]["EventId"]) == (2, event["event_id"])
        for _ in range(2):  # refused every time, by the IMDS checks and by the metadata guard
            assert agent.get(url).json() == {"error": "Bad request: . Required metadata header not specified"}
            page = agent.get(url, headers={"Metadata": "true", "Origin": "http://page.example"})
            assert page.status_code == 400 and "web pages" in page.json()["error"]
        etag = agent.get(url, headers={"Metadata": "true"}).headers["etag"]
        for _ in range(2):
            assert agent.get(url, headers={"Metadata": "true", "If-None-Match": etag}).status_code == 304
        server.advance("16m")
        polled = agent.get(url, headers={"Metadata": "true"}).json()
        assert (polled["DocumentIncarnation"], polled["Events"][0]["EventStatus"]) == (3, "Started")
        changed = agent.get(url, headers={"Metadata": "true", "If-None-Match": etag})
        assert changed.status_code == 200 and changed.json() == polled


def test_not_before_passing_starts_the_event(server):
    [event] = server.schedule(type="Reboot", vms=["WestNO_0"], notice="2m")
    server.advance("1m59s")
    assert document(server, "WestNO_0")["Events"][0]["EventStatus"] == "Scheduled"
    server.post("/v1/clock/next", expect=200)
    doc = document(server, "WestNO_0")
    assert doc["Events"][0]["EventStatus"] == "Started" and doc["Events"][0]["NotBefore"] == ""
    assert doc["DocumentIncarnation"] == 3


def test_scopes_are_isolated(server):
    server.schedule(type="Reboot", vms=["WestNO_0"])
    assert len(document(server, "WestNO_1")["Events"]) == 1  # same availability set: broadcast
    assert document(server, "other-tenant") == {"DocumentIncarnation": 1, "Events": []}
    assert document(server, "myvmss_0") == {"DocumentIncarnation": 1, "Events": []}
    server.schedule(type="Terminate", vms=["myvmss_1"], notice="5m")
    assert document(server, "myvmss_0")["Events"][0]["Resources"] == ["myvmss_1"]
    assert document(server, "WestNO_1")["DocumentIncarnation"] == 2


def test_caller_found_by_port_address_and_default(server, ports):
    server.schedule(type="Freeze", vms=["solo"])
    by_port = requests.get(
        f"http://127.0.0.1:{ports[0]}/metadata/instance/compute/name",
        params={"api-version": "2021-02-01", "format": "text"},
        headers={"Metadata": "true"},
    )
    assert by_port.text == "WestNO_0"
    by_address = requests.get(
        f"{as_vm(server, 'WestNO_1')}/metadata/instance/compute/name",
        params={"api-version": "2021-02-01", "format": "text"},
        headers={"Metadata": "true"},
    )
    assert by_address.text == "WestNO_1"
    default = server.scheduled_events()
    assert default.json()["Events"][0]["Resources"] == ["solo"]


def test_shared_host_waits_for_every_tenant(server):
    events = server.schedule(type="Reboot", hosts=["host-02"])
    by_vm = {e["resources"][0]: e["event_id"] for e in events}
    post = lambda base, event_id: requests.post(  # noqa: E731
        f"{base}/metadata/scheduledevents?api-version=2020-07-01",
        headers={"Metadata": "true"},
        json={"StartRequests": [{"EventId": event_id}]},
    )
    assert post(server.imds, by_vm["solo"]).status_code == 200
    assert server.scheduled_events().json()["Events"][0]["EventStatus"] == "Scheduled"
    assert post(as_vm(server, "other-tenant"), by_vm["other-tenant"]).status_code == 200
    assert server.scheduled_events().json()["Events"][0]["EventStatus"] == "Started"


@pytest.mark.parametrize(
    "version, fields, types",
    [
        ("2017-08-01", ["EventId", "EventStatus", "EventType", "ResourceType", "Resources", "NotBefore"], {"Freeze"}),
        (
            "2017-11-01",
            ["EventId", "EventStatus", "EventType", "ResourceType", "Resources", "NotBefore"],
            {"Freeze", "Preempt"},
        ),
        (
            "2019-01-01",
            ["EventId", "EventStatus", "EventType", "ResourceType", "Resources", "NotBefore"],
            {"Freeze", "Preempt", "Terminate"},
        ),
        (
            "2019-04-01",
            ["EventId", "EventStatus", "EventType", "ResourceType", "Resources", "NotBefore", "Description"],
            {"Freeze", "Preempt", "Terminate"},
        ),
        (
            "2019-08-01",
            [
                "EventId",
                "EventStatus",
                "EventType",
                "ResourceType",
                "Resources",
                "NotBefore",
                "Description",
                "EventSource",
            ],
            {"Freeze", "Preempt", "Terminate"},
        ),
        (
            "2020-07-01",
            [
                "EventId",
                "EventStatus",
                "EventType",
                "ResourceType",
                "Resources",
                "NotBefore",
                "Description",
                "EventSource",
                "DurationInSeconds",
            ],
            {"Freeze", "Preempt", "Terminate"},
        ),
    ],
)
def test_fields_and_types_gated_by_api_version(server, version, fields, types):
    for event_type in ("Freeze", "Preempt", "Terminate"):
        server.schedule(type=event_type, vms=["myvmss_1"])
    doc = document(server, "myvmss_0", version)
    assert doc["DocumentIncarnation"] == 4
    assert {e["EventType"] for e in doc["Events"]} == types
    for event in doc["Events"]:
        assert list(event) == fields


def test_preview_version_prefixes_names_and_needs_no_header(server):
    server.schedule(type="Freeze", vms=["WestNO_0"])
    response = requests.get(f"{as_vm(server, 'WestNO_0')}/metadata/scheduledevents?api-version=2017-03-01")
    assert response.status_code == 200
    assert response.json()["Events"][0]["Resources"] == ["_WestNO_0"]


def test_request_errors(server):
    url = f"{server.imds}/metadata/scheduledevents"
    no_header = requests.get(url, params={"api-version": "2020-07-01"})
    assert (no_header.status_code, no_header.content) == (
        400,
        b'{ "error": "Bad request: . Required metadata header not specified" }',
    )
    assert requests.get(url, params={"api-version": "2020-07-01"}, headers={"Metadata": "false"}).status_code == 400
    for params in ({}, {"api-version": "1999-01-01"}, {"api-version": "2021-02-01"}):
        bad = requests.get(url, params=params, headers={"Metadata": "true"})
        assert bad.status_code == 400
        assert bad.json() == {
            "error": "Bad request. api-version is invalid or was not specified in the request. For more information "
            "refer to aka.ms/azureimds",
            "newest-versions": ["2020-07-01", "2019-08-01", "2019-04-01"],
        }
    forwarded = requests.get(
        url, params={"api-version": "2020-07-01"}, headers={"Metadata": "true", "X-Forwarded-For": "10.0.0.1"}
    )
    assert forwarded.status_code == 400 and "X-Forwarded-For" in forwarded.json()["error"]
    duplicate = requests.get(f"{url}?api-version=2020-07-01&api-version=2020-07-01", headers={"Metadata": "true"})
    assert duplicate.status_code == 400 and "duplicate" in duplicate.json()["error"]
    for method in ("PUT", "DELETE", "PATCH"):
        response = requests.request(method, url, params={"api-version": "2020-07-01"}, headers={"Metadata": "true"})
        assert response.status_code == 405 and response.headers["allow"] == "GET, POST"
    assert (
        requests.get(f"{url}/", params={"api-version": "2020-07-01"}, headers={"Metadata": "true"}).status_code == 404
    )
    assert requests.get(f"{server.imds}/metadata/nothing", headers={"Metadata": "true"}).status_code == 404


def test_etag_and_if_none_match(server):
    first = server.scheduled_events()
    etag = first.headers["etag"]
    assert server.scheduled_events(**{"If-None-Match": etag}).status_code == 304
    server.schedule(type="Freeze", vms=["solo"])
    changed = server.scheduled_events(**{"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    # Another api-version is another representation: another ETag.
    assert server.scheduled_events(version="2019-08-01").headers["etag"] != changed.headers["etag"]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b"{}",
        b'{"StartRequests": {}}',
        b'{"StartRequests": [{}]}',
        b'{"StartRequests": [{"EventId": 5}]}',
        b'{"StartRequests": ["x"]}',
    ],
)
def test_malformed_approvals_are_400(server, body):
    response = requests.post(
        f"{server.imds}/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"}, data=body
    )
    assert response.status_code == 400
    assert "StartRequests" in response.json()["error"]


def test_approval_rules(server):
    [mine] = server.schedule(type="Freeze", vms=["solo"], source="User")
    [foreign] = server.schedule(type="Freeze", vms=["WestNO_0"])
    url = f"{server.imds}/metadata/scheduledevents?api-version=2020-07-01"
    post = lambda *ids, **headers: requests.post(  # noqa: E731
        url, headers={"Metadata": "true", **headers}, json={"StartRequests": [{"EventId": i} for i in ids]}
    )
    # Unknown or foreign ids are refused and nothing of the request is applied.
    assert post(mine["event_id"], "00000000-0000-0000-0000-000000000000").status_code == 400
    assert post(mine["event_id"], foreign["event_id"]).status_code == 400
    assert server.get(f"/v1/events/{mine['event_id']}")["status"] == "Scheduled"
    assert post(mine["event_id"], Metadata="false").status_code == 400
    # Lowercase ids are the same GUID.
    assert post(mine["event_id"].lower()).status_code == 200
    assert server.get(f"/v1/events/{mine['event_id']}")["status"] == "Started"
    assert post(mine["event_id"]).status_code == 200  # already approved: still 200
    assert server.get(f"/v1/events/{foreign['event_id']}")["status"] == "Scheduled"


def test_lenient_unknown_event_ids(tmp_path):
    server = Server(tmp_path, "vms: [{name: only}]", extra=["--unknown-event-ids", "accept"]).start()
    try:
        response = requests.post(
            f"{server.imds}/metadata/scheduledevents?api-version=2020-07-01",
            headers={"Metadata": "true"},
            json={"StartRequests": [{"EventId": "00000000-0000-0000-0000-000000000000"}]},
        )
        assert response.status_code == 200
    finally:
        server.stop()


def test_kill_9_loses_nothing_acknowledged(server):
    [event] = server.schedule(type="Freeze", vms=["WestNO_0", "WestNO_1"])
    approval = requests.post(
        f"{as_vm(server, 'WestNO_0')}/metadata/scheduledevents?api-version=2020-07-01",
        headers={"Metadata": "true"},
        json={"StartRequests": [{"EventId": event["event_id"]}]},
    )
    assert approval.status_code == 200
    server.kill()
    server.args = list(server.args)  # same database, same ports
    server.start()
    doc = document(server, "WestNO_1")
    assert doc["DocumentIncarnation"] == 3 and doc["Events"][0]["EventStatus"] == "Started"
    assert doc["Events"][0]["EventId"] == event["event_id"]


def test_control_api_errors(server):
    assert server.post("/v1/events", {"type": "Nap", "vms": ["solo"]}).status_code == 400
    assert server.post("/v1/events", {"type": "Freeze", "vms": ["ghost"]}).status_code == 404
    assert server.post("/v1/events", {"type": "Freeze"}).json()["error"]["code"] == "Invalid"
    assert server.post("/v1/events", {"type": "Freeze", "vms": ["solo"], "notice": "soon"}).status_code == 400
    assert server.post("/v1/clock/advance", {"by": "-5m"}).status_code == 400
    [event] = server.schedule(type="Freeze", vms=["solo"], notice="0s")
    server.advance("1s")
    cancel = server.post(f"/v1/events/{event['event_id']}/cancel")
    assert cancel.status_code == 409 and "Started" in cancel.json()["error"]["message"]
    assert requests.get(f"{server.control}/openapi.json").json()["info"]["title"] == "forewarn control API"


def test_caller_found_by_its_source_address(server):
    """A client whose own address is a VM's imds.address (network namespaces, bound sockets) is that VM, whatever
    address it dialled."""
    import http.client

    server.schedule(type="Freeze", vms=["other-tenant"])
    connection = http.client.HTTPConnection("127.0.0.1", server.imds_port, source_address=("127.0.0.12", 0), timeout=10)
    connection.request("GET", "/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"})
    response = connection.getresponse()
    body = json.loads(response.read())
    connection.close()
    assert body["Events"][0]["Resources"] == ["other-tenant"]


def test_postgresql_store_survives_kill_9(tmp_path, postgres_url):
    server = Server(tmp_path, db=postgres_url).start()
    try:
        [event] = server.schedule(type="Reboot", vms=["solo"], notice="1m")
        server.post(f"/v1/events/{event['event_id']}/approve", expect=200)
        server.kill()
        server.start()
        doc = server.scheduled_events().json()
        assert doc["DocumentIncarnation"] == 3 and doc["Events"][0]["EventStatus"] == "Started"
        server.advance("10m")
        assert server.scheduled_events().json() == {"DocumentIncarnation": 4, "Events": []}
    finally:
        server.stop()
