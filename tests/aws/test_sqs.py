"""Amazon SQS on the EC2 API's port: real boto3 (the JSON protocol) and raw query-protocol requests against a real
``forewarn serve`` process, visibility timeouts on forewarn's clock, long polls held without blocking the server,
dead-letter redrive, and messages that survive kill -9."""

from __future__ import annotations

import threading
import time
import xml.etree.ElementTree as ET

import boto3
import pytest
import requests
from botocore.exceptions import ClientError

from helpers import Server

FLEET = """
hosts: [{name: h1}]
ec2_instances:
  - {id: i-0aaaaaaaaaaaaaaa1, host: h1, spot: true}
"""
SQS_NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"


def client(server: Server):
    return boto3.client(
        "sqs",
        endpoint_url=server.ec2,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def code(call, *args, **kwargs) -> str:
    with pytest.raises(ClientError) as refused:
        call(*args, **kwargs)
    return refused.value.response["Error"]["Code"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("sqs"), FLEET) as running:
        yield running


@pytest.fixture
def sqs(server):
    server.reset()
    return client(server)


def test_send_receive_delete_with_visibility_on_forewarns_clock(server, sqs):
    url = sqs.create_queue(QueueName="handler", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    assert url == f"{server.ec2}/123456789012/handler"
    assert sqs.get_queue_url(QueueName="handler")["QueueUrl"] == url
    sent = sqs.send_message(QueueUrl=url, MessageBody="first")
    assert sent["MD5OfMessageBody"] == "8b04d5e3775d298e78455efc5ca404d5"
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])["Messages"]
    assert [(m["MessageId"], m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in got] == [
        (sent["MessageId"], "first", "1")
    ]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # hidden for 60 s of forewarn's clock
    server.advance("59s")
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    server.advance("1s")
    again = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert again[0]["Attributes"] == {"ApproximateReceiveCount": "2"}
    assert again[0]["ReceiptHandle"] != got[0]["ReceiptHandle"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])  # an older handle: accepted, no effect
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again[0]["ReceiptHandle"])
    server.advance("2m")
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]) == (
        "0",
        "0",
    )
    assert attributes["QueueArn"] == "arn:aws:sqs:us-east-1:123456789012:handler"


def test_change_visibility_batch_delete_purge_and_refusals(server, sqs):
    url = sqs.create_queue(QueueName="work")["QueueUrl"]
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{n}")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["m0", "m1", "m2"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=0)
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["m0"]
    assert (
        code(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=5)
        == "AWS.SimpleQueueService.MessageNotInflight"
    )
    batch = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "a", "ReceiptHandle": got[1]["ReceiptHandle"]}, {"Id": "b", "ReceiptHandle": "garbage"}],
    )
    assert [entry["Id"] for entry in batch["Successful"]] == ["a"]
    assert [(entry["Id"], entry["Code"]) for entry in batch["Failed"]] == [("b", "ReceiptHandleIsInvalid")]
    assert code(sqs.delete_message, QueueUrl=url, ReceiptHandle="garbage") == "ReceiptHandleIsInvalid"
    assert code(sqs.delete_message_batch, QueueUrl=url, Entries=[]) == "AWS.SimpleQueueService.EmptyBatchRequest"
    sqs.purge_queue(QueueUrl=url)
    assert code(sqs.purge_queue, QueueUrl=url) == "AWS.SimpleQueueService.PurgeQueueInProgress"
    server.advance("60s")
    sqs.purge_queue(QueueUrl=url)
    server.advance("1h")
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert code(sqs.get_queue_url, QueueName="nope") == "AWS.SimpleQueueService.NonExistentQueue"
    assert code(sqs.create_queue, QueueName="work", Attributes={"DelaySeconds": "5"}) == "QueueAlreadyExists"
    assert code(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=11) == "InvalidParameterValue"
    assert code(sqs.create_queue, QueueName="x", Attributes={"VisibilityTimeout": "43201"}) == "InvalidAttributeValue"


