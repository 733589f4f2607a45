"""Faults of the AWS queue path on a real ``forewarn serve`` process, seen through real boto3: throttled actions of
EC2, SQS, EventBridge and Auto Scaling (each with its service's throttling error, a token bucket's burst and rate),
deliveries to queues duplicated or delayed on forewarn's clock; the control API's queue views and the
``forewarn queues`` commands."""

from __future__ import annotations

import json
import time

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from helpers import Server, forewarn

SPOT = "i-0aaaaaaaaaaaaaaa1"
FLEET = f"""
hosts: [{{name: h1}}]
ec2_instances:
  - {{id: {SPOT}, host: h1, spot: true}}
"""
WARNING = "EC2 Spot Instance Interruption Warning"


def client(server: Server, name: str):
    return boto3.client(
        name,
        endpoint_url=server.ec2,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"total_max_attempts": 1}),  # a throttled request is seen, not retried
    )


def refusal(call, **kwargs) -> tuple[str, int]:
    with pytest.raises(ClientError) as refused:
        call(**kwargs)
    error = refused.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("faults"), FLEET) as running:
        yield running


@pytest.fixture
def fresh(server):
    server.reset()
    assert requests.delete(f"{server.control}/v1/ec2/faults", timeout=10).status_code == 200
    return server


def throttle(server: Server, **body) -> dict:
    response = server.post("/v1/ec2/faults/throttles", body, expect=201)
    return response.json()


def spot_queue(server: Server) -> str:
    """A queue the Spot interruption warnings go to, through a rule."""
    sqs, events = client(server, "sqs"), client(server, "events")
    url = sqs.create_queue(QueueName="spot")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="spot", EventPattern=json.dumps({"detail-type": [WARNING]}))
    events.put_targets(Rule="spot", Targets=[{"Id": "q", "Arn": arn}])
    return url


def test_ec2_actions_throttled_by_a_token_bucket(fresh):
    ec2 = client(fresh, "ec2")
    made = throttle(fresh, service="ec2", actions=["DescribeInstanceStatus"], rate=0, burst=2)
    assert (made["service"], made["actions"], made["burst"]) == ("ec2", ["DescribeInstanceStatus"], 2)
    ec2.describe_instance_status()
    ec2.describe_instance_status()
    assert refusal(ec2.describe_instance_status) == ("RequestLimitExceeded", 503)
    ec2.describe_instance_event_windows()  # another action: not throttled
    assert fresh.get("/v1/ec2/faults")["throttles"][0]["refused"] == 1
    assert requests.delete(f"{fresh.control}/v1/ec2/faults", timeout=10).json() == {"cleared": 1}
    ec2.describe_instance_status()


def test_the_bucket_refills_at_its_rate(fresh):
    ec2 = client(fresh, "ec2")
    # Every action: one at once, then one each 500 ms, long enough that a loaded machine's gap between the first two
    # calls (tens of ms) does not refill the bucket already.
    throttle(fresh, service="ec2", rate=2, burst=1)
    ec2.describe_instance_event_windows()
    assert refusal(ec2.describe_instance_status)[0] == "RequestLimitExceeded"
    time.sleep(0.6)
    ec2.describe_instance_status()


def test_each_service_answers_with_its_own_throttling_error(fresh):
    sqs, events, autoscaling = client(fresh, "sqs"), client(fresh, "events"), client(fresh, "autoscaling")
    url = sqs.create_queue(QueueName="work")["QueueUrl"]
    for service in ("sqs", "events", "autoscaling"):
        throttle(fresh, service=service, actions=[], rate=0, burst=0)
    assert refusal(sqs.receive_message, QueueUrl=url) == ("RequestThrottled", 400)
    assert refusal(events.list_rules) == ("ThrottlingException", 400)
    assert refusal(autoscaling.describe_lifecycle_hooks, AutoScalingGroupName="web") == ("Throttling", 400)
    query = requests.post(fresh.ec2, data={"Action": "ListQueues", "Version": "2012-11-05"}, timeout=10)
    assert (query.status_code, "<Code>RequestThrottled</Code>" in query.text) == (400, True)
    client(fresh, "ec2").describe_instance_status()  # EC2 is not throttled


