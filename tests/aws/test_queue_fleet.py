"""The queue path declared in the fleet file (sqs_queues, eventbridge_rules, lifecycle_hooks): a real ``forewarn
serve`` starts with them, boto3 reads them as it would read queues, rules and hooks made by API calls, a scale-in is
held by the declared hook and its message reaches the declared queue; what changes at run time stays over a restart,
a reset comes back to the file's; a mistyped or dangling key is refused at its line."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError

from forewarn.fleet.file import FleetFileError, parse_fleet
from helpers import Server

WEB = ["i-0bbbbbbbbbbbbbbb1", "i-0bbbbbbbbbbbbbbb2"]
FLEET = f"""
defaults: {{aws_region: eu-west-1, aws_account_id: "210987654321"}}
ec2_instances:
  - {{id: {WEB[0]}, auto_scaling_group: web, spot: true}}
  - {{id: {WEB[1]}, auto_scaling_group: web}}
sqs_queues:
  - name: nth
    visibility_timeout: 45
    redrive_policy: {{dead_letter_queue: nth-dlq, max_receive_count: 3}}
  - name: nth-dlq
    message_retention_period: 1209600
eventbridge_rules:
  - name: spot
    description: Spot warnings to the handler
    event_pattern: {{source: [aws.ec2], detail-type: [EC2 Spot Instance Interruption Warning]}}
    targets: [{{id: handler, queue: nth}}]
lifecycle_hooks:
  - auto_scaling_group: web
    name: drain
    heartbeat_timeout: 300
    default_result: CONTINUE
    notification_target: nth
    notification_metadata: cluster-a
