"""A webhook for Event Grid tests, run as its own process: ``python eventgrid_receiver.py PORT LOG [SETTINGS_JSON]``.

Every request (except to /_control) is appended to LOG as one JSON line: method, path, headers (lower-case names),
body, the status it was answered with and the wall time. ``POST /_control`` with a JSON object changes how it answers
requests to its ``path`` (without the query; no path: every path without settings of its own):

- ``handshake``: ``sync`` (200 with the validationResponse; default), ``manual`` (200 without it), ``wrong`` (200 with
  another code), ``refuse`` (403);
- ``allowed_origin``: the WebHook-Allowed-Origin answered to a CloudEvents OPTIONS (null: 405, as an endpoint that
  does not take part);
- ``fail``: how many notifications to answer with ``fail_status`` (default 503) before succeeding; -1: all;
- ``status``: the status of a successful notification (default 200);
- ``delay``: seconds to wait before answering a notification.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULTS = {
    "handshake": "sync",
    "allowed_origin": "eventgrid.azure.net",
    "fail": 0,
    "fail_status": 503,
    "status": 200,
    "delay": 0,
}
SETTINGS: dict[str, dict] = {}  # path -> settings
LOCK = threading.Lock()


def settings_of(path: str) -> dict:
    return SETTINGS.get(path.split("?", 1)[0], DEFAULTS)


def main() -> None:
    port, log_path = int(sys.argv[1]), sys.argv[2]
    if len(sys.argv) > 3:
        DEFAULTS.update(json.loads(sys.argv[3]))
    log = open(log_path, "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _record(self, body: bytes, status: int) -> None:
            line = json.dumps(
                {
                    "method": self.command,
                    "path": self.path,
                    "status": status,
                    "time": time.time(),
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body.decode("utf-8", "replace"),
                }
            )
            with LOCK:
                log.write(line + "\n")

        def _answer(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_OPTIONS(self):
            origin = settings_of(self.path)["allowed_origin"]
            if origin is None:
                self._record(b"", 405)
                self._answer(405)
                return
            self._record(b"", 200)
            self._answer(200, headers={"WebHook-Allowed-Origin": origin, "WebHook-Allowed-Rate": "*"})

        def do_GET(self):
            self._record(b"", 200)
            self._answer(200, b"ok")

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/_control":
                change = json.loads(body)
                path = change.pop("path", None)
                with LOCK:
                    if path is None:
                        DEFAULTS.update(change)
                    else:
                        SETTINGS[path] = {**SETTINGS.get(path, DEFAULTS), **change}
                self._answer(204)
                return
            if self.headers.get("aeg-event-type") == "SubscriptionValidation":
                self._handshake(body)
                return
            with LOCK:
                settings = SETTINGS.setdefault(self.path.split("?", 1)[0], dict(DEFAULTS))
                failing = settings["fail"] != 0
                if settings["fail"] > 0:
                    settings["fail"] -= 1
                delay = settings["delay"]
                status = settings["fail_status"] if failing else settings["status"]
            self._record(body, status)  # on arrival, with the answer it will get: a slow answer may come too late
            if delay:
                time.sleep(delay)
            self._answer(status)

        def _handshake(self, body: bytes) -> None:
            mode = settings_of(self.path)["handshake"]
            code = json.loads(body)[0]["data"]["validationCode"]
            if mode == "refuse":
                self._record(body, 403)
                self._answer(403)
                return
            answer = {
                "sync": {"validationResponse": code},
                "wrong": {"validationResponse": "nope"},
                "manual": {"accepted": True},
            }[mode]
            self._record(body, 200)
            self._answer(200, json.dumps(answer).encode(), {"content-type": "application/json"})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
