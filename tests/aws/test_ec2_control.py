"""EC2 events through the control API and the CLI, on a real server."""

import json

import pytest

from helpers import Server, forewarn

EBS = "i-0aaaaaaaaaaaaaaa1"
SPOT = "i-0ddddddddddddddd4"
FLEET = f"""
default_vm: solo
hosts: [{{name: h1}}, {{name: h2}}]
vms: [{{name: solo, host: h1}}]
ec2_instances:
  - {{id: {EBS}, host: h1, name: db}}
  - {{id: {SPOT}, host: h2, spot: true, auto_scaling_group: workers}}
"""


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("ec2"), FLEET) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


def test_ec2_lifecycle_from_the_cli(server):
    [event] = json.loads(
        forewarn(server, "schedule", "--code", "instance-stop", "--instance", EBS, "--notice", "2h", "--json").stdout
    )
    assert event["code"] == "instance-stop" and event["not_after"] is None and event["state"] == "active"
    [reboot] = json.loads(
        forewarn(server, "schedule", "--code", "system-reboot", "--instance", EBS, "--notice", "1d", "--json").stdout
    )
    moved = json.loads(
        forewarn(server, "ec2", "reschedule", reboot["event_id"], "2026-04-23T10:00:00Z", "--json").stdout
    )
    assert moved[0]["not_before"] == "2026-04-23T10:00:00Z"
    refused = forewarn(server, "ec2", "reschedule", event["event_id"], "2026-04-21T10:00:00Z", check=False)
    assert refused.returncode == 1 and "no deadline" in refused.stderr
    server.advance("2h1m")  # stopped at NotBefore; the event completes a minute later
    instances = {i["instance_id"]: i for i in json.loads(forewarn(server, "ec2", "instances", "--json").stdout)}
    assert instances[EBS]["state"] == "stopped"
    started = json.loads(forewarn(server, "ec2", "start", EBS, "--json").stdout)
    assert started["instances"][0]["host"] == "h2"  # instance-stop: a new host on the next start
    canceled = json.loads(forewarn(server, "ec2", "cancel", reboot["event_id"], "--json").stdout)
    assert canceled[0]["description"].startswith("[Canceled] ")
    history = json.loads(forewarn(server, "ec2", "events", "--all", "--json").stdout)
    assert [e["state"] for e in history] == ["completed", "canceled"]


def test_spot_interruption_and_auto_scaling_replacement(server):
    outcome = json.loads(forewarn(server, "ec2", "interrupt", SPOT, "--action", "terminate", "--json").stdout)
    assert outcome["instances"][0]["spot_action_time"] == "2026-04-20T22:13:58Z"
    server.advance("2m")
    instances = json.loads(forewarn(server, "ec2", "instances", "--json").stdout)
    by_id = {i["instance_id"]: i for i in instances}
    assert by_id[SPOT]["state"] == "terminated" and by_id[SPOT]["lifecycle_state"] == "Terminated"
    [replacement] = [i for i in instances if i["replaces"] == SPOT]
    assert replacement["state"] == "running" and replacement["auto_scaling_group"] == "workers"
    bad = forewarn(server, "ec2", "interrupt", EBS, check=False)
    assert bad.returncode == 1 and "not a Spot instance" in bad.stderr
    assert forewarn(server, "schedule", "--code", "system-reboot", "--instance", "i-bad", check=False).returncode == 1
    assert forewarn(server, "schedule", "--type", "Freeze", "--code", "system-reboot", check=False).returncode == 2


def test_ec2_metadata_over_http_with_imdsv2(tmp_path):
    import requests

    fleet = FLEET.replace(
        f"{{id: {EBS}, host: h1, name: db}}", f"{{id: {EBS}, host: h1, name: db, imds: {{address: 127.0.0.60}}}}"
    )
    server = Server(tmp_path, fleet, extra=["--ec2-imds-tokens", "required"]).start()
    try:
        base = f"http://127.0.0.60:{server.imds_port}"
        assert requests.get(f"{base}/latest/meta-data/instance-id").status_code == 401
        token = requests.put(f"{base}/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        assert token.status_code == 200 and token.headers["X-aws-ec2-metadata-token-ttl-seconds"] == "60"
        headers = {"X-aws-ec2-metadata-token": token.text}
        assert requests.get(f"{base}/latest/meta-data/instance-id", headers=headers).text == EBS
        url = f"{base}/latest/meta-data/events/maintenance/scheduled"
        assert requests.get(url, headers=headers).text == "[ ]"
        forewarn(server, "schedule", "--code", "system-reboot", "--instance", EBS, "--notice", "2h")
        [event] = requests.get(url, headers=headers).json()
        assert (event["Code"], event["State"], event["NotBefore"]) == (
            "system-reboot",
            "active",
            "21 Apr 2026 00:11:58 GMT",
        )
        assert (
            requests.put(f"{base}/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "0"}).status_code
            == 400
        )
        # The Azure paths are not an EC2 instance's.
        assert (
            requests.get(
                f"{base}/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"}
            ).status_code
            == 404
        )
        assert requests.get(f"{server.imds}/latest/meta-data/instance-id").status_code == 404  # solo is Azure
    finally:
        server.stop()


def test_boto3_against_the_real_server(server):
    import boto3

    client = boto3.client(
        "ec2", endpoint_url=server.ec2, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    forewarn(server, "schedule", "--code", "system-reboot", "--instance", EBS, "--notice", "1d")
    statuses = client.describe_instance_status(InstanceIds=[EBS])["InstanceStatuses"]
    [event] = statuses[0]["Events"]
    assert event["Code"] == "system-reboot" and event["NotBefore"].isoformat() == "2026-04-21T22:11:58+00:00"
    moved = client.modify_instance_event_start_time(
        InstanceId=EBS, InstanceEventId=event["InstanceEventId"], NotBefore="2026-04-22T10:00:00Z"
    )["Event"]
    assert moved["NotBefore"].isoformat() == "2026-04-22T10:00:00+00:00"


def test_strict_sigv4_on_the_real_server(tmp_path):
    import boto3
    from botocore.exceptions import ClientError

    server = Server(tmp_path, FLEET, extra=["--ec2-credential", "AKIDEXAMPLE:s3cr3t"]).start()
    try:

        def client(key, secret):
            return boto3.client(
                "ec2",
                endpoint_url=server.ec2,
                region_name="us-east-1",
                aws_access_key_id=key,
                aws_secret_access_key=secret,
            )

        assert client("AKIDEXAMPLE", "s3cr3t").describe_instance_status(InstanceIds=[EBS])["InstanceStatuses"]
        with pytest.raises(ClientError) as wrong:
            client("AKIDEXAMPLE", "nope").describe_instance_status()
        assert wrong.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
        with pytest.raises(ClientError) as unknown:
            client("AKIDOTHER", "s3cr3t").describe_instance_status()
        assert unknown.value.response["Error"]["Code"] == "AuthFailure"
    finally:
        server.stop()
