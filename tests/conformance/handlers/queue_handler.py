"""A reference queue-mode handler for the conformance tests (boto3): reads the queue it is given with long polls,
drains the instance each message names (STATE/INSTANCE.drained) for a Spot interruption warning or a terminating
lifecycle action, completes the action (CONTINUE) once drained, and deletes each message it handled.
``--broken never-complete`` never completes a lifecycle action (the hook holds the instance until it times out);
``--broken never-delete`` never deletes a message (each comes back after its visibility timeout)."""

import argparse
import json
import os
import time

import boto3
from botocore.exceptions import BotoCoreError, ClientError

TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"


def instance_of(body):
    """The instance a message is about, and the lifecycle action to complete (None for an EventBridge event)."""
    if body.get("LifecycleTransition") == TERMINATING:
        return body["EC2InstanceId"], body
    if body.get("detail-type") == "EC2 Spot Instance Interruption Warning":
        return body["detail"]["instance-id"], None
    return None, None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--broken", default="")
    args = parser.parse_args()
    settings = {
        "endpoint_url": args.endpoint,
        "region_name": "us-east-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    sqs, autoscaling = boto3.client("sqs", **settings), boto3.client("autoscaling", **settings)
    while True:
        try:
            answer = sqs.receive_message(QueueUrl=args.queue_url, WaitTimeSeconds=1, MaxNumberOfMessages=10)
            for message in answer.get("Messages", []):
                handle(sqs, autoscaling, args, message)
        except (BotoCoreError, ClientError, OSError):
            time.sleep(1)


def handle(sqs, autoscaling, args, message):
    instance, action = instance_of(json.loads(message["Body"]))
    if instance is not None:
        drained = os.path.join(args.state, instance + ".drained")
        if not os.path.exists(drained):
            time.sleep(0.5)  # the service drains
            open(drained, "w").close()
        if action is not None and args.broken != "never-complete":
            autoscaling.complete_lifecycle_action(
                AutoScalingGroupName=action["AutoScalingGroupName"],
                LifecycleHookName=action["LifecycleHookName"],
                LifecycleActionToken=action["LifecycleActionToken"],
                InstanceId=instance,
                LifecycleActionResult="CONTINUE",
            )
    if args.broken != "never-delete":
        sqs.delete_message(QueueUrl=args.queue_url, ReceiptHandle=message["ReceiptHandle"])


if __name__ == "__main__":
    main()
