"""``forewarn.testing.Forewarn``: a real server for code without pytest's fixture (unittest, scripts), driven the
way a test drives it, and read back through the VMs' own metadata endpoints with a real HTTP client."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from forewarn.testing import Forewarn, ForewarnError, SandboxUnavailable

FLEET = """
default_vm: solo
hosts: [{name: host-01}, {name: host-02}]
availability_sets: [{name: ha}]
vms:
  - {name: ha-0, host: host-01, availability_set: ha, imds: {address: 127.0.0.80}}
  - {name: ha-1, host: host-01, availability_set: ha, imds: {port: 9010}}
  - {name: solo, host: host-02}
scale_sets:
  - {name: web, instances: 2, hosts: [host-01], imds: {port: 9020}}
ec2_instances:
  - {id: i-0aaaaaaaaaaaaaaa1, name: db, availability_zone: eu-west-1b, imds: {address: 127.0.0.81}}
gce_instances:
  - {name: api-1, host: host-02, imds: {address: 127.0.0.82}}
  - name: trainer-1
    host: host-02
    gpus: {count: 1, type: nvidia-l4}
    scheduling: {on_host_maintenance: TERMINATE}
    imds: {address: 127.0.0.83}
"""
START = "2026-04-20T22:00:00Z"
SRC = Path(__file__).resolve().parents[2] / "src"


def scheduled_events(base: str) -> dict:
    response = requests.get(
        f"{base}/metadata/scheduledevents",
        params={"api-version": "2020-07-01"},
        headers={"Metadata": "true"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return response.json()


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def shared():
    with Forewarn(FLEET, start=START) as server:
        yield server


@pytest.fixture
def fw(shared: Forewarn) -> Forewarn:
    return shared.reset()


def test_an_agent_sees_the_event_at_its_own_endpoint_approves_it_and_the_clock_moves_only_when_told(fw):
    [event] = fw.schedule("Freeze", ["ha-0", "ha-1"], notice="5m")
    assert fw.now == "2026-04-20T22:00:00Z"
    for vm in ("ha-0", "ha-1"):  # one by its own address, one by its own (moved) port
        document = scheduled_events(fw.metadata_url(vm))
        assert [(e["EventId"], e["EventStatus"], e["Resources"]) for e in document["Events"]] == [
            (event["event_id"], "Scheduled", ["ha-0", "ha-1"])
        ]
    approval = requests.post(
        f"{fw.metadata_url('ha-0')}/metadata/scheduledevents",
        params={"api-version": "2020-07-01"},
        headers={"Metadata": "true"},
        json={"StartRequests": [{"EventId": event["event_id"]}]},
        timeout=10,
    )
    assert approval.status_code == 200, approval.text
    assert fw.document("ha-1")["Events"][0]["EventStatus"] == "Started"  # approved: it starts for both
    stepped = fw.step()["now"]  # to the next deadline, a few seconds on
    assert START < stepped < "2026-04-20T22:01:00Z"
    assert fw.advance("1h")["now"] > stepped
    assert fw.events() == [] and fw.events(all=True)[0]["status"] == "Completed"
    assert fw.document("ha-0") == {"DocumentIncarnation": 4, "Events": []}


def test_cancel_and_refusals_come_back_as_errors_with_the_apis_code(fw):
    [event, other] = fw.schedule("Reboot", ["solo", "ha-0"], notice="15m")
    assert scheduled_events(fw.imds_url)["Events"][0]["EventId"] == event["event_id"]  # solo is the default VM
    assert fw.approve(other["event_id"], by="ha-0")[0]["status"] == "Started"
    assert fw.cancel(event["event_id"])["status"] == "Canceled"
    with pytest.raises(ForewarnError) as refused:
        fw.schedule("Freeze", ["no-such-vm"])
    assert refused.value.status == 404 and refused.value.code == "NotFound" and "no-such-vm" in refused.value.message


def test_ec2_events_by_code_at_the_instances_own_endpoint_and_on_the_ec2_api(fw):
    [event] = fw.schedule_ec2("system-reboot", "i-0aaaaaaaaaaaaaaa1", notice="1h")
    assert fw.metadata_url("db") == fw.metadata_url("i-0aaaaaaaaaaaaaaa1") == f"http://127.0.0.81:{fw.imds_port}"
    [scheduled] = fw.ec2_document("db")
    assert (scheduled["Code"], scheduled["EventId"], scheduled["State"]) == (
        "system-reboot",
        event["event_id"],
        "active",
    )
    described = requests.post(
        fw.ec2_url, data={"Action": "DescribeInstanceStatus", "Version": "2016-11-15"}, timeout=10
    )
    assert described.status_code == 200 and event["event_id"] in described.text
    assert fw.cancel_ec2(event["event_id"])["state"] == "canceled"
    assert fw.ec2_events() == []


def test_queue_messages_and_faults_of_the_queue_path(fw):
    sqs = boto3.client(
        "sqs",
        endpoint_url=fw.ec2_url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"total_max_attempts": 1}),
    )
    url = sqs.create_queue(QueueName="handler")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="drain db")
    [message] = fw.queue_messages("handler")
    assert (message["body"], message["receive_count"], message["in_flight"]) == ("drain db", 0, False)
    assert fw.throttle("sqs", "SendMessage")["refused"] == 0
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="again")
    assert refused.value.response["Error"]["Code"] == "RequestThrottled"
    assert fw.delivery_faults(duplicate=1)["duplicate"] == 1
    with pytest.raises(ForewarnError) as wrong:
        fw.delivery_faults(delayed=1)  # held back for how long?
    assert wrong.value.status == 400
    fw.reset()  # no fault left
    sqs.create_queue(QueueName="handler")
    sqs.send_message(QueueUrl=url, MessageBody="again")
    assert fw.call("GET", "/v1/ec2/faults")["throttles"] == []


def test_compute_engine_maintenance_its_notice_at_the_instances_own_endpoint_and_a_simulated_event(fw):
    assert fw.gce_maintenance_event("api-1") == "NONE"  # read once: from now on, api-1 gets its 60-second notice
    [event] = fw.maintain_gce("api-1", kind="migrate", notice="5m")
    assert [e["event_id"] for e in fw.gce_maintenance()] == [event["event_id"]]
    fw.advance("3m")  # two minutes before the start
    assert fw.gce_maintenance_event("api-1") == "NONE"
    fw.advance("90s")  # 30 seconds before it: within its 60-second notice
    assert fw.gce_maintenance_event("api-1") == "MIGRATE_ON_HOST_MAINTENANCE"
    assert fw.gce_instance("api-1")["maintenance_event"] == "MIGRATE_ON_HOST_MAINTENANCE"
    fw.advance("1h")
    assert fw.gce_maintenance_event("api-1") == "NONE" and fw.gce_maintenance() == []
    assert [e["state"] for e in fw.gce_maintenance(all=True)] == ["completed"]

    fw.gce_maintenance_event("trainer-1")  # watched: its simulated maintenance comes with its notice
    [simulated] = fw.simulate_gce_maintenance("trainer-1")["events"]
    assert (simulated["instance"], simulated["kind"]) == ("trainer-1", "TERMINATE_ON_HOST_MAINTENANCE")
    assert fw.gce_maintenance_event("trainer-1") == "TERMINATE_ON_HOST_MAINTENANCE"  # an hour ahead, with GPUs
    assert fw.gce_instance("trainer-1")["status"] == "RUNNING"
    [ahead] = fw.maintain_gce(["api-1"], notice="1d")  # announced a day ahead: upcoming maintenance, cancelable
    assert fw.gce_instance("api-1")["upcoming"]["window_start"] == ahead["window_start"]
    assert fw.cancel_gce(ahead["event_id"])["state"] == "canceled"
    assert fw.gce_instance("api-1")["upcoming"] is None
    with pytest.raises(ForewarnError) as refused:
        fw.simulate_gce_maintenance("nope")
    assert refused.value.code == "NotFound"


def test_a_reset_leaves_no_trace_of_the_test_before(fw):
    fw.schedule("Freeze", ["ha-0"], notice="5m")
    fw.advance("2h")
    fw.reset()
    assert fw.events(all=True) == [] and fw.ec2_events(all=True) == [] and fw.gce_maintenance(all=True) == []
    assert fw.now == START
    assert scheduled_events(fw.metadata_url("ha-0")) == {"DocumentIncarnation": 1, "Events": []}


def test_the_fleets_fixed_ports_are_moved_to_free_ones_and_every_machine_has_its_url(shared):
    urls = shared.metadata_urls
    assert urls["ha-0"] == f"http://127.0.0.80:{shared.imds_port}"
    ha1, web0, web1 = (int(urls[name].rsplit(":", 1)[1]) for name in ("ha-1", "web_0", "web_1"))
    assert 9010 not in (ha1, web0) and web1 == web0 + 1  # a scale set's instances still count up from one port
    assert scheduled_events(urls["web_1"])["DocumentIncarnation"] == 1
    assert urls["solo"] == shared.imds_url
    with pytest.raises(ForewarnError, match="no VM or instance 'nope'"):
        shared.metadata_url("nope")


def test_vm_ports_moved_to_free_ones_are_none_of_the_servers_own_nor_each_others(monkeypatch):
    """40 VMs' ports and the server's 5 drawn from 100 ports: a draw that could return a port already given would
    all but surely give one twice (a VM answered by the EC2 API, or a start that fails)."""
    monkeypatch.setenv("FOREWARN_TEST_NET", "41200-41299")
    vms = [{"name": f"vm-{index}", "host": "h", "imds": {"port": 9000 + index}} for index in range(40)]
    with Forewarn(fleet={"hosts": [{"name": "h"}], "vms": vms}) as server:
        own = [server.port, server.imds_port, server.arm_port, server.ec2_port, server.gce_port]
        ports = [server.fleet.machine_called(vm["name"]).imds_port for vm in vms]
        assert len(set(own + ports)) == 45 and all(41200 <= port <= 41299 for port in own + ports)
        for vm in vms:
            answer = requests.get(
                f"{server.metadata_url(vm['name'])}/metadata/instance/compute/name?api-version=2021-02-01&format=text",
                headers={"Metadata": "true"},
                timeout=10,
            )
            assert answer.text == vm["name"]


def test_a_fleet_as_a_dict_or_a_file_and_the_server_stops_with_the_block(tmp_path):
    fleet = {"hosts": [{"name": "h"}], "vms": [{"name": "a", "host": "h"}], "default_vm": "a"}
    with Forewarn(fleet) as server:
        assert server.clock()["mode"] == "manual"
        assert scheduled_events(server.metadata_url("a"))["Events"] == []
        port = server.port
    assert not server.running and not listening(port)
    path = tmp_path / "fleet.yaml"
    path.write_text("hosts: [{name: h}]\nvms: [{name: b, host: h}]\n")
    with Forewarn(str(path), clock="real") as server:
        assert server.clock()["mode"] == "real"
        assert [vm["name"] for vm in server.call("GET", "/v1/fleet")["vms"]] == ["b"]


def test_a_bad_fleet_is_refused_before_a_server_starts_with_the_line_at_fault():
    with pytest.raises(ForewarnError, match="fleet:3: vms.0..host: host .nowhere. is not declared"):
        Forewarn("hosts: [{name: h}]\nvms:\n  - {name: a, host: nowhere}\n")
    with pytest.raises(ForewarnError, match="not a file, nor 'demo'"):
        Forewarn("no-such-fleet.yaml")


def test_a_scenario_runs_on_the_server_of_its_fleet():
    with Forewarn.for_scenario("canceled-maintenance") as server:
        timeline = server.run_scenario("canceled-maintenance")
        assert timeline["passed"], timeline["expectations"]
        assert [event["status"] for event in server.events(all=True)] == ["Canceled", "Canceled"]


def test_the_sandbox_runs_a_program_as_a_vm_or_says_what_is_missing():
    from forewarn.sandbox import unavailable_reason

    missing = unavailable_reason()
    with Forewarn(FLEET, start=START) as server:
        if missing is not None:
            with pytest.raises(SandboxUnavailable):
                server.sandbox()
            pytest.skip(f"no sandbox here: {missing}")
        server.schedule(type="Freeze", vms="solo")
        fetch = (
            "import urllib.request; request = urllib.request.Request("
            "'http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01', headers={'Metadata': 'true'}); "
            "print(urllib.request.urlopen(request, timeout=10).read().decode())"
        )
        sandbox = server.sandbox()
        answer = sandbox.up("solo").run([sys.executable, "-c", fetch], capture_output=True, text=True, timeout=60)
        assert answer.returncode == 0, answer.stderr
        assert json.loads(answer.stdout) == server.document("solo")
        assert json.loads(answer.stdout)["Events"][0]["Resources"] == ["solo"]
        assert server.sandbox() is sandbox
    assert not sandbox.vms, "stopping the server removes its sandbox's namespaces"


def test_a_script_that_never_stops_its_server_leaves_none_running():
    script = (
        "from forewarn.testing import Forewarn\n"
        "server = Forewarn('hosts: [{name: h}]\\nvms: [{name: a, host: h}]\\n').start()\n"
        "print(server.port)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(SRC)}
    )
    assert run.returncode == 0, run.stderr
    assert not listening(int(run.stdout.strip()))
