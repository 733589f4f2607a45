"""Amazon SQS FIFO queues on a real ``forewarn serve`` with real boto3 ("Amazon SQS FIFO queues" in the Amazon SQS
Developer Guide: message groups, deduplication, FIFO delivery logic): the .fifo name and FifoQueue attribute,
MessageGroupId required, MessageDeduplicationId or content-based deduplication for five minutes of forewarn's clock,
a group's order kept and the group held while a message of it is in flight, and deduplication kept over kill -9."""

from __future__ import annotations

import threading

import boto3
import pytest
import requests
from botocore.exceptions import ClientError

from helpers import Server

FLEET = """
hosts: [{name: h1}]
ec2_instances:
  - {id: i-0aaaaaaaaaaaaaaa1, host: h1}
"""


def client(server: Server):
    settings = {"endpoint_url": server.ec2, "region_name": "us-east-1"}
    return boto3.client("sqs", **settings, aws_access_key_id="test", aws_secret_access_key="test")


def code(call, *args, **kwargs) -> str:
    with pytest.raises(ClientError) as refused:
        call(*args, **kwargs)
    return refused.value.response["Error"]["Code"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("sqs-fifo"), FLEET) as running:
        yield running


@pytest.fixture
def sqs(server):
    server.reset()
    return client(server)


def fifo(sqs, name: str = "orders.fifo", **attributes: str) -> str:
    return sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})["QueueUrl"]


def bodies(received: dict) -> list[str]:
    return [message["Body"] for message in received.get("Messages", [])]


def test_a_fifo_queue_is_named_dot_fifo_and_says_so(sqs):
    url = fifo(sqs, ContentBasedDeduplication="true")
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attributes["FifoQueue"], attributes["ContentBasedDeduplication"]) == ("true", "true")
    assert (attributes["DeduplicationScope"], attributes["FifoThroughputLimit"]) == ("queue", "perQueue")
    assert code(sqs.create_queue, QueueName="orders", Attributes={"FifoQueue": "true"}) == "InvalidParameterValue"
    assert code(sqs.create_queue, QueueName="plain.fifo") == "InvalidParameterValue"
    standard = sqs.create_queue(QueueName="plain")["QueueUrl"]
    assert "FifoQueue" not in sqs.get_queue_attributes(QueueUrl=standard, AttributeNames=["All"])["Attributes"]
    refused = code(sqs.send_message, QueueUrl=standard, MessageBody="x", MessageDeduplicationId="d")
    assert refused == "InvalidParameterValue"
    sqs.send_message(QueueUrl=standard, MessageBody="x", MessageGroupId="g")  # a fair queue's group: accepted
    [plain] = sqs.receive_message(QueueUrl=standard, MessageSystemAttributeNames=["All"])["Messages"]
    assert "SequenceNumber" not in plain["Attributes"]
    assert code(sqs.set_queue_attributes, QueueUrl=url, Attributes={"FifoQueue": "false"}) == "InvalidAttributeValue"
    redriven = {"RedrivePolicy": '{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:plain",'}
    redriven["RedrivePolicy"] += '"maxReceiveCount":"2"}'
    assert code(sqs.create_queue, QueueName="other.fifo", Attributes={"FifoQueue": "true", **redriven}) == (
        "InvalidAttributeValue"
    )


def test_a_send_needs_a_group_and_a_deduplication_id_unless_by_content(sqs):
    url = fifo(sqs)
    assert code(sqs.send_message, QueueUrl=url, MessageBody="x") == "MissingParameter"
    assert code(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="g") == "InvalidParameterValue"
    refused = code(
        sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d", DelaySeconds=5
    )
    assert refused == "InvalidParameterValue"
    sent = sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d")
    assert len(sent["SequenceNumber"]) == 20


