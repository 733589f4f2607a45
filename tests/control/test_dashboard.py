"""The dashboard's server side over HTTP: the page and its files, the compact fleet read, the live stream of committed
changes (and who may read it), the clock's pause and run, and the OpenAPI UI served without a CDN."""

import asyncio
import json
import re
import socket
import threading
import time
from datetime import UTC, datetime

import httpx
import pytest
import requests
import yaml

from forewarn.app.runtime import ClockView
from forewarn.cloud import MachineState
from forewarn.control import dashboard
from forewarn.control.dashboard import MAX_STREAMS, MAX_STREAMS_PER_SOURCE, QUEUE_LIMIT, LiveFeed
from forewarn.scenarios.testnet import loopback_address
from helpers import ROOT, Server


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("dashboard")) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


def messages(response: httpx.Response):
    """The JSON of each ``data:`` block of a server-sent event stream, as they arrive."""
    block = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            block.append(line[5:])
        elif line == "" and block:
            yield json.loads("\n".join(block))
            block = []


def test_the_page_and_its_files_come_from_the_server_itself(server):
    page = requests.get(server.control + "/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith(("/", "data:")) for s in sources), sources
    for path in (
        "/static/dashboard/app.js",
        "/static/dashboard/fleet.js",
        "/static/dashboard/timeline.js",
        "/static/dashboard/canvas.js",
    ):
        script = requests.get(server.control + path, timeout=10)
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
        assert "http://" not in script.text and "https://" not in script.text  # nothing from the internet
    missing = requests.get(server.control + "/static/dashboard/../../app.py", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NotFound"


def test_docs_load_swagger_ui_from_this_server(server):
    page = requests.get(server.control + "/docs", timeout=10)
    assert page.status_code == 200
    scripts = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert "/static/swagger/swagger-ui-bundle.js" in scripts and "/static/swagger/swagger-ui.css" in scripts
    assert not [s for s in scripts if "//" in s]
    bundle = requests.get(server.control + "/static/swagger/swagger-ui-bundle.js", timeout=10)
    assert bundle.status_code == 200 and "SwaggerUIBundle" in bundle.text[:2000]


def test_fleet_read_gives_every_machine_and_its_state(server):
    server.schedule(type="Freeze", vms=["WestNO_0"])
    fleet = server.get("/v1/dashboard/fleet")
    machines = fleet["machines"]
    names = machines["name"]
    assert set(names) >= {"WestNO_0", "WestNO_1", "solo", "spotty", "myvmss_0"}
    states = {name: fleet["state_names"][code] for name, code in zip(names, machines["state"])}
    assert states["WestNO_0"] == "scheduled" and states["WestNO_1"] == "ok"
    westno = names.index("WestNO_1")
    assert fleet["sets"][machines["set"][westno]] == "availability set westno"
    assert fleet["hosts"][machines["host"][westno]] == "host-01"
    assert fleet["clock"]["now"] == "2026-04-20T22:11:58Z" and fleet["clock"]["mode"] == "manual"


def test_stream_carries_each_committed_change(server):
    with httpx.Client(timeout=10) as client, client.stream("GET", server.control + "/v1/dashboard/stream") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        received = messages(stream)
        assert next(received)["hello"] is True
        [event] = server.schedule(type="Reboot", vms=["WestNO_0", "WestNO_1"])
        scheduled = next(received)
        assert [e["event_id"] for e in scheduled["events"]] == [event["event_id"]]
        assert scheduled["states"] == {"WestNO_0": 1, "WestNO_1": 1}
        assert scheduled["committed"] > 0 and scheduled["seq"] >= 1
        server.post("/v1/clock/next", expect=200)
        started = next(received)
        assert started["events"][0]["status"] == "Started"
        assert started["clock"]["now"] == event["not_before"]
        assert set(started["states"].values()) == {MachineState.IMPACTED}  # rebooting
        server.post("/v1/reset", expect=200)
        assert next(received)["resync"] is True


def test_pause_and_run_the_clock(server):
    running = server.post("/v1/clock/mode", {"mode": "real", "speed": 60}, expect=200).json()
    assert running["mode"] == "real" and running["speed"] == 60
    paused = server.post("/v1/clock/mode", {"mode": "manual"}, expect=200).json()
    assert paused["mode"] == "manual" and paused["now"] >= running["now"]
    refused = server.post("/v1/clock/mode", {"mode": "real", "speed": 0}, expect=400).json()
    assert "speed" in refused["error"]["message"]
    assert server.post("/v1/clock/mode", {"mode": "sideways"}, expect=400).json()["error"]["code"] == "Invalid"


def test_vm_document_carries_the_etag_the_vm_gets(server):
    server.schedule(type="Freeze", vms=["solo"])  # the default VM: the one the shared IMDS port answers as
    control = requests.get(server.control + "/v1/vms/solo/scheduledevents", timeout=10)
    vm = server.scheduled_events()
    assert control.content.startswith(b'{"DocumentIncarnation":2')
    assert control.content == vm.content and control.headers["etag"] == vm.headers["etag"]


def test_with_a_token_data_and_stream_need_it_but_the_page_does_not(tmp_path):
    with Server(tmp_path, extra=["--control-token", "s3cret-token"]) as server:
        for path in ("/v1/dashboard/fleet", "/v1/dashboard/stream", "/openapi.json"):
            refused = requests.get(server.control + path, timeout=10)
            assert refused.status_code == 401, path
        for path in ("/", "/docs", "/static/dashboard/app.js", "/static/swagger/swagger-ui.css"):
            assert requests.get(server.control + path, timeout=10).status_code == 200, path
        headers = {"authorization": "Bearer s3cret-token"}
        with httpx.Client(timeout=10) as client:
            with client.stream("GET", server.control + "/v1/dashboard/stream", headers=headers) as stream:
                assert stream.status_code == 200
                assert next(messages(stream))["hello"] is True


class QuietService:
    """What LiveFeed needs of Maintenance: a place to subscribe and a clock to show."""

    def subscribe(self, listener):
        self.listener = listener

    def clock_view(self):
        return ClockView("manual", 1.0, datetime(2026, 4, 20, tzinfo=UTC), None)


def test_a_client_that_does_not_read_is_dropped_and_holds_nothing():
    async def scenario():
        feed = LiveFeed(QuietService())
        stream = feed.open("127.0.0.1")
        follower = feed.follow(stream)
        assert b'"hello"' in await anext(follower)
        reading = asyncio.ensure_future(anext(follower))  # the stream waits for the next message
        await asyncio.sleep(0)
        for n in range(QUEUE_LIMIT + 10):  # the page stopped reading while these were committed
            feed.publish({"n": n})
        await asyncio.sleep(0)
        assert not stream.pending  # the backlog was let go at the limit
        assert not feed.streams and feed.dropped == 1  # and the slot at once, not when the client next reads
        assert await reading == b'data: {"dropped":true}\n\n'
        with pytest.raises(StopAsyncIteration):
            await anext(follower)
        assert not feed.streams and not feed.by_source and feed.dropped == 1

    asyncio.run(scenario())


def open_stream(port: int, source: str) -> tuple[socket.socket, bytes]:
    """A dashboard stream on a socket from ``source`` that is then not read, and its status line. Its receive buffer
    is small, so that what the server sends it soon stays in the server's kernel, unsent."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24), 1)
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /v1/dashboard/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while b"\r\n" not in answer:
        answer += sock.recv(4096)
    return sock, answer


def stream_answer(server: Server, source: str = "127.0.0.1") -> tuple[int, dict]:
    """Status and first message (or error) of a stream asked for from ``source``."""
    transport = httpx.HTTPTransport(local_address=source)
    with (
        httpx.Client(timeout=10, transport=transport) as client,
        client.stream("GET", server.control + "/v1/dashboard/stream") as stream,
    ):
        if stream.status_code != 200:
            return stream.status_code, json.loads(stream.read())
        return 200, next(messages(stream))


def stream_status(server: Server) -> int:
    return stream_answer(server)[0]


def test_one_address_holds_at_most_16_streams(tmp_path):
    """64 streams from one client once took every slot: any other page got 503 for as long as they were held."""
    with Server(tmp_path) as server:
        held = []
        try:
            for _ in range(MAX_STREAMS_PER_SOURCE):
                sock, answer = open_stream(server.port, loopback_address(4, 1))
                held.append(sock)
                assert answer.startswith(b"HTTP/1.1 200 ")
            status, refusal = stream_answer(server, loopback_address(4, 1))
            assert (status, refusal["error"]["code"]) == (503, "TooManyStreams")
            assert refusal["error"]["message"] == f"at most 16 open streams from one address ({loopback_address(4, 1)})"
            assert stream_answer(server, loopback_address(4, 2))[1]["hello"]  # another address still gets its stream
        finally:
            for sock in held:
                sock.close()


def read_until_closed(stream: httpx.Response, into: list) -> None:
    try:
        into.extend(messages(stream))
    except httpx.ReadError:  # the test closed the connection
        pass


def test_streams_that_are_not_read_give_their_slots_back(tmp_path):
    """64 streams that were never read once held every slot for as long as their clients kept them open (no timeout),
    and any other page got 503. A stream whose client takes nothing of what it is sent for the send timeout (1 s here,
    10 s by default) is now cut and its slot freed; one that reads keeps its stream. A client that does not read is
    seen once some messages wait in the server's kernel: a few dozen changes fill these clients' small buffers."""
    with Server(tmp_path, extra=["--api-limit=send_timeout=1"]) as server:
        held = []
        received = []
        with httpx.Client(timeout=30) as client, client.stream("GET", server.control + "/v1/dashboard/stream") as read:
            reader = threading.Thread(target=read_until_closed, args=(read, received), daemon=True)
            reader.start()
            try:
                for n in range(MAX_STREAMS - 1):
                    sock, answer = open_stream(server.port, loopback_address(4, n // MAX_STREAMS_PER_SOURCE + 2))
                    held.append(sock)
                    assert answer.startswith(b"HTTP/1.1 200 ")
                assert stream_status(server) == 503  # every slot is taken
                for _ in range(60):  # two messages of about 370 bytes each to every stream: 44 KB in all
                    server.post("/v1/clock/mode", {"mode": "manual"}, expect=200)
                began = time.monotonic()
                while server.get("/v1/dashboard/stats")["streams"] > 1 and time.monotonic() - began < 10:
                    time.sleep(0.2)
                freed = time.monotonic() - began
                # the send timeout, the sweep once a second, and room for a loaded machine
                assert server.get("/v1/dashboard/stats")["streams"] == 1 and freed < 10, f"{freed:.1f} s"
                assert stream_status(server) == 200
                assert reader.is_alive() and received[0]["hello"]  # the reading page kept its stream
                assert len([m for m in received if "seq" in m]) >= 60  # and had every change (2 messages a POST)
            finally:
                for sock in held:
                    sock.close()


def test_an_ec2_instance_as_its_metadata_endpoint_and_the_ec2_api_show_it(tmp_path):
    demo = (ROOT / "src/forewarn/data/demo-fleet.yaml").read_text()
    with Server(tmp_path, fleet_text=demo) as server:
        instance = "i-0a1b2c3d4e5f60718"
        created = server.post("/v1/ec2/events", {"code": "system-reboot", "instances": [instance]}, expect=201)
        event_id = created.json()[0]["event_id"]
        metadata = requests.get(f"{server.control}/v1/ec2/instances/{instance}/metadata", timeout=10)
        assert metadata.status_code == 200 and event_id in metadata.text
        seen = requests.get(  # what the instance itself reads (orders-db answers at its own loopback address)
            f"http://127.0.0.30:{server.imds_port}/latest/meta-data/events/maintenance/scheduled", timeout=10
        )
        assert seen.content == metadata.content
        item = requests.get(f"{server.control}/v1/ec2/instances/{instance}/status", timeout=10)
        assert item.headers["content-type"].startswith("text/xml")
        api = requests.post(
            server.ec2,
            data=f"Action=DescribeInstanceStatus&Version=2016-11-15&InstanceId.1={instance}&IncludeAllInstances=true",
            headers={"content-type": "application/x-www-form-urlencoded"},
            timeout=10,
        )
        assert api.status_code == 200, api.text
        assert item.text.startswith("<item><instanceId>i-0a1b2c3d4e5f60718</instanceId>") and item.text in api.text
        assert "system-reboot" in item.text
        missing = requests.get(
            f"{server.control}/v1/ec2/instances/{instance}/metadata?path=/latest/nothing", timeout=10
        )
        gone = requests.get(f"http://127.0.0.30:{server.imds_port}/latest/nothing", timeout=10)
        assert (missing.status_code, missing.content) == (404, gone.content)
        unknown = requests.get(f"{server.control}/v1/ec2/instances/i-0123456789abcdef0/status", timeout=10)
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "NotFound"


def test_a_server_with_an_open_stream_stops_at_once(tmp_path):
    server = Server(tmp_path).start()
    try:
        with (
            httpx.Client(timeout=10) as client,
            client.stream("GET", server.control + "/v1/dashboard/stream") as stream,
        ):
            assert next(messages(stream))["hello"] is True
            began = time.monotonic()
            server.process.terminate()
            server.process.wait(10)  # uvicorn waits for open responses to end: the stream ends when it stops
            assert time.monotonic() - began < 5
    finally:
        server.stop()


def test_an_events_central_row_is_the_one_resource_graph_answers(server):
    [local] = server.schedule(type="Freeze", vms=["WestNO_0"])  # its set does not publish centrally
    assert server.get(f"/v1/events/{local['event_id']}/central")["resource_graph"] is None
    patched = requests.patch(f"{server.control}/v1/policies/solo", json={"publish_central": True}, timeout=10)
    assert patched.status_code == 200, patched.text
    [event] = server.schedule(type="Reboot", vms=["solo"])
    row = server.get(f"/v1/events/{event['event_id'][:8]}/central")["resource_graph"]
    query = f'maintenanceresources | where properties.EventId == "{event["event_id"]}"'
    answer = requests.post(
        f"{server.arm}/providers/Microsoft.ResourceGraph/resources",
        params={"api-version": "2022-10-01"},
        json={"query": query},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"] == [row]
    assert row["properties"]["EventStatus"] == "Scheduled"


def finished_run(server, timeout: float = 120.0) -> dict:
    """The last scenario run once it has ended (the runner is a thread of the server, moving its manual clock)."""
    deadline = time.monotonic() + timeout
    while True:
        last = server.get("/v1/scenarios/runs")[-1]
        if last["status"] != "running" or time.monotonic() > deadline:
            return last
        time.sleep(0.2)


def test_a_shipped_scenario_runs_on_this_server_with_its_expectations(tmp_path):
    spec = yaml.safe_load((ROOT / "src/forewarn/scenarios/library/fault-domain-wave.yaml").read_text())
    with Server(tmp_path, fleet_text=yaml.safe_dump(spec["fleet"])) as server:
        assert "fault-domain-wave" in [found["name"] for found in server.get("/v1/scenarios")]
        started = server.post("/v1/scenarios/fault-domain-wave/run", {"timing": "fast"}, expect=202).json()
        assert started["status"] == "running"
        again = server.post("/v1/scenarios/fault-domain-wave/run", {"timing": "fast"})
        assert again.status_code in (202, 409)  # refused while the first runs (it may have ended already)
        if again.status_code == 409:
            assert again.json()["error"]["code"] == "Conflict"
        run = finished_run(server)
        assert run["status"] == "passed", run
        assert run["expectations"] and all(check["passed"] for check in run["expectations"])
        assert run["progress"]["phase"] == "done"
        assert [w["status"] for w in server.get("/v1/waves")][:1] == ["completed"]  # done through this server


def test_a_scenario_whose_vms_the_fleet_lacks_is_refused_and_says_why(server):
    refused = server.post("/v1/scenarios/live-migration/run", {}, expect=409).json()["error"]
    assert refused["code"] == "Conflict" and "no app-01" in refused["message"]
    assert "forewarn serve --fleet scenario:live-migration" in refused["message"]
    assert all(run["scenario"] != "live-migration" for run in server.get("/v1/scenarios/runs"))  # no failed run kept
    unknown = server.post("/v1/scenarios/live-migrate/run", {}, expect=404).json()["error"]["message"]
    assert "did you mean 'live-migration'" in unknown
    assert server.post("/v1/scenarios/live-migration/run", {"timing": "slow"}, expect=400).json()["error"]["code"]


PATH_ALT_XML = "/computeMetadata/v1/instance/maintenance-event?alt=xml"


def test_gce_instances_in_the_fleet_read_the_stream_and_their_metadata_view(tmp_path):
    demo = (ROOT / "src/forewarn/data/demo-fleet.yaml").read_text()
    with Server(tmp_path, fleet_text=demo) as server:
        codes = dashboard.STATE_NAMES

        def gce_states() -> dict[str, str]:
            fleet = server.get("/v1/dashboard/fleet")
            m = fleet["machines"]
            return {
                name: (codes[state], fleet["sets"][group], fleet["zones"][zone])
                for name, cloud, state, group, zone in zip(m["name"], m["cloud"], m["state"], m["set"], m["zone"])
                if cloud == 2
            }

        assert gce_states() == {
            "web-1": ("ok", "Compute Engine us-central1-a", "us-central1-a"),
            "trainer-1": ("ok", "Compute Engine us-central1-a", "us-central1-a"),
            "batch-1": ("ok", "Compute Engine us-central1-b", "us-central1-b"),
        }
        web = "http://127.0.0.40:" + str(server.imds_port) + "/computeMetadata/v1/instance/maintenance-event"
        flavor = {"Metadata-Flavor": "Google"}
        requests.get(web, headers=flavor, timeout=10)  # web-1 asks once: its maintenance gets the 60-second notice
        with httpx.Client(timeout=10) as client, client.stream("GET", server.control + "/v1/dashboard/stream") as s:
            received = messages(s)
            assert next(received)["hello"] is True
            server.post("/v1/gce/maintenance", {"instances": ["web-1"], "notice": "10m"}, expect=201)
            scheduled = next(received)
            [event] = scheduled["gce_events"]
            assert (event["instance"], event["state"]) == ("web-1", "pending")
            assert scheduled["states"] == {"web-1": MachineState.SCHEDULED}
            server.post("/v1/clock/next", expect=200)  # the 60-second notice
            notified = next(received)
            assert notified["gce_events"][0]["state"] == "notified"
            # The view is the metadata server's own answer: same bytes, same ETag, as web-1 reads it.
            view = requests.get(f"{server.control}/v1/gce/instances/web-1/metadata", timeout=10)
            seen = requests.get(web, headers=flavor, timeout=10)
            assert (view.status_code, view.text) == (200, "MIGRATE_ON_HOST_MAINTENANCE")
            assert view.content == seen.content and view.headers["etag"] == seen.headers["etag"]
            server.post("/v1/clock/next", expect=200)  # the live migration starts
            started = next(received)
            assert started["states"] == {"web-1": MachineState.STARTED}
            assert gce_states()["web-1"][0] == "started"
        # Announced maintenance: upcoming-maintenance as trainer-1's metadata server serves it, and its 404 after.
        server.post("/v1/gce/maintenance", {"instances": ["trainer-1"], "notice": "7d"}, expect=201)
        path = "/computeMetadata/v1/instance/upcoming-maintenance"
        upcoming = requests.get(f"{server.control}/v1/gce/instances/trainer-1/metadata?path={path}", timeout=10)
        served = requests.get(f"http://127.0.0.41:{server.imds_port}{path}", headers=flavor, timeout=10)
        assert upcoming.json()["maintenance_status"] == "PENDING"
        assert upcoming.content == served.content and upcoming.headers["etag"] == served.headers["etag"]
        assert requests.get(f"{server.control}/v1/gce/instances/trainer-1", timeout=10).json()["watched"] is False
        recursive = requests.get(
            f"{server.control}/v1/gce/instances/trainer-1/metadata",
            params={"path": "/computeMetadata/v1/instance/?recursive=true"},
            timeout=10,
        )
        assert recursive.json()["maintenanceEvent"] == "NONE"
        missing = requests.get(
            f"{server.control}/v1/gce/instances/web-1/metadata?path=/computeMetadata/v1/nothing", timeout=10
        )
        gone = requests.get(f"http://127.0.0.40:{server.imds_port}/computeMetadata/v1/nothing", headers=flavor)
        assert (missing.status_code, missing.content) == (404, gone.content)
        bad_alt = requests.get(
            f"{server.control}/v1/gce/instances/web-1/metadata", params={"path": PATH_ALT_XML}, timeout=10
        )
        served_bad = requests.get(f"http://127.0.0.40:{server.imds_port}{PATH_ALT_XML}", headers=flavor, timeout=10)
        assert (bad_alt.status_code, bad_alt.text) == (400, "Invalid value for alt: xml\n")
        assert (served_bad.status_code, served_bad.content) == (400, bad_alt.content)
        unknown = requests.get(f"{server.control}/v1/gce/instances/web-9/metadata", timeout=10)
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "NotFound"
        bad = requests.get(f"{server.control}/v1/gce/instances/web-1/metadata?path=computeMetadata", timeout=10)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "Invalid"
        # Preemption: started during the 30-second notice, evicted once stopped.
        server.post("/v1/gce/preempt", {"instances": ["batch-1"]}, expect=200)
        assert gce_states()["batch-1"][0] == "started"
        server.post("/v1/clock/advance", {"by": "31s"}, expect=200)
        assert gce_states()["batch-1"][0] == "evicted"