def test_redrive_moves_a_message_received_max_receive_count_times(server, sqs):
    dead = sqs.create_queue(QueueName="dead")["QueueUrl"]
    dead_arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = '{"deadLetterTargetArn":"%s","maxReceiveCount":"2"}' % dead_arn
    url = sqs.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy, "VisibilityTimeout": "10"})["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="poison")
    for _ in range(2):
        assert sqs.receive_message(QueueUrl=url)["Messages"][0]["MessageId"] == sent["MessageId"]
        server.advance("10s")
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # a third receive: moved instead
    moved = sqs.receive_message(QueueUrl=dead, MessageSystemAttributeNames=["All"])["Messages"]
    assert moved[0]["MessageId"] == sent["MessageId"]
    assert moved[0]["Attributes"]["DeadLetterQueueSourceArn"] == "arn:aws:sqs:us-east-1:123456789012:src"
    assert moved[0]["Attributes"]["ApproximateReceiveCount"] == "3"


def test_long_poll_is_held_and_woken_by_a_send_without_blocking_the_server(server, sqs):
    url = sqs.create_queue(QueueName="poll", Attributes={"VisibilityTimeout": "600"})["QueueUrl"]
    results: list[dict] = []
    waiters = [
        threading.Thread(
            target=lambda: results.append(client(server).receive_message(QueueUrl=url, WaitTimeSeconds=10))
        )
        for _ in range(3)
    ]
    started = time.monotonic()
    for waiter in waiters:
        waiter.start()
    time.sleep(0.5)
    assert server.get("/v1/clock")  # the server answers while the polls are held
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"wake {n}")
    for waiter in waiters:
        waiter.join(15)
    assert time.monotonic() - started < 5
    assert sorted(m["Body"] for r in results for m in r.get("Messages", [])) == ["wake 0", "wake 1", "wake 2"]
    # Nothing sent: the poll ends after its wait, empty; and time moved on forewarn's clock wakes it to what became
    # visible.
    started = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert 0.9 < time.monotonic() - started < 3
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=30)
    later: list[dict] = []
    poll = threading.Thread(target=lambda: later.append(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10)))
    poll.start()
    time.sleep(0.3)
    server.advance("30s")
    poll.join(15)
    assert [m["Body"] for m in later[0]["Messages"]] == ["later"]


def query(server: Server, **params: str) -> ET.Element:
    response = requests.post(server.ec2, data={**params, "Version": "2012-11-05"}, timeout=10)
    return ET.fromstring(response.content), response.status_code


def test_query_protocol(server, sqs):
    root, status = query(
        server, Action="CreateQueue", QueueName="old", **{"Attribute.1.Name": "DelaySeconds", "Attribute.1.Value": "0"}
    )
    assert status == 200
    url = root.find(f"{SQS_NS}CreateQueueResult/{SQS_NS}QueueUrl").text
    root, _ = query(
        server,
        Action="SendMessage",
        QueueUrl=url,
        MessageBody="via query",
        **{
            "MessageAttribute.1.Name": "kind",
            "MessageAttribute.1.Value.DataType": "String",
            "MessageAttribute.1.Value.StringValue": "spot",
        },
    )
    assert root.find(f"{SQS_NS}SendMessageResult/{SQS_NS}MD5OfMessageBody").text
    root, _ = query(server, Action="ReceiveMessage", QueueUrl=url, **{"MessageAttributeName.1": "All"})
    message = root.find(f"{SQS_NS}ReceiveMessageResult/{SQS_NS}Message")
    assert message.find(f"{SQS_NS}Body").text == "via query"
    attribute = message.find(f"{SQS_NS}MessageAttribute")
    assert attribute.find(f"{SQS_NS}Name").text == "kind"
    assert attribute.find(f"{SQS_NS}Value/{SQS_NS}StringValue").text == "spot"
    receipt = message.find(f"{SQS_NS}ReceiptHandle").text
    root, status = query(server, Action="DeleteMessage", QueueUrl=url, ReceiptHandle=receipt)
    assert status == 200 and root.tag == f"{SQS_NS}DeleteMessageResponse"
    root, status = query(server, Action="GetQueueUrl", QueueName="missing")
    assert status == 400
    assert root.find(f"{SQS_NS}Error/{SQS_NS}Code").text == "AWS.SimpleQueueService.NonExistentQueue"
    assert root.find(f"{SQS_NS}Error/{SQS_NS}Type").text == "Sender"
    # The queue URL as the request's path, as older SDKs send it.
    response = requests.post(
        url, data={"Action": "GetQueueAttributes", "Version": "2012-11-05", "AttributeName.1": "All"}
    )
    names = [e.text for e in ET.fromstring(response.content).iter(f"{SQS_NS}Name")]
    assert "ApproximateNumberOfMessages" in names


