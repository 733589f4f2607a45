"""The AWS queue path on a real ``forewarn serve``: messages per second through EventBridge rule → SQS queue →
ReceiveMessage → DeleteMessageBatch, and SQS long polls held at once.

Throughput: a rule sends every "EC2 Instance Rebalance Recommendation" to a queue; the control API recommends a
rebalance on N Spot instances (in commands of 50), and one boto3 consumer receives (10 at a time, long polling) and
deletes (in batches) until it has all N. Printed: N, the seconds from the first recommendation to the last delete,
messages per second, and whether every event arrived once.

Long polls: W ReceiveMessage requests with ``WaitTimeSeconds`` on an empty queue, opened at once (asyncio, from
several loopback addresses: the server bounds connections per client address), then one message sent per waiter;
printed: how many were answered with a message, and the seconds from the first send to the last answer.

    .venv/bin/python bench/queues.py                       # 2,000 messages, 1,000 long polls
    .venv/bin/python bench/queues.py --messages 500 --waiters 200
    .venv/bin/python bench/queues.py --check               # small: fails on a broken setup only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import boto3
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from benchlib import loopback_address  # noqa: E402

from forewarn.scenarios.server import free_ports, launch_serve  # noqa: E402

PER_ADDRESS = 50  # long polls opened from one client address
RECEIVE = {"X-Amz-Target": "AmazonSQS.ReceiveMessage", "Content-Type": "application/x-amz-json-1.0"}


def fleet_text(instances: int) -> str:
    lines = ["hosts: [{name: host-a}]", "ec2_instances:"]
    lines += [f"  - {{id: i-0{index:016x}, host: host-a, spot: true}}" for index in range(1, instances + 1)]
    return "\n".join(lines) + "\n"


def clients(endpoint: str):
    settings = {
        "endpoint_url": endpoint,
        "region_name": "us-east-1",
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
    }
    return boto3.client("sqs", **settings), boto3.client("events", **settings)


def throughput(endpoint: str, control: str, messages: int) -> dict:
    sqs, events = clients(endpoint)
    url = sqs.create_queue(QueueName="rebalance")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(
        Name="rebalance", EventPattern=json.dumps({"detail-type": ["EC2 Instance Rebalance Recommendation"]})
    )
    events.put_targets(Rule="rebalance", Targets=[{"Id": "queue", "Arn": arn}])
    ids = [f"i-0{index:016x}" for index in range(1, messages + 1)]
    started = time.perf_counter()
    with httpx.Client(timeout=120) as control_client:
        for first in range(0, messages, 50):
            answer = control_client.post(
                f"{control}/v1/ec2/spot/rebalance", json={"instances": ids[first : first + 50]}
            )
            assert answer.status_code == 200, answer.text
    seen: list[str] = []
    while len(seen) < messages:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5).get("Messages", [])
        if not got:
            break
        entries = [{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(got)]
        assert not sqs.delete_message_batch(QueueUrl=url, Entries=entries).get("Failed")
        seen += [json.loads(m["Body"])["detail"]["instance-id"] for m in got]
    took = time.perf_counter() - started
    return {
        "messages": messages,
        "seconds": round(took, 3),
        "messages_per_second": round(len(seen) / took, 1),
        "each_once": sorted(seen) == ids,
    }


async def long_polls(endpoint: str, waiters: int, wait: int) -> dict:
    sqs, _ = clients(endpoint)
    url = sqs.create_queue(QueueName="polls")["QueueUrl"]
    pools = [
        httpx.AsyncClient(
            timeout=wait + 30,
            limits=httpx.Limits(max_connections=PER_ADDRESS + 5),
            transport=httpx.AsyncHTTPTransport(local_address=loopback_address(2, index + 1)),
        )
        for index in range(-(-waiters // PER_ADDRESS))
    ]
    body = json.dumps({"QueueUrl": url, "WaitTimeSeconds": wait})
    try:
        polls = [
            asyncio.create_task(pools[index // PER_ADDRESS].post(endpoint, content=body, headers=RECEIVE))
            for index in range(waiters)
        ]
        await asyncio.sleep(min(2.0, wait / 2))  # every poll is held by now (an empty queue answers nothing)
        started = time.perf_counter()
        async with httpx.AsyncClient(timeout=60) as sender:
            send = {"X-Amz-Target": "AmazonSQS.SendMessage", "Content-Type": "application/x-amz-json-1.0"}
            for index in range(waiters):
                answer = await sender.post(
                    endpoint, content=json.dumps({"QueueUrl": url, "MessageBody": f"m{index}"}), headers=send
                )
                assert answer.status_code == 200, answer.text
        answers = await asyncio.gather(*polls, return_exceptions=True)
        last = time.perf_counter() - started
    finally:
        for pool in pools:
            await pool.aclose()
    with_message = sum(
        1 for a in answers if not isinstance(a, BaseException) and a.status_code == 200 and a.json().get("Messages")
    )
    return {"waiters": waiters, "answered_with_a_message": with_message, "first_send_to_last_answer_s": round(last, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--check", action="store_true", help="small numbers; fails on a broken setup, never on speed")
    options = parser.parse_args()
    if options.check:
        options.messages, options.waiters = 100, 60
    with tempfile.TemporaryDirectory() as directory:
        fleet = Path(directory) / "fleet.yaml"
        fleet.write_text(fleet_text(options.messages))
        port, ec2_port = free_ports(2)
        control, endpoint = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{ec2_port}"
        args = [
            "--fleet", str(fleet), "--db", str(Path(directory) / "bench.db"), "--port", str(port),
            "--imds-port", "0", "--arm-port", "0", "--ec2-port", str(ec2_port), "--gce-port", "0",
            "--clock", "manual", "--log-level", "warning",
        ]  # fmt: skip
        process = launch_serve(args, Path(directory) / "server.log", control)
        try:
            result = {
                "throughput": throughput(endpoint, control, options.messages),
                "long_polls": asyncio.run(long_polls(endpoint, options.waiters, wait=20)),
            }
        finally:
            process.terminate()
            process.wait(10)
    print(json.dumps(result, indent=2))
    if not result["throughput"]["each_once"]:
        sys.exit("an event was lost or delivered twice")
    if result["long_polls"]["answered_with_a_message"] != options.waiters:
        sys.exit("a long poll was not answered with a message")


if __name__ == "__main__":
    main()
