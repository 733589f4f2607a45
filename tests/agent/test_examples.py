"""The example hooks in agent/examples, run: by a real forewarn-agent against a real forewarn (one event drained, then
restored), and one by one for their edge cases. kubectl and systemctl are stand-ins on PATH that record their
arguments; the load balancer's admin API and the chat webhook are small HTTP servers of this test."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent_helpers import AGENT_SOURCE, ROOT, WAIT
from forewarn.scenarios.testnet import loopback_address
from helpers import Server, forewarn

EXAMPLES = ROOT / "agent" / "examples"
SOLO = loopback_address(41, 13)
FLEET = f"""
hosts: [{{name: host-01}}]
vms:
  - {{name: solo, host: host-01, imds: {{address: {SOLO}}}}}
"""


class Receiver:
    """A load balancer's admin API (PUT /backends/NAME, GET answers its connections, which fall to 0 on the second
    GET after a drain) and a chat webhook (POST): each request is recorded."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, object]] = []
        self.gets_since_drain = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.requests.append(("PUT", self.path, body))
                receiver.gets_since_drain = 0
                self._answer({"state": body["state"]})

            def do_GET(self) -> None:
                receiver.requests.append(("GET", self.path, None))
                receiver.gets_since_drain += 1
                self._answer({"state": "drain", "connections": 0 if receiver.gets_since_drain > 1 else 3})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.requests.append(("POST", self.path, body))
                self._answer({"ok": True})

            def _answer(self, data: object) -> None:
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, method: str) -> list[tuple[str, object]]:
        return [(path, body) for found, path, body in self.requests if found == method]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.server.shutdown()


