"""The agent's own HTTP port: its state for its peers (``GET /v1/events/EVENT_ID``: is this machine drained for
that event?), all of it (``GET /v1/status``), and Prometheus text metrics (``GET /metrics``). Read-only."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, Optional, Tuple

from forewarn_agent.state import StateFile


class Metrics:
    """Counters and gauges in Prometheus' text format (version 0.0.4)."""

    HELP = {
        "forewarn_agent_polls_total": ("counter", "Polls of the metadata service, by outcome."),
        "forewarn_agent_events_total": ("counter", "Events that named this machine, first seen."),
        "forewarn_agent_hook_runs_total": ("counter", "Hook phases run, by phase and outcome."),
        "forewarn_agent_approvals_total": ("counter", "Early approvals sent (Azure StartRequests)."),
        "forewarn_agent_last_poll_seconds": ("gauge", "When the metadata service last answered (Unix time)."),
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}

    def add(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._values[(name, tuple(sorted(labels.items())))] = value

    def text(self) -> str:
        lines = []
        with self._lock:
            values = dict(self._values)
        for name, (kind, help_text) in self.HELP.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for (found, labels), value in sorted(values.items()):
                if found == name:
                    label_text = ",".join(f'{k}="{v}"' for k, v in labels)
                    lines.append(f"{name}{{{label_text}}} {value:g}" if labels else f"{name} {value:g}")
        return "\n".join(lines) + "\n"


def serve_status(
    address: str, state: StateFile, metrics: Metrics, identity: Callable[[], Dict[str, str]]
) -> Optional[ThreadingHTTPServer]:
    """Listen on ``HOST:PORT`` in a thread of its own; None for an empty address (no port)."""
    if not address:
        return None
    host, _, port = address.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.text().encode(), "text/plain; version=0.0.4")
            elif path == "/healthz":
                self._json(200, {"ok": True, "pid": os.getpid()})
            elif path == "/v1/status":
                self._json(200, dict(identity(), events=state.snapshot()))
            elif path.startswith("/v1/events/"):
                event_id = path[len("/v1/events/") :]
                self._json(200, dict(identity(), event_id=event_id, drained=state.drained(event_id)))
            else:
                self._json(404, {"error": f"no such path: {path}"})

        def _json(self, status: int, data: object) -> None:
            self._send(status, json.dumps(data).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the agent's log says what it does; its readers' GETs are not events

    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="status", daemon=True).start()
    return server
