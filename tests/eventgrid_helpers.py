"""What the Event Grid tests share with the other tests of real deliveries: the fleet with central publishing, a
real webhook process (eventgrid_receiver.py) and an ARM client for system topics and event subscriptions."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import requests

from helpers import Server, free_port

SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
OTHER_SUB = "22222222-2222-2222-2222-222222222222"
CENTRAL = "{scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}"
FLEET = f"""
defaults: {{subscription: {SUB}, resource_group: contoso-rg, location: westeurope}}
hosts: [{{name: host-01}}, {{name: host-02}}, {{name: host-03}}]
availability_sets:
  - {{name: ha, scheduled_events_policy: {CENTRAL}}}
vms:
  - {{name: central-vm, host: host-01, scheduled_events_policy: {CENTRAL}}}
  - {{name: plain-vm, host: host-02}}
  - {{name: ha-0, host: host-01, availability_set: ha}}
  - {{name: ha-1, host: host-02, availability_set: ha}}
  - {{name: ha-2, host: host-03, availability_set: ha}}
  - {{name: far-vm, host: host-03, subscription: {OTHER_SUB}, scheduled_events_policy: {CENTRAL}}}
"""
API = "2025-02-15"
RECEIVER = Path(__file__).with_name("eventgrid_receiver.py")


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)  # waiting for other processes' HTTP traffic, not for simulated time
    return False


class Webhook:
    """The receiver process: records every request, answers as told."""

    def __init__(self, tmp_path: Path, port: int | None = None):
        self.port = port or free_port()
        self.log = tmp_path / f"webhook-{self.port}.jsonl"
        self.process: subprocess.Popen | None = None

    def start(self) -> Webhook:
        self.process = subprocess.Popen(
            [sys.executable, str(RECEIVER), str(self.port), str(self.log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        first = self.process.stdout.readline()
        if first.strip() != "ready":
            self.process.kill()
            rest, _ = self.process.communicate(timeout=10)
            raise AssertionError(f"the webhook on port {self.port} did not start:\n{first}{rest}")
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def control(self, path: str | None = None, **settings) -> None:
        body = {**settings, **({"path": path} if path else {})}
        assert requests.post(self.url("/_control"), json=body, timeout=5).status_code == 204

    def requests(self, path: str | None = None, kind: str | None = "Notification") -> list[dict]:
        if not self.log.exists():
            return []
        found = []
        for line in self.log.read_text().splitlines():
            record = json.loads(line)
            if path is not None and record["path"].split("?")[0] != path:
                continue
            if kind is not None and record["headers"].get("aeg-event-type") != kind:
                continue
            found.append(record)
        return found

    def events(self, path: str) -> list[dict]:
        """Events delivered (answered 2xx) to a path, in arrival order."""
        delivered = []
        for record in self.requests(path):
            if 200 <= record["status"] <= 204:
                body = json.loads(record["body"])
                delivered.extend(body if isinstance(body, list) else [body])
        return delivered


class Arm:
    def __init__(self, server: Server):
        self.base = server.arm

    def topic_url(self, name: str = "maintenance", sub: str = SUB, group: str = "events-rg") -> str:
        return (
            f"{self.base}/subscriptions/{sub}/resourceGroups/{group}/providers/Microsoft.EventGrid/systemTopics/{name}"
        )

    def put_topic(self, name: str = "maintenance", sub: str = SUB, **body):
        body = body or {
            "location": "global",
            "properties": {
                "source": f"/subscriptions/{sub}",
                "topicType": "Microsoft.ResourceNotifications.MaintenanceResources",
            },
        }
        return requests.put(self.topic_url(name, sub), params={"api-version": API}, json=body, timeout=40)

    def subscription_url(self, name: str, topic: str = "maintenance") -> str:
        return f"{self.topic_url(topic)}/eventSubscriptions/{name}"

    def put_subscription(
        self,
        name: str,
        url: str,
        topic: str = "maintenance",
        skip: bool = False,
        destination: dict | None = None,
        **properties,
    ):
        body = {
            "properties": {
                "destination": {"endpointType": "WebHook", "properties": {"endpointUrl": url, **(destination or {})}},
                **properties,
            }
        }
        headers = {"x-forewarn-skip-validation": "true"} if skip else {}
        return requests.put(
            self.subscription_url(name, topic), params={"api-version": API}, json=body, headers=headers, timeout=40
        )

    def get(self, url: str, **params):
        return requests.get(url, params={"api-version": API, **params}, timeout=10)