def test_a_deduplication_id_is_taken_for_five_minutes_of_forewarns_clock(server, sqs):
    url = fifo(sqs, ContentBasedDeduplication="true")
    first = sqs.send_message(QueueUrl=url, MessageBody="order 1", MessageGroupId="a")
    again = sqs.send_message(QueueUrl=url, MessageBody="order 1", MessageGroupId="a")  # the same body: deduplicated
    assert (again["MessageId"], again["SequenceNumber"]) == (first["MessageId"], first["SequenceNumber"])
    explicit = sqs.send_message(QueueUrl=url, MessageBody="order 1", MessageGroupId="a", MessageDeduplicationId="x")
    assert explicit["MessageId"] != first["MessageId"]  # a deduplication ID given goes before the body's
    server.advance("4m59s")
    sqs.send_message(QueueUrl=url, MessageBody="order 1", MessageGroupId="b")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])["Messages"]
    assert [m["MessageId"] for m in got] == [first["MessageId"], explicit["MessageId"]]
    assert got[0]["Attributes"]["MessageGroupId"] == "a"
    assert got[0]["Attributes"]["SequenceNumber"] == first["SequenceNumber"]
    assert len(got[0]["Attributes"]["MessageDeduplicationId"]) == 64  # the body's SHA-256
    for message in got:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    server.advance("1s")  # five minutes after the first: its deduplication ID is free again
    fresh = sqs.send_message(QueueUrl=url, MessageBody="order 1", MessageGroupId="a")
    assert fresh["MessageId"] != first["MessageId"]
    assert bodies(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)) == ["order 1"]


def test_a_group_comes_in_order_and_waits_while_a_message_of_it_is_in_flight(server, sqs):
    url = fifo(sqs, VisibilityTimeout="30")
    for group, number in [("a", 1), ("b", 1), ("a", 2), ("a", 3), ("b", 2)]:
        body = f"{group}{number}"
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body)
    first = sqs.receive_message(QueueUrl=url)["Messages"]
    assert bodies({"Messages": first}) == ["a1"]
    group_b = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert bodies({"Messages": group_b}) == ["b1", "b2"]  # a waits for a1; one receive takes b's two in order
    assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages") is None  # both groups held
    for message in group_b:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    server.advance("30s")  # a1's visibility timeout: it comes back first, the rest of a behind it
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2)["Messages"]
    assert bodies({"Messages": again}) == ["a1", "a2"]
    for message in again:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert bodies(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)) == ["a3"]


def test_a_long_poll_gets_a_groups_next_message_once_the_one_in_flight_is_deleted(server, sqs):
    url = fifo(sqs)
    for body in ("a1", "a2"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="a", MessageDeduplicationId=body)
    [head] = sqs.receive_message(QueueUrl=url)["Messages"]
    got: list = []
    poll = threading.Thread(target=lambda: got.append(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10)))
    poll.start()
    sqs.delete_message(QueueUrl=url, ReceiptHandle=head["ReceiptHandle"])
    poll.join(10)
    assert bodies(got[0]) == ["a2"]


def test_deduplication_and_groups_survive_kill_9(tmp_path):
    with Server(tmp_path, FLEET) as server:
        sqs = client(server)
        url = fifo(sqs)
        first = sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d")
        server.kill()
        server.start()
        sqs = client(server)
        again = sqs.send_message(QueueUrl=url, MessageBody="y", MessageGroupId="g", MessageDeduplicationId="d")
        assert again["MessageId"] == first["MessageId"]
        [message] = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["MessageGroupId"])["Messages"]
        assert (message["Body"], message["Attributes"]) == ("x", {"MessageGroupId": "g"})


def test_the_query_protocol_sends_to_a_fifo_queue(server, sqs):
    url = fifo(sqs, ContentBasedDeduplication="true")
    answer = requests.post(
        url,
        data={"Action": "SendMessage", "Version": "2012-11-05", "MessageBody": "q", "MessageGroupId": "g"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    assert "<SequenceNumber>" in answer.text
    with pytest.raises(ClientError):
        sqs.send_message(QueueUrl=url, MessageBody="q")