"""
ARN = "arn:aws:sqs:eu-west-1:210987654321:{}"


def clients(server: Server):
    settings = {
        "endpoint_url": server.ec2,
        "region_name": "eu-west-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    return boto3.client("sqs", **settings), boto3.client("events", **settings), boto3.client("autoscaling", **settings)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("queue-fleet"), FLEET) as running:
        yield running


def test_the_declared_queues_rules_and_hooks_are_there_at_start(server):
    sqs, events, autoscaling = clients(server.reset())
    url = sqs.get_queue_url(QueueName="nth")["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "45"
    assert attributes["QueueArn"] == ARN.format("nth")
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": ARN.format("nth-dlq"),
        "maxReceiveCount": 3,
    }
    assert sorted(u.rsplit("/", 1)[1] for u in sqs.list_queues()["QueueUrls"]) == ["nth", "nth-dlq"]
    rule = events.describe_rule(Name="spot")
    assert (rule["State"], rule["Description"]) == ("ENABLED", "Spot warnings to the handler")
    assert json.loads(rule["EventPattern"])["detail-type"] == ["EC2 Spot Instance Interruption Warning"]
    assert [(t["Id"], t["Arn"]) for t in events.list_targets_by_rule(Rule="spot")["Targets"]] == [
        ("handler", ARN.format("nth"))
    ]
    [hook] = autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="web")["LifecycleHooks"]
    assert (hook["LifecycleHookName"], hook["HeartbeatTimeout"], hook["DefaultResult"]) == ("drain", 300, "CONTINUE")
    assert hook["NotificationTargetARN"] == ARN.format("nth")


def test_a_spot_warning_and_a_scale_in_reach_the_declared_queue(server):
    sqs, _, autoscaling = clients(server.reset())
    url = sqs.get_queue_url(QueueName="nth")["QueueUrl"]
    server.post("/v1/ec2/spot/interrupt", {"instances": [WEB[0]]}, expect=200)
    autoscaling.terminate_instance_in_auto_scaling_group(InstanceId=WEB[1], ShouldDecrementDesiredCapacity=True)
    bodies = []
    for _ in range(10):
        received = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, MaxNumberOfMessages=10).get("Messages", [])
        bodies += [json.loads(m["Body"]) for m in received]
        for message in received:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        if len(bodies) >= 2:
            break
    kinds = sorted(body.get("detail-type") or body.get("LifecycleTransition") for body in bodies)
    assert kinds == ["EC2 Spot Instance Interruption Warning", "autoscaling:EC2_INSTANCE_TERMINATING"]
    [hook_message] = [body for body in bodies if "LifecycleTransition" in body]
    assert (hook_message["EC2InstanceId"], hook_message["NotificationMetadata"]) == (WEB[1], "cluster-a")
    [held] = autoscaling.describe_auto_scaling_instances(InstanceIds=[WEB[1]])["AutoScalingInstances"]
    assert held["LifecycleState"] == "Terminating:Wait"


def test_changes_at_run_time_stay_over_a_restart_and_a_reset_brings_the_file_back(server):
    sqs, events, autoscaling = clients(server.reset())
    url = sqs.get_queue_url(QueueName="nth-dlq")["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    events.disable_rule(Name="spot")
    autoscaling.delete_lifecycle_hook(AutoScalingGroupName="web", LifecycleHookName="drain")
    server.kill()
    server.start()
    sqs, events, autoscaling = clients(server)
    with pytest.raises(ClientError, match="NonExistentQueue"):
        sqs.get_queue_url(QueueName="nth-dlq")
    assert events.describe_rule(Name="spot")["State"] == "DISABLED"
    assert autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="web")["LifecycleHooks"] == []
    server.reset()
    assert sqs.get_queue_url(QueueName="nth-dlq")["QueueUrl"].endswith("/210987654321/nth-dlq")
    assert events.describe_rule(Name="spot")["State"] == "ENABLED"
    assert len(autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="web")["LifecycleHooks"]) == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("visibility_timeout: 45", "visibilty_timeout: 45"),
            "fleet.yaml:8: sqs_queues[0].visibilty_timeout: unknown key 'visibilty_timeout'; "
            "did you mean 'visibility_timeout'?",
        ),
        (
            ("targets: [{id: handler, queue: nth}]", "targets: [{id: handler, queue: nht}]"),
            "fleet.yaml:16: eventbridge_rules[0].targets[0].queue: queue 'nht' is not declared under sqs_queues; "
            "did you mean 'nth'?",
        ),
        (
            ("auto_scaling_group: web\n", "auto_scaling_group: webb\n"),
            "fleet.yaml:18: lifecycle_hooks[0].auto_scaling_group: no instance of ec2_instances is in Auto Scaling "
            "group 'webb'; did you mean 'web'?",
        ),
        (
            ("visibility_timeout: 45", "visibility_timeout: 50000"),
            "fleet.yaml:7: sqs_queues[0]: Invalid value for the parameter VisibilityTimeout.",
        ),
        (
            ("detail-type: [EC2", "detail-type: [{wildcard: x}, EC2"),
            "fleet.yaml:15: eventbridge_rules[0].event_pattern: Unrecognized match type wildcard at detail-type.",
        ),
        (("- name: nth\n", "- name: nth-dlq\n"), "fleet.yaml:10: sqs_queues[1].name: duplicate queue 'nth-dlq'"),
        (
            ("heartbeat_timeout: 300", "heartbeat_timeout: 10"),
            "fleet.yaml:20: lifecycle_hooks[0].heartbeat_timeout: Input should be greater than or equal to 30",
        ),
    ],
)
def test_a_mistake_in_the_queue_path_is_refused_at_its_line(change, message):
    old, new = change
    assert old in FLEET
    with pytest.raises(FleetFileError) as refused:
        parse_fleet(FLEET.replace(old, new, 1), "fleet.yaml")
    assert str(refused.value) == message


def test_a_fifo_queue_in_the_fleet_file():
    fifo = FLEET.replace(
        "  - name: nth-dlq\n",
        "  - name: jobs.fifo\n    fifo_queue: true\n    content_based_deduplication: true\n  - name: nth-dlq\n",
    )
    path = parse_fleet(fifo, "fleet.yaml").parts["aws"].queue_path  # type: ignore[attr-defined]
    [jobs] = [queue for queue in path.queues if queue.name == "jobs.fifo"]
    assert (jobs.settings.fifo, jobs.settings.content_based_deduplication) == (True, True)
    with pytest.raises(FleetFileError, match=r"sqs_queues\[1\].name: a queue name is .* ending in .fifo"):
        parse_fleet(fifo.replace("    fifo_queue: true\n", ""), "fleet.yaml")
