"""AWS Health events for EC2 events, delivered to a real webhook at least once, retried on the engine clock,
surviving restarts."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from helpers import Server

EBS = "i-0aaaaaaaaaaaaaaa1"
FLEET = f"""
default_vm: solo
vms: [{{name: solo}}]
ec2_instances:
  - {{id: {EBS}, name: db, availability_zone: eu-west-1b}}
"""


class Receiver:
    """A webhook that fails its first ``failures`` requests with 503."""

    def __init__(self, failures: int = 0):
        self.failures = failures
        self.received: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                if outer.failures > 0:
                    outer.failures -= 1
                    self.send_response(503)
                else:
                    outer.received.append(json.loads(body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/health"

    def close(self):
        self.server.shutdown()


def wait_for(predicate, timeout=10.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)  # waiting for another process's HTTP delivery, not for simulated time
    return False


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()


def test_health_events_through_the_lifecycle(tmp_path, receiver):
    server = Server(tmp_path, FLEET, extra=["--health-webhook", receiver.url]).start()
    try:
        [event] = server.post(
            "/v1/ec2/events", {"code": "instance-retirement", "instances": [EBS], "notice": "1h"}, expect=201
        ).json()
        assert wait_for(lambda: len(receiver.received) == 1)
        message = receiver.received[0]
        assert (message["detail-type"], message["source"], message["region"]) == (
            "AWS Health Event",
            "aws.health",
            "eu-west-1",
        )
        detail = message["detail"]
        assert detail["eventTypeCode"] == "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED"
        assert detail["eventTypeCategory"] == "scheduledChange" and detail["statusCode"] == "upcoming"
        assert detail["startTime"] == "Mon, 20 Apr 2026 23:11:58 GMT"
        arn = f"arn:aws:ec2:eu-west-1:123456789012:instance/{EBS}"
        assert message["resources"] == [arn] and detail["affectedEntities"][0]["entityValue"] == arn
        server.advance("1h")
        server.advance("1m")
        assert wait_for(
            lambda: [m["detail"]["statusCode"] for m in receiver.received] == ["upcoming", "open", "closed"]
        )
        assert receiver.received[-1]["detail"]["eventDescription"][0]["latestDescription"].startswith("[Completed]")
        assert wait_for(
            lambda: [d["status"] for d in requests.get(f"{server.control}/v1/deliveries").json()] == ["delivered"] * 3
        )
        assert event["event_id"].removeprefix("instance-event-") in detail["eventArn"]
    finally:
        server.stop()


def test_retries_follow_the_clock_and_survive_a_restart(tmp_path):
    receiver = Receiver(failures=2)
    server = Server(tmp_path, FLEET, extra=["--health-webhook", receiver.url, "--health-entity", "instance-id"])
    server.start()
    try:
        server.post("/v1/ec2/events", {"code": "system-reboot", "instances": [EBS]}, expect=201)
        assert wait_for(lambda: requests.get(f"{server.control}/v1/deliveries").json()[0]["attempts"] == 1)
        server.kill()  # pending, with one failed attempt: nothing may be lost
        server.start()
        server.advance("30s")  # too early for the second attempt (30 s plus jitter)
        server.advance("10s")
        assert wait_for(lambda: requests.get(f"{server.control}/v1/deliveries").json()[0]["attempts"] == 2)
        server.advance("2m")
        assert wait_for(lambda: len(receiver.received) == 1)
        # the receiver has the message before the sender has committed its outcome
        assert wait_for(lambda: requests.get(f"{server.control}/v1/deliveries").json()[0]["status"] == "delivered")
        assert requests.get(f"{server.control}/v1/deliveries").json()[0]["attempts"] == 3
        assert receiver.received[0]["resources"] == [EBS]
    finally:
        server.stop()
        receiver.close()


def test_a_message_expires_after_a_day_of_failures(tmp_path):
    receiver = Receiver(failures=10_000)
    server = Server(tmp_path, FLEET, extra=["--health-webhook", receiver.url]).start()
    try:
        server.post("/v1/ec2/events", {"code": "system-maintenance", "instances": [EBS]}, expect=201)
        for _ in range(40):
            server.advance("1h")
            if requests.get(f"{server.control}/v1/deliveries").json()[0]["status"] == "expired":
                break
        assert wait_for(lambda: requests.get(f"{server.control}/v1/deliveries").json()[0]["status"] == "expired")
        expired = requests.get(f"{server.control}/v1/deliveries").json()[0]
        assert expired["last_error"] == "HTTP 503" and expired["attempts"] > 5
    finally:
        server.stop()
        receiver.close()