@pytest.fixture
def fake_bin(tmp_path) -> Path:
    """kubectl and systemctl that append their arguments to calls.log and succeed."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for name in ("kubectl", "systemctl", "hostname"):
        tool = directory / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> {shlex.quote(str(tmp_path / "calls.log"))}\necho node-7\n')
        tool.chmod(0o755)
    return directory


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def example(name: str, *args: str) -> str:
    return shlex.join([str(EXAMPLES / name), *args])


def test_the_examples_drain_and_restore_as_a_real_agent_runs_them(tmp_path, fake_bin, receiver):
    hooks = [
        example("chat-webhook.sh", receiver.url + "/chat"),
        example("lb-drain.sh", receiver.url),
        example("systemd-service.sh", "myapp"),
        example("kubectl-drain.sh"),
    ]
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "PYTHONPATH": str(AGENT_SOURCE)}
    env["KUBE_NODE_NAME"] = "aks-nodepool1-0"
    with Server(tmp_path, fleet_text=FLEET, start=datetime.now(UTC).replace(microsecond=0)) as server:
        command = [sys.executable, "-m", "forewarn_agent", "--once", "--cloud", "azure"]
        command += ["--endpoint", f"http://{SOLO}:{server.imds_port}", "--state", str(tmp_path / "state.json")]
        command += ["--listen", "", "--margin", "10", "--log-format", "text"]
        command += [part for hook in hooks for part in ("--on-drain", hook, "--on-restore", hook)]
        [event] = json.loads(forewarn(server, "schedule", "--type", "Reboot", "--vm", "solo", "--json").stdout)
        drained = subprocess.run(command, capture_output=True, text=True, env=env, timeout=WAIT)
        assert drained.returncode == 0 and "drain hooks done" in drained.stderr, drained.stderr
        forewarn(server, "clock", "advance", "1h")  # approved, so started at once; an hour on, over
        restored = subprocess.run(command, capture_output=True, text=True, env=env, timeout=WAIT)
        assert restored.returncode == 0 and "ended hooks done" in restored.stderr, restored.stderr
    stop, cordon, drain_line, *restore = calls(tmp_path)  # the hooks run in the order given
    assert (stop, cordon) == ("systemctl stop myapp", "kubectl cordon aks-nodepool1-0")
    drain = drain_line.split()
    assert drain[:3] == ["kubectl", "drain", "aks-nodepool1-0"] and "--ignore-daemonsets" in drain
    timeout = int(drain[-1].removeprefix("--timeout=").removesuffix("s"))
    assert 15 * 60 - 15 - 60 < timeout <= 15 * 60 - 15  # a Reboot's 15 minutes of notice, less DRAIN_MARGIN
    assert restore == ["systemctl start myapp", "kubectl uncordon aks-nodepool1-0"]
    assert receiver.of("PUT") == [("/backends/solo", {"state": "drain"}), ("/backends/solo", {"state": "ready"})]
    assert len(receiver.of("GET")) == 2  # until the backend had no connection left
    [(_, before), (_, after)] = receiver.of("POST")
    assert before["text"].startswith("solo (azure): draining for Reboot (") and event["event_id"] in before["text"]
    assert after["text"] == f"solo (azure): Reboot over: back in service, event {event['event_id']}"


def run_hook(name: str, *args: str, phase: str, fake_bin: Path, **env: str) -> subprocess.CompletedProcess:
    given = {"FOREWARN_PHASE": phase, "FOREWARN_MACHINE": "vm-1", "FOREWARN_CLOUD": "aws", **env}
    given |= {"FOREWARN_EVENT_ID": given.get("FOREWARN_EVENT_ID", "i-1"), "FOREWARN_EVENT_KIND": "system-reboot"}
    path = f"{fake_bin}:/usr/bin:/bin"
    return subprocess.run(
        [str(EXAMPLES / name), *args], capture_output=True, text=True, env={"PATH": path, **given}, timeout=30
    )


def test_kubectl_drain_without_a_time_left_uses_its_default_and_never_a_timeout_below_one_second(tmp_path, fake_bin):
    assert run_hook("kubectl-drain.sh", phase="drain", fake_bin=fake_bin, FOREWARN_SECONDS_LEFT="").returncode == 0
    assert run_hook("kubectl-drain.sh", phase="drain", fake_bin=fake_bin, FOREWARN_SECONDS_LEFT="5").returncode == 0
    assert run_hook("kubectl-drain.sh", phase="canceled", fake_bin=fake_bin).returncode == 0
    assert calls(tmp_path) == [
        "hostname ",
        "kubectl cordon node-7",
        "kubectl drain node-7 --ignore-daemonsets --delete-emptydir-data --timeout=300s",
        "hostname ",
        "kubectl cordon node-7",
        "kubectl drain node-7 --ignore-daemonsets --delete-emptydir-data --timeout=1s",
        "hostname ",
        "kubectl uncordon node-7",
    ]


def test_systemd_service_needs_its_unit_and_fails_when_systemctl_does(tmp_path, fake_bin):
    missing = run_hook("systemd-service.sh", phase="drain", fake_bin=fake_bin)
    assert missing.returncode != 0 and "usage: systemd-service.sh UNIT" in missing.stderr
    (fake_bin / "systemctl").write_text("#!/bin/sh\necho 'Failed to stop myapp.service' >&2\nexit 5\n")
    failed = run_hook("systemd-service.sh", "myapp", phase="drain", fake_bin=fake_bin)
    assert failed.returncode == 5  # the agent then records the drain as failed and does not approve


def test_the_chat_message_is_json_whatever_the_event_id_holds(tmp_path, fake_bin, receiver):
    odd = 'x"y\\z'
    done = run_hook("chat-webhook.sh", receiver.url, phase="canceled", fake_bin=fake_bin, FOREWARN_EVENT_ID=odd)
    assert done.returncode == 0, done.stderr
    [(_, body)] = receiver.of("POST")
    assert body == {"text": f"vm-1 (aws): system-reboot canceled: back in service, event {odd}"}


def test_the_load_balancer_drain_fails_when_the_admin_api_does_not_answer(tmp_path, fake_bin):
    refused = run_hook("lb-drain.sh", "http://127.0.0.1:9", phase="drain", fake_bin=fake_bin)
    assert refused.returncode != 0
