"""Terminations EC2 makes in an Auto Scaling group (a Spot interruption, a scheduled retirement) go through the
group's terminating lifecycle hooks: the instance is ended on EC2's time, waits in Terminating:Wait, and its
replacement is launched once the handler completes the action (or the hook times out). Real boto3 against a real
``forewarn serve`` process."""

from __future__ import annotations

import json

import boto3
import pytest

from helpers import Server

SPOT, STORE = "i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"
FLEET = f"""
hosts: [{{name: h1}}, {{name: h2}}]
ec2_instances:
  - {{id: {SPOT}, host: h1, spot: true, auto_scaling_group: workers}}
  - {{id: {STORE}, host: h2, root_device: instance-store, auto_scaling_group: workers}}
"""
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"


def clients(server: Server):
    settings = {
        "endpoint_url": server.ec2,
        "region_name": "us-east-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    return boto3.client("sqs", **settings), boto3.client("autoscaling", **settings)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("ec2-terminations"), FLEET) as running:
        yield running


@pytest.fixture
def aws(server):
    server.reset()
    sqs, autoscaling = clients(server)
    url = sqs.create_queue(QueueName="hooks")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    autoscaling.put_lifecycle_hook(
        AutoScalingGroupName="workers",
        LifecycleHookName="drain",
        LifecycleTransition=TERMINATING,
        HeartbeatTimeout=300,
        NotificationTargetARN=arn,
    )
    return sqs, autoscaling, url


def waiting(autoscaling, instance_id: str) -> str | None:
    found = autoscaling.describe_auto_scaling_instances(InstanceIds=[instance_id])["AutoScalingInstances"]
    return found[0]["LifecycleState"] if found else None


def workers_running(server: Server) -> list[str]:
    return [
        i["instance_id"]
        for i in server.get("/v1/ec2/instances")
        if i["state"] == "running" and i["auto_scaling_group"] == "workers"
    ]


def test_a_spot_interruption_waits_on_the_terminating_hook(server, aws):
    sqs, autoscaling, url = aws
    server.post("/v1/ec2/spot/interrupt", {"instances": [SPOT]}, expect=200)
    server.advance("2m")  # EC2 takes the instance back, on time
    assert server.get(f"/v1/ec2/instances/{SPOT}")["state"] == "terminated"
    assert waiting(autoscaling, SPOT) == "Terminating:Wait"
    assert workers_running(server) == [STORE]  # no replacement while the hook holds it
    [message] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    body = json.loads(message["Body"])
    assert (body["LifecycleTransition"], body["EC2InstanceId"]) == (TERMINATING, SPOT)
    autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="workers",
        LifecycleHookName="drain",
        LifecycleActionToken=body["LifecycleActionToken"],
        LifecycleActionResult="CONTINUE",
    )
    assert waiting(autoscaling, SPOT) is None
    running = workers_running(server)
    assert len(running) == 2 and STORE in running  # the replacement, launched now
    replacement = next(i for i in server.get("/v1/ec2/instances") if i["replaces"] == SPOT)
    assert replacement["state"] == "running"


def test_a_retirement_waits_on_the_hook_until_it_times_out(server, aws):
    _, autoscaling, _ = aws
    server.post("/v1/ec2/events", {"code": "instance-retirement", "instances": [STORE], "notice": "1h"}, expect=201)
    server.advance("1h")
    assert server.get(f"/v1/ec2/instances/{STORE}")["state"] == "terminated"
    assert waiting(autoscaling, STORE) == "Terminating:Wait"
    server.advance("299s")
    assert workers_running(server) == [SPOT]
    server.advance("1s")  # the heartbeat timeout: the default result, and the replacement
    assert waiting(autoscaling, STORE) is None
    assert len(workers_running(server)) == 2


def test_without_a_terminating_hook_the_group_replaces_at_once(server, aws):
    _, autoscaling, _ = aws
    autoscaling.delete_lifecycle_hook(AutoScalingGroupName="workers", LifecycleHookName="drain")
    server.post("/v1/ec2/spot/interrupt", {"instances": [SPOT]}, expect=200)
    server.advance("2m")
    assert waiting(autoscaling, SPOT) is None
    assert len(workers_running(server)) == 2


def test_a_replacement_waits_in_pending_wait_on_a_launching_hook(server, aws):
    sqs, autoscaling, url = aws
    autoscaling.delete_lifecycle_hook(AutoScalingGroupName="workers", LifecycleHookName="drain")
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    autoscaling.put_lifecycle_hook(
        AutoScalingGroupName="workers",
        LifecycleHookName="warm-up",
        LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING",
        HeartbeatTimeout=60,
        NotificationTargetARN=arn,
    )
    server.post("/v1/ec2/spot/interrupt", {"instances": [SPOT]}, expect=200)
    server.advance("2m")
    [first] = [i["instance_id"] for i in server.get("/v1/ec2/instances") if i["replaces"] == SPOT]
    assert waiting(autoscaling, first) == "Pending:Wait"
    [message] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    body = json.loads(message["Body"])
    assert (body["LifecycleTransition"], body["EC2InstanceId"]) == ("autoscaling:EC2_INSTANCE_LAUNCHING", first)
    assert (body["Origin"], body["Destination"]) == ("EC2", "AutoScalingGroup")
    server.advance("60s")  # the heartbeat timeout: ABANDON, the default result, ends the launch; another follows
    assert server.get(f"/v1/ec2/instances/{first}")["state"] == "terminated"
    [second] = [
        i["instance_id"]
        for i in server.get("/v1/ec2/instances")
        if i["state"] == "running" and i["instance_id"] not in (STORE, first)
    ]
    assert waiting(autoscaling, second) == "Pending:Wait"
    autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="workers", LifecycleHookName="warm-up", InstanceId=second, LifecycleActionResult="CONTINUE"
    )
    assert waiting(autoscaling, second) == "InService"
    assert sorted(workers_running(server)) == sorted([STORE, second])
