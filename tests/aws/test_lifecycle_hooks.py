"""Auto Scaling lifecycle hooks on a real ``forewarn serve`` process, with real boto3: a scale-in held in
Terminating:Wait until the handler completes the action (the hook's message read from SQS, straight from the hook
and through an EventBridge rule), heartbeats, a hook that times out on forewarn's clock, target-lifecycle-state in
instance metadata, and hook states that survive kill -9."""

from __future__ import annotations

import json

import boto3
import pytest
import requests
from botocore.exceptions import ClientError

from helpers import Server

WEB = ["i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"]
FLEET = f"""
hosts: [{{name: h1}}, {{name: h2}}]
ec2_instances:
  - {{id: {WEB[0]}, host: h1, auto_scaling_group: web, imds: {{address: 127.0.0.71}}}}
  - {{id: {WEB[1]}, host: h2, auto_scaling_group: web}}
"""
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"


def clients(server: Server):
    settings = {
        "endpoint_url": server.ec2,
        "region_name": "us-east-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    return boto3.client("sqs", **settings), boto3.client("events", **settings), boto3.client("autoscaling", **settings)


def target_state(server: Server) -> str:
    return requests.get(
        f"http://127.0.0.71:{server.imds_port}/latest/meta-data/autoscaling/target-lifecycle-state", timeout=5
    ).text


def lifecycle_state(autoscaling, instance_id: str) -> str | None:
    found = autoscaling.describe_auto_scaling_instances(InstanceIds=[instance_id])["AutoScalingInstances"]
    return found[0]["LifecycleState"] if found else None


def one_message(sqs, url: str) -> dict:
    [message] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return json.loads(message["Body"])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("lifecycle"), FLEET) as running:
        yield running


@pytest.fixture
def aws(server):
    server.reset()
    return clients(server)


def test_scale_in_waits_for_the_handler_to_complete_the_action(server, aws):
    sqs, events, autoscaling = aws
    url = sqs.create_queue(QueueName="hooks")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    autoscaling.put_lifecycle_hook(
        AutoScalingGroupName="web",
        LifecycleHookName="drain",
        LifecycleTransition=TERMINATING,
        HeartbeatTimeout=300,
        NotificationTargetARN=arn,
        RoleARN="arn:aws:iam::123456789012:role/hooks",
        NotificationMetadata="cluster-a",
    )
    [hook] = autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="web")["LifecycleHooks"]
    assert (hook["HeartbeatTimeout"], hook["GlobalTimeout"], hook["DefaultResult"]) == (300, 30000, "ABANDON")
    events_url = sqs.create_queue(QueueName="bus")["QueueUrl"]
    bus_arn = sqs.get_queue_attributes(QueueUrl=events_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(
        Name="asg",
        EventPattern=json.dumps({"source": ["aws.autoscaling"], "detail-type": [{"prefix": "EC2 Instance-"}]}),
    )
    events.put_targets(Rule="asg", Targets=[{"Id": "q", "Arn": bus_arn}])
    assert target_state(server) == "InService"

    activity = autoscaling.terminate_instance_in_auto_scaling_group(
        InstanceId=WEB[0], ShouldDecrementDesiredCapacity=True
    )["Activity"]
    assert activity["StatusCode"] == "InProgress"
    message = one_message(sqs, url)
    assert message["LifecycleTransition"] == TERMINATING
    assert (message["EC2InstanceId"], message["AutoScalingGroupName"], message["LifecycleHookName"]) == (
        WEB[0],
        "web",
        "drain",
    )
    assert message["NotificationMetadata"] == "cluster-a" and message["Service"] == "AWS Auto Scaling"
    event = one_message(sqs, events_url)
    assert event["detail-type"] == "EC2 Instance-terminate Lifecycle Action"
    assert event["source"] == "aws.autoscaling"
    assert event["detail"]["LifecycleActionToken"] == message["LifecycleActionToken"]
    assert event["resources"][0].endswith(":autoScalingGroupName/web")
    assert lifecycle_state(autoscaling, WEB[0]) == "Terminating:Wait"
    assert target_state(server) == "Terminated"

    server.advance("4m")
    autoscaling.record_lifecycle_action_heartbeat(
        AutoScalingGroupName="web", LifecycleHookName="drain", LifecycleActionToken=message["LifecycleActionToken"]
    )
    server.advance("4m")  # 8 minutes in: past the first heartbeat timeout, within the one the heartbeat set
    assert lifecycle_state(autoscaling, WEB[0]) == "Terminating:Wait"
    autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="web", LifecycleHookName="drain", LifecycleActionResult="CONTINUE", InstanceId=WEB[0]
    )
    assert lifecycle_state(autoscaling, WEB[0]) is None
    instance = server.get(f"/v1/ec2/instances/{WEB[0]}")
    assert instance["state"] == "terminated"
    with pytest.raises(ClientError) as refused:
        autoscaling.complete_lifecycle_action(
            AutoScalingGroupName="web", LifecycleHookName="drain", LifecycleActionResult="CONTINUE", InstanceId=WEB[0]
        )
    assert refused.value.response["Error"]["Code"] == "ValidationError"


