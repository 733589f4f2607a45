"""A lean HTTP/1.1 server for the metadata endpoints, on asyncio (uvloop) and httptools.

Why not uvicorn here: a metadata GET is a lookup of bytes rendered once per change, and uvicorn's per-request
machinery (ASGI messages, a task per request, two writes per response, a keep-alive timer re-armed per request)
costs three times the lookup; measured in bench/, it held the endpoint to 0.27 of nginx serving the same bytes.
This protocol parses with httptools (the parser uvicorn uses), calls a synchronous handler, and answers each
request with one write of mostly cached bytes. The control API stays on uvicorn.

Supported: keep-alive and pipelining (responses in order), ``Connection: close``, HTTP/1.0, ``Expect:
100-continue``, bodies up to a limit (413 beyond), malformed requests (400, then close), idle connections closed
after a timeout, and back-pressure (a connection that does not read its answers stops being read).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from email.utils import formatdate
from typing import Callable
from urllib.parse import unquote

import httptools

from forewarn.surfaces.http import DROP, JSON, Fresh, Later, Request, Response

log = logging.getLogger("forewarn.http")

MAX_BODY = 1 << 20


Handler = Callable[[Request], "Response | Later"]

_REASONS = {
    100: b"Continue", 200: b"OK", 304: b"Not Modified", 400: b"Bad Request", 401: b"Unauthorized",
    403: b"Forbidden", 404: b"Not Found", 405: b"Method Not Allowed", 413: b"Payload Too Large", 429: b"Too Many Requests", 500: b"Internal Server Error",
    503: b"Service Unavailable",
}
_PLAIN = b"text/plain; charset=utf-8"
_HANDLER_FAILED: Response = (500, b'{"error": "Internal server error"}', JSON, ())


class _HttpDate:
    """The ``Date`` header line, rebuilt at most once a second."""

    def __init__(self):
        self._second = -1
        self._line = b""

    def line(self) -> bytes:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._line = b"date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
        return self._line


class _Shared:
    """What every connection of one server shares: the handler, the wire cache, the clock line, the open set."""

    def __init__(self, handler: Handler, idle_timeout: float):
        self.handler = handler
        self.idle_timeout = idle_timeout
        self.date = _HttpDate()
        self.wire: dict[Response, tuple[bytes, bytes]] = {}
        self.connections: set[_Connection] = set()

    def encode(self, response: Response) -> tuple[bytes, bytes]:
        """Status line and headers before ``Date``, and the rest (headers, blank line, body) after it."""
        found = self.wire.get(response)
        if found is None:
            status, body, content_type, extra = response
            head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))
            rest = [b"content-type: " + content_type + b"\r\n"] if status != 304 else []
            if status != 304:
                rest.append(b"content-length: %d\r\n" % len(body))
            rest.extend(name + b": " + value + b"\r\n" for name, value in extra)
            found = (head, b"".join(rest) + b"\r\n" + (body if status != 304 else b""))
            if len(self.wire) < 65536 and type(response) is not Fresh:
                self.wire[response] = found
        return found


class _Connection(asyncio.Protocol):
    __slots__ = (
        "shared", "transport", "parser", "local", "peer", "url", "headers", "body", "too_large", "last_active",
        "paused", "closing", "waiting",
    )

    def __init__(self, shared: _Shared):
        self.shared = shared
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.too_large = False
        self.paused = False
        self.closing = False
        self.waiting: list[tuple[Request, bool]] | None = None  # requests behind a delayed answer, in order
        self.last_active = time.monotonic()

    # ------------------------------------------------------------------------------------------ transport
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.local = _address(transport.get_extra_info("sockname"))
        self.peer = _address(transport.get_extra_info("peername"))
        self.shared.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.shared.connections.discard(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, b"upgrades are not supported")
        except httptools.HttpParserError as error:
            self._fail(400, f"malformed HTTP request: {error}".encode())

    def pause_writing(self) -> None:
        self.paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closing and self.waiting is None:
            self.transport.resume_reading()

    # ---------------------------------------------------------------------------------------- parser hooks
    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.body = []
        self.too_large = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        for name, value in self.headers:
            if name == b"expect" and value.lower() == b"100-continue":
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            elif name == b"content-length" and value.isdigit() and int(value) > MAX_BODY:
                self._fail(413, b"request body too large")  # answer now rather than read a body we refuse
                return

    def on_body(self, body: bytes) -> None:
        if not self.too_large:
            self.body.append(body)
            if sum(map(len, self.body)) > MAX_BODY:
                self.too_large = True
                self.body = []

    def on_message_complete(self) -> None:
        if self.transport is None or self.closing:
            return
        if self.too_large:
            self._fail(413, b"request body too large")
            return
        try:
            url = httptools.parse_url(self.url)
        except httptools.HttpParserInvalidURLError:
            self._fail(400, b"invalid request target")
            return
        path = url.path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        request = Request(
            self.parser.get_method().decode("latin-1"),
            path,
            url.query or b"",
            self.headers,
            b"".join(self.body),
            self.local,
            self.peer,
        )
        keep_alive = self.parser.should_keep_alive()
        if self.waiting is not None:  # answers go out in request order
            self.waiting.append((request, keep_alive))
            return
        self._dispatch(request, keep_alive)

    def _dispatch(self, request: Request, keep_alive: bool) -> None:
        try:
            answer = self.shared.handler(request)
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            answer = _HANDLER_FAILED
        if answer.__class__ is Later:
            self.waiting = []
            self.transport.pause_reading()
            asyncio.get_running_loop().call_later(answer.seconds, self._answer_later, answer, request, keep_alive)
            return
        self._write(answer, keep_alive)

    def _answer_later(self, later: Later, request: Request, keep_alive: bool) -> None:
        if self.transport is None or self.closing:
            return
        waiting, self.waiting = self.waiting or [], None
        try:
            answer = later.produce()
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            answer = _HANDLER_FAILED
        self._write(answer, keep_alive)
        for queued, queued_keep_alive in waiting:
            if self.transport is None or self.closing:
                return
            if self.waiting is not None:
                self.waiting.append((queued, queued_keep_alive))
            else:
                self._dispatch(queued, queued_keep_alive)
        if self.waiting is None and self.transport is not None and not self.closing and not self.paused:
            self.transport.resume_reading()

    def _write(self, response: Response, keep_alive: bool) -> None:
        if response[0] == DROP:
            self.closing = True
            self.transport.abort()
            return
        head, rest = self.shared.encode(response)
        if keep_alive:
            self.transport.write(b"".join((head, self.shared.date.line(), rest)))
        else:
            self.transport.write(b"".join((head, self.shared.date.line(), b"connection: close\r\n", rest)))
            self._close()

    # --------------------------------------------------------------------------------------------- helpers
    def _fail(self, status: int, message: bytes) -> None:
        if self.transport is None or self.closing:
            return
        head, rest = self.shared.encode((status, message, _PLAIN, ()))
        self.transport.write(b"".join((head, self.shared.date.line(), b"connection: close\r\n", rest)))
        self._close()

    def _close(self) -> None:
        self.closing = True
        self.transport.close()


def _address(value) -> tuple[str, int]:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return "", 0


class Http1Server:
    """Serves ``handler`` on already-bound listening sockets until closed."""

    def __init__(self, handler: Handler, idle_timeout: float = 30.0):
        self.shared = _Shared(handler, idle_timeout)
        self._servers: list[asyncio.AbstractServer] = []
        self._sweeper: asyncio.Task | None = None

    async def start(self, sockets) -> None:
        loop = asyncio.get_running_loop()
        for sock in sockets:
            self._servers.append(await loop.create_server(lambda: _Connection(self.shared), sock=sock))
        self._sweeper = asyncio.create_task(self._sweep())

    async def _sweep(self) -> None:
        """Close idle keep-alive connections; one sweep a second instead of a timer per request."""
        while True:
            await asyncio.sleep(1.0)
            limit = time.monotonic() - self.shared.idle_timeout
            for connection in [c for c in self.shared.connections if c.last_active < limit]:
                if connection.transport is not None:
                    connection._close()

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for server in self._servers:
            server.close()
        for connection in list(self.shared.connections):
            if connection.transport is not None:
                connection._close()
        for server in self._servers:
            await server.wait_closed()


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening, non-blocking TCP socket. An explicit IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted
    connections only when the listening socket says so, and without it small answers wait for delayed ACKs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock
