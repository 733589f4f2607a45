"""The observing proxy: one per machine, on a free loopback port. The handler is given its URL as the machine's
metadata endpoint (or as its HTTP proxy, for a handler that hard-codes http://169.254.169.254: requests and most
HTTP clients honour ``HTTP_PROXY``); each request is passed to the machine's own endpoint on the private server
and recorded, with its answer, so that the grader sees every metadata call the handler made. A case can make the
proxy drop the machine's connections for a while (:meth:`ObservingProxy.drop`): a metadata server that drops
connections, including one held open by a wait for a change."""

from __future__ import annotations

import http.client
import socket
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
        self.open: set[socket.socket] = set()  # the handler's connections, to close when dropping
        self.drop_until = 0.0  # monotonic time until which connections are dropped
        self.drops = 0  # how many drops began: a call that saw one begin while it waited is dropped too
        self.throttle_until = 0.0
        self.expired: dict[str, set[str]] = {}  # header name: the session tokens it may no longer carry
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

    def drop(self, seconds: float) -> None:
        """For ``seconds``, close every connection of the handler unanswered: those open now (a request waiting for
        its answer gets none) and each one it opens meanwhile."""
        with self.lock:
            self.drop_until = time.monotonic() + seconds
            self.drops += 1
            connections = list(self.open)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed by the handler meanwhile
                pass

    def dropping(self) -> bool:
        return time.monotonic() < self.drop_until

    def throttle(self, seconds: float) -> None:
        """For ``seconds``, answer every request 429 Too Many Requests without passing it on."""
        self.throttle_until = time.monotonic() + seconds

    def expire(self, header: str) -> None:
        """From now on, answer 401 Unauthorized to a request whose ``header`` carries a session token given before
        now: a value the header carried, or the answer of a PUT (how a token is handed out)."""
        name = header.lower()
        with self.lock:
            given = {call.headers[name] for call in self.calls if name in call.headers}
            given |= {call.answer.decode(errors="replace").strip() for call in self.calls if call.method == "PUT"}
            self.expired[name] = self.expired.get(name, set()) | given

    def refusal(self, headers: dict[str, str]) -> tuple[int, list, bytes] | None:
        """The answer the case gives in the server's place, if any: a throttled or expired-token answer."""
        if time.monotonic() < self.throttle_until:
            return 429, [("Content-Type", "text/plain")], b"Too Many Requests"
        lowered = {name.lower(): value for name, value in headers.items()}
        for name, values in self.expired.items():
            if lowered.get(name) in values:
                return 401, [("Content-Type", "text/plain")], b"Unauthorized"
        return None

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
        """The answer the handler gets: the server's, or the case's refusal; status 0 when the connection is
        dropped (before the answer, or while the handler waited for it)."""
        drops = self.drops
        try:
            if self.dropping():
                raise ConnectionAbortedError("dropped by the case")
            status, answer_headers, answer = self.refusal(headers) or self.forward(method, path, headers, body)
        except OSError:
            return 0, [], b""
        if self.drops != drops:  # dropped while it waited: the handler never got this answer
            return 0, [], b""
        return status, answer_headers, answer

    def track(self, connection: socket.socket, is_open: bool) -> None:
        with self.lock:
            (self.open.add if is_open else self.open.discard)(connection)

    def record(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Relay(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def setup(self) -> None:
                super().setup()
                proxy.track(self.connection, True)

            def finish(self) -> None:
                proxy.track(self.connection, False)
                try:
                    super().finish()
                except OSError:  # a dropped connection
                    pass

            def relay(self) -> None:
                if self.command == "POST" and proxy.before_write is not None:
                    proxy.before_write(proxy.machine)  # the probes' answer at the very moment of an approval
                at = time.monotonic() - proxy.began
                parts = urlsplit(self.path)  # absolute-form when the handler uses us as its HTTP proxy
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in FORWARDED_HEADERS_LEFT_OUT}
                status, answer_headers, answer = proxy.answer(self.command, path, headers, body)
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
                try:
                    self.wfile.write(answer)
                except OSError:  # dropped meanwhile
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = relay

            def log_message(self, format: str, *args: object) -> None:  # quiet: the calls are recorded
                return

        return Relay