def test_messages_survive_kill_9(tmp_path):
    server = Server(tmp_path, FLEET).start()
    try:
        sqs = client(server)
        url = sqs.create_queue(QueueName="durable", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
        ids = [sqs.send_message(QueueUrl=url, MessageBody=f"m{n}")["MessageId"] for n in range(5)]
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2)["Messages"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=received[0]["ReceiptHandle"])
        server.kill()
        server.start()
        sqs = client(server)
        url = sqs.get_queue_url(QueueName="durable")["QueueUrl"]
        visible = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert [m["MessageId"] for m in visible] == ids[2:]  # m1 still in flight, m0 deleted
        server.advance("30s")
        back = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["ApproximateReceiveCount"])
        assert [(m["MessageId"], m["Attributes"]["ApproximateReceiveCount"]) for m in back["Messages"]][0] == (
            ids[1],
            "2",
        )
    finally:
        server.stop()


def test_signatures_are_verified_for_each_services_signing_name(tmp_path):
    server = Server(tmp_path, FLEET, extra=["--ec2-credential", "AKIAFOREWARNTEST0001:the-right-secret"]).start()
    try:
        settings = {"endpoint_url": server.ec2, "region_name": "eu-west-1"}
        right = {"aws_access_key_id": "AKIAFOREWARNTEST0001", "aws_secret_access_key": "the-right-secret"}
        wrong = {"aws_access_key_id": "AKIAFOREWARNTEST0001", "aws_secret_access_key": "a-wrong-secret"}
        url = boto3.client("sqs", **settings, **right).create_queue(QueueName="signed")["QueueUrl"]
        assert (
            boto3.client("sqs", **settings, **right).get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"
            ]["QueueArn"]
            == "arn:aws:sqs:eu-west-1:123456789012:signed"
        )
        assert code(boto3.client("sqs", **settings, **wrong).get_queue_url, QueueName="signed") == (
            "SignatureDoesNotMatch"
        )
        assert code(boto3.client("events", **settings, **wrong).list_rules) == "SignatureDoesNotMatch"
        assert code(boto3.client("autoscaling", **settings, **wrong).describe_auto_scaling_instances) == (
            "SignatureDoesNotMatch"
        )
        assert boto3.client("events", **settings, **right).list_rules()["Rules"] == []
        unsigned = requests.post(server.ec2, data={"Action": "ListQueues", "Version": "2012-11-05"}, timeout=10)
        assert unsigned.status_code == 400 and b"<Code>MissingParameter</Code>" in unsigned.content
    finally:
        server.stop()


def test_delay_and_retention_on_forewarns_clock(server, sqs):
    url = sqs.create_queue(QueueName="timed", Attributes={"DelaySeconds": "45", "MessageRetentionPeriod": "60"})[
        "QueueUrl"
    ]
    sqs.send_message(QueueUrl=url, MessageBody="delayed by the queue")
    sqs.send_message(QueueUrl=url, MessageBody="at once", DelaySeconds=0)
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesDelayed"]) == ("1", "1")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]] == ["at once"]
    server.advance("45s")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]] == [
        "delayed by the queue"
    ]
    server.advance("15s")  # 60 s after they were sent: past the retention period, neither is counted nor received
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)


def test_send_and_change_visibility_in_batches(server, sqs):
    url = sqs.create_queue(QueueName="batches")["QueueUrl"]
    sent = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "first"},
            {
                "Id": "b",
                "MessageBody": "second",
                "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}},
            },
            {"Id": "c", "MessageBody": "late", "DelaySeconds": 901},
        ],
    )
    assert [entry["Id"] for entry in sent["Successful"]] == ["a", "b"]
    assert sent["Successful"][0]["MD5OfMessageBody"] == "8b04d5e3775d298e78455efc5ca404d5"
    assert "MD5OfMessageAttributes" in sent["Successful"][1]
    assert [(entry["Id"], entry["Code"]) for entry in sent["Failed"]] == [("c", "InvalidParameterValue")]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    changed = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "x", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "y", "ReceiptHandle": "garbage", "VisibilityTimeout": 0},
        ],
    )
    assert [entry["Id"] for entry in changed["Successful"]] == ["x"]
    assert [(entry["Id"], entry["Code"]) for entry in changed["Failed"]] == [("y", "ReceiptHandleIsInvalid")]
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]] == ["first"]
    assert (
        code(sqs.send_message_batch, QueueUrl=url, Entries=[{"Id": "same", "MessageBody": "1"}] * 2)
        == "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
    )