def test_refused_faults(fresh):
    for body in ({"service": "s3"}, {"service": "ec2", "rate": -1}):
        assert fresh.post("/v1/ec2/faults/throttles", body).status_code == 400
    for body in ({"duplicate": 2}, {"delayed": 0.5}, {"delayed": 1, "delay": "16m"}):
        response = requests.put(f"{fresh.control}/v1/ec2/faults/deliveries", json=body, timeout=10)
        assert response.status_code == 400, body


def test_duplicated_deliveries(fresh):
    sqs = client(fresh, "sqs")
    url = spot_queue(fresh)
    response = requests.put(f"{fresh.control}/v1/ec2/faults/deliveries", json={"duplicate": 1}, timeout=10)
    assert response.json() == {"duplicate": 1.0, "delayed": 0.0, "delay_seconds": 0}
    fresh.post("/v1/ec2/spot/interrupt", {"instances": [SPOT]}, expect=200)
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, MaxNumberOfMessages=10)["Messages"]
    bodies = [json.loads(m["Body"]) for m in got]
    assert [b["detail-type"] for b in bodies] == [WARNING, WARNING]
    assert bodies[0]["id"] == bodies[1]["id"]  # the same event twice, as an at-least-once delivery may be
    assert got[0]["MessageId"] != got[1]["MessageId"]


def test_delayed_deliveries_wait_on_forewarns_clock(fresh):
    sqs = client(fresh, "sqs")
    url = spot_queue(fresh)
    body = {"delayed": 1, "delay": "90s"}
    requests.put(f"{fresh.control}/v1/ec2/faults/deliveries", json=body, timeout=10).raise_for_status()
    fresh.post("/v1/ec2/spot/interrupt", {"instances": [SPOT]}, expect=200)
    deadline = time.monotonic() + 10
    while fresh.get("/v1/ec2/queues")[0]["delayed"] == 0:  # delivered, and held back
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    fresh.advance("90s")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    assert json.loads(got[0]["Body"])["detail-type"] == WARNING


def test_queue_views_and_the_cli(fresh):
    sqs = client(fresh, "sqs")
    url = sqs.create_queue(QueueName="handler")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="first")
    sqs.send_message(QueueUrl=url, MessageBody="second")
    sqs.receive_message(QueueUrl=url)
    listed = fresh.get("/v1/ec2/queues")
    assert [(q["name"], q["visible"], q["in_flight"]) for q in listed] == [("handler", 1, 1)]
    shown = fresh.get("/v1/ec2/queues/handler")
    assert [(m["body"], m["receive_count"], m["in_flight"]) for m in shown["messages"]] == [
        ("first", 1, True),
        ("second", 0, False),
    ]
    assert requests.get(f"{fresh.control}/v1/ec2/queues/nothing", timeout=10).status_code == 404
    assert "handler  1        1" in forewarn(fresh, "queues", "list").stdout
    assert "second" in forewarn(fresh, "queues", "show", "handler").stdout
    forewarn(fresh, "queues", "throttle", "sqs", "SendMessage", "--burst", "1")
    forewarn(fresh, "queues", "deliveries", "--duplicate", "0.5")
    shown_faults = forewarn(fresh, "queues", "faults").stdout
    assert "SendMessage" in shown_faults and "0.5 duplicated" in shown_faults
    sqs.send_message(QueueUrl=url, MessageBody="third")
    assert refusal(sqs.send_message, QueueUrl=url, MessageBody="fourth")[0] == "RequestThrottled"
    assert forewarn(fresh, "queues", "clear-faults").stdout.strip() == "cleared 2 faults"
    sqs.send_message(QueueUrl=url, MessageBody="fourth")
