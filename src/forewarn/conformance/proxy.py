"""The observing proxy: one per machine, on a free loopback port. The handler is given its URL as the machine's
metadata endpoint (or as its HTTP proxy, for a handler that hard-codes http://169.254.169.254: requests and most
HTTP clients honour ``HTTP_PROXY``); each request is passed to the machine's own endpoint on the private server
and recorded, with its answer, so that the grader sees every metadata call the handler made."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from forewarn.conformance_cases import Call

KEPT_ANSWER = 256 * 1024  # bytes of an answer kept for the grader: a document is a few KB
FORWARDED_HEADERS_LEFT_OUT = {"host", "connection", "proxy-connection", "keep-alive"}
ANSWER_HEADERS_LEFT_OUT = {"connection", "transfer-encoding", "content-length"}  # this connection's own


class ObservingProxy:
    def __init__(self, machine: str, target: str, began: float, before_write: Callable[[str], None] | None = None):
        self.machine = machine
        self.before_write = before_write  # runs before a POST (an approval) goes on
        self.target = urlsplit(target)
        self.began = began
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler_class())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"proxy-{machine}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> ObservingProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def taken(self) -> list[Call]:
        with self.lock:
            return list(self.calls)

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
        connection = http.client.HTTPConnection(self.target.hostname or "127.0.0.1", self.target.port, timeout=600)
        try:
            connection.request(method, path, body or None, headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def record(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Relay(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def relay(self) -> None:
                if self.command == "POST" and proxy.before_write is not None:
                    proxy.before_write(proxy.machine)  # the probes' answer at the very moment of an approval
                at = time.monotonic() - proxy.began
                parts = urlsplit(self.path)  # absolute-form when the handler uses us as its HTTP proxy
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in FORWARDED_HEADERS_LEFT_OUT}
                try:
                    status, answer_headers, answer = proxy.forward(self.command, path, headers, body)
                except OSError:
                    status, answer_headers, answer = 0, [], b""
                proxy.record(
                    Call(
                        proxy.machine,
                        at,
                        time.monotonic() - proxy.began,
                        self.command,
                        path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        status,
                        answer[:KEPT_ANSWER],
                    )
                )
                if status == 0:  # the server dropped it: so do we
                    self.close_connection = True
                    return
                self.send_response_only(status)  # the service's own Date: the simulated time a handler reads
                for name, value in answer_headers:
                    if name.lower() not in ANSWER_HEADERS_LEFT_OUT:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_PUT = do_DELETE = relay

            def log_message(self, format: str, *args: object) -> None:  # quiet: the calls are recorded
                return

        return Relay
