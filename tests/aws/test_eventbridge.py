"""EventBridge rules into SQS queues on a real ``forewarn serve`` process, with real boto3: the events forewarn's EC2
changes make (Spot interruption warnings, rebalance recommendations, instance state changes, AWS Health events)
reach the queues of the rules whose patterns match them, in AWS's documented shapes, and a queue-mode handler reads
and deletes them; rules survive kill -9."""

from __future__ import annotations

import json
import time

import boto3
import pytest
from botocore.exceptions import ClientError

from helpers import Server

SPOT = "i-0aaaaaaaaaaaaaaa1"
PLAIN = "i-0bbbbbbbbbbbbbbb2"
FLEET = f"""
hosts: [{{name: h1}}, {{name: h2}}]
ec2_instances:
  - {{id: {SPOT}, host: h1, spot: true}}
  - {{id: {PLAIN}, host: h2}}
"""


def clients(server: Server):
    settings = {
        "endpoint_url": server.ec2,
        "region_name": "us-east-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    return boto3.client("sqs", **settings), boto3.client("events", **settings)


def queue_with_rule(sqs, events, name: str, pattern: dict) -> str:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name=name, EventPattern=json.dumps(pattern))
    assert events.put_targets(Rule=name, Targets=[{"Id": "queue", "Arn": arn}])["FailedEntryCount"] == 0
    return url


def drain(sqs, url: str, wait: int = 5) -> list[dict]:
    """What a queue-mode handler does: receive, then delete each message it handled."""
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait).get("Messages", [])
    for message in got:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return [json.loads(message["Body"]) for message in got]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("eventbridge"), FLEET) as running:
        yield running


@pytest.fixture
def aws(server):
    server.reset()
    return clients(server)


def test_spot_warning_then_state_change_reach_the_handlers_queue(server, aws):
    sqs, events = aws
    url = queue_with_rule(
        sqs,
        events,
        "nth",
        {
            "source": ["aws.ec2"],
            "detail-type": ["EC2 Spot Instance Interruption Warning", "EC2 Instance State-change Notification"],
        },
    )
    server.post("/v1/ec2/spot/interrupt", {"instances": [SPOT], "action": "terminate"}, expect=200)
    [warning] = drain(sqs, url)
    assert warning["detail-type"] == "EC2 Spot Instance Interruption Warning"
    assert warning["source"] == "aws.ec2"
    assert warning["resources"] == [f"arn:aws:ec2:us-east-1:123456789012:instance/{SPOT}"]
    assert warning["detail"] == {"instance-id": SPOT, "instance-action": "terminate"}
    assert warning["time"] == "2026-04-20T22:11:58Z"
    assert set(warning) == {
        "version",
        "id",
        "detail-type",
        "source",
        "account",
        "time",
        "region",
        "resources",
        "detail",
    }
    server.advance("2m")
    changes = drain(sqs, url)
    assert [event["detail-type"] for event in changes] == ["EC2 Instance State-change Notification"] * 2
    assert [event["detail"] for event in changes] == [
        {"instance-id": SPOT, "state": "shutting-down"},
        {"instance-id": SPOT, "state": "terminated"},
    ]
    assert drain(sqs, url, wait=0) == []