def test_a_hook_that_times_out_applies_its_default_result(server, aws):
    _, _, autoscaling = aws
    autoscaling.put_lifecycle_hook(
        AutoScalingGroupName="web",
        LifecycleHookName="slow",
        LifecycleTransition=TERMINATING,
        HeartbeatTimeout=60,
        DefaultResult="CONTINUE",
    )
    autoscaling.terminate_instance_in_auto_scaling_group(InstanceId=WEB[1], ShouldDecrementDesiredCapacity=False)
    server.advance("59s")
    assert lifecycle_state(autoscaling, WEB[1]) == "Terminating:Wait"
    server.advance("1s")
    assert lifecycle_state(autoscaling, WEB[1]) is None
    instances = server.get("/v1/ec2/instances")
    assert [i["state"] for i in instances if i["instance_id"] == WEB[1]] == ["terminated"]
    assert len([i for i in instances if i["state"] == "running" and i["auto_scaling_group"] == "web"]) == 2
    journal = [entry["what"] for entry in server.get("/v1/journal")]
    assert "lifecycle action timed-out" in journal


def test_refusals(server, aws):
    _, _, autoscaling = aws

    def code(call, **kwargs) -> str:
        with pytest.raises(ClientError) as refused:
            call(**kwargs)
        return refused.value.response["Error"]["Code"]

    assert (
        code(
            autoscaling.put_lifecycle_hook,
            AutoScalingGroupName="nope",
            LifecycleHookName="h",
            LifecycleTransition=TERMINATING,
        )
        == "ValidationError"
    )
    assert (
        code(
            autoscaling.put_lifecycle_hook,
            AutoScalingGroupName="web",
            LifecycleHookName="h",
            LifecycleTransition=TERMINATING,
            HeartbeatTimeout=10,
        )
        == "ValidationError"
    )
    assert (
        code(autoscaling.delete_lifecycle_hook, AutoScalingGroupName="web", LifecycleHookName="h") == "ValidationError"
    )
    assert (
        code(
            autoscaling.terminate_instance_in_auto_scaling_group,
            InstanceId="i-0fffffffffffffff0",
            ShouldDecrementDesiredCapacity=True,
        )
        == "ValidationError"
    )


def test_a_waiting_instance_survives_kill_9(tmp_path):
    server = Server(tmp_path, FLEET).start()
    try:
        _, _, autoscaling = clients(server)
        autoscaling.put_lifecycle_hook(
            AutoScalingGroupName="web", LifecycleHookName="drain", LifecycleTransition=TERMINATING, HeartbeatTimeout=300
        )
        autoscaling.terminate_instance_in_auto_scaling_group(InstanceId=WEB[0], ShouldDecrementDesiredCapacity=True)
        server.kill()
        server.start()
        _, _, autoscaling = clients(server)
        assert lifecycle_state(autoscaling, WEB[0]) == "Terminating:Wait"
        assert target_state(server) == "Terminated"
        server.advance("5m")  # the heartbeat timeout, set again from what was stored
        assert lifecycle_state(autoscaling, WEB[0]) is None
    finally:
        server.stop()