def test_patterns_choose_the_queue(server, aws):
    sqs, events = aws
    rebalance = queue_with_rule(sqs, events, "rebalance", {"detail-type": ["EC2 Instance Rebalance Recommendation"]})
    health = queue_with_rule(
        sqs,
        events,
        "health",
        {"source": ["aws.health"], "detail": {"eventTypeCode": [{"prefix": "AWS_EC2_"}], "statusCode": ["upcoming"]}},
    )
    others = queue_with_rule(
        sqs, events, "not-spot", {"source": ["aws.ec2"], "detail-type": [{"anything-but": {"prefix": "EC2 Spot"}}]}
    )
    server.post("/v1/ec2/spot/rebalance", {"instances": [SPOT]}, expect=200)
    server.post("/v1/ec2/events", {"code": "system-reboot", "instances": [PLAIN]}, expect=201)
    [recommendation] = drain(sqs, rebalance)
    assert recommendation["detail"] == {"instance-id": SPOT}
    [notice] = drain(sqs, health)
    assert notice["detail-type"] == "AWS Health Event"
    assert notice["detail"]["eventTypeCode"] == "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED"
    assert notice["detail"]["affectedEntities"][0]["entityValue"].endswith(PLAIN)
    assert [event["detail-type"] for event in drain(sqs, others)] == ["EC2 Instance Rebalance Recommendation"]
    events.disable_rule(Name="rebalance")
    server.post("/v1/ec2/spot/rebalance", {"instances": [SPOT]}, expect=200)
    assert drain(sqs, rebalance, wait=1) == []
    assert len(drain(sqs, others)) == 1


def test_rule_actions_and_their_refusals(server, aws):
    sqs, events = aws
    url = queue_with_rule(sqs, events, "r1", {"source": ["aws.ec2"]})
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    [rule] = events.list_rules(NamePrefix="r")["Rules"]
    assert (rule["Name"], rule["State"], json.loads(rule["EventPattern"])) == ("r1", "ENABLED", {"source": ["aws.ec2"]})
    assert events.describe_rule(Name="r1")["Arn"] == "arn:aws:events:us-east-1:123456789012:rule/r1"
    assert events.list_targets_by_rule(Rule="r1")["Targets"] == [{"Id": "queue", "Arn": arn}]
    lambda_target = events.put_targets(
        Rule="r1", Targets=[{"Id": "fn", "Arn": "arn:aws:lambda:us-east-1:1:function:f"}]
    )
    assert lambda_target["FailedEntryCount"] == 1

    def code(call, **kwargs) -> str:
        with pytest.raises(ClientError) as refused:
            call(**kwargs)
        return refused.value.response["Error"]["Code"]

    assert code(events.delete_rule, Name="r1") == "ValidationException"  # it has targets
    assert code(events.put_rule, Name="bad", EventPattern='{"source": "aws.ec2"}') == "InvalidEventPatternException"
    assert code(events.put_rule, Name="bad", EventPattern="{") == "InvalidEventPatternException"
    assert code(events.describe_rule, Name="nope") == "ResourceNotFoundException"
    assert code(events.put_targets, Rule="nope", Targets=[{"Id": "q", "Arn": arn}]) == "ResourceNotFoundException"
    assert code(events.list_rules, EventBusName="custom") == "ResourceNotFoundException"
    pattern = json.dumps({"detail": {"state": ["terminated"]}})
    assert events.test_event_pattern(EventPattern=pattern, Event=json.dumps({"detail": {"state": "terminated"}}))[
        "Result"
    ]
    events.remove_targets(Rule="r1", Ids=["queue"])
    events.delete_rule(Name="r1")
    assert events.list_rules()["Rules"] == []


def test_rules_and_undelivered_events_survive_kill_9(tmp_path):
    server = Server(tmp_path, FLEET).start()
    try:
        sqs, events = clients(server)
        url = queue_with_rule(sqs, events, "durable", {"source": ["aws.ec2"]})
        server.post("/v1/ec2/spot/interrupt", {"instances": [SPOT]}, expect=200)
        assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, VisibilityTimeout=0)["Messages"]
        server.kill()
        server.start()
        sqs, events = clients(server)
        assert [rule["Name"] for rule in events.list_rules()["Rules"]] == ["durable"]
        server.advance("2m")
        # The outbox delivers after the step's commit, while the warning is already there to receive: read as a
        # handler does, until the three have come.
        bodies: list[str] = []
        deadline = time.monotonic() + 20
        while len(bodies) < 3 and time.monotonic() < deadline:
            bodies += [event["detail"].get("state", event["detail-type"]) for event in drain(sqs, url, wait=1)]
        assert bodies == ["EC2 Spot Instance Interruption Warning", "shutting-down", "terminated"]
    finally:
        server.stop()
