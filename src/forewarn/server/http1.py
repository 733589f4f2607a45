"""A lean HTTP/1.1 server for the metadata endpoints, on asyncio (uvloop) and httptools.

Why not uvicorn here: a metadata GET is a lookup of bytes rendered once per change, and uvicorn's per-request
machinery (ASGI messages, a task per request, two writes per response, a keep-alive timer re-armed per request)
costs three times the lookup; measured in bench/, it held the endpoint to 0.27 of nginx serving the same bytes.
This protocol parses with httptools (the parser uvicorn uses), calls a synchronous handler, and answers each
request with one write of mostly cached bytes. The control API stays on uvicorn.

An agent polls on a kept-alive connection with the same request every time: a read that repeats, byte for byte, the
last one of its connection (one whole request) is that request again, handed to the handler without the parser, and
the same answer within the same second goes out as the same bytes.

Supported: keep-alive and pipelining (responses in order), ``Connection: close``, HTTP/1.0, ``Expect:
100-continue``, malformed requests (400, then close), idle connections closed after a timeout, and back-pressure
(a connection that does not read its answers stops being read).

Fairness: one connection's input is handled at most :data:`SLICE` bytes per turn of the event loop. A read brings up to
256 KiB (and libuv reads a connection up to 32 times in a row), thousands of pipelined requests that would otherwise
all be answered before any other connection, or the control API on the same loop, is served; the rest of a read waits,
with the connection's reading paused, for the next turn.

Every VM can reach this port, so what one client can make the process do is bounded (:class:`Limits`): the size of
the request target (414), of the headers (431) and of the body (413), the time from a request's first byte to its
end (408), and the connections open per client address and in all (503). Each step of the parser costs time
proportional to the bytes it was given, never to what the request accumulated before.
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from email.utils import formatdate
from typing import Any, Self
from urllib.parse import unquote

import httptools

from forewarn.net.http import DROP, JSON, Deferred, Fresh, Later, Request, Response

log = logging.getLogger("forewarn.http")

MAX_BODY = 1 << 20


@dataclass(frozen=True)
class Limits:
    """What one request or one client may take of the server before it is refused (docs/azure-imds.md, "Limits of
    the HTTP server"). Sizes follow nginx's defaults where it has one; real IMDS documents none of them."""

    max_url: int = 8 * 1024  # the request target; 414 beyond (nginx: large_client_header_buffers 4 8k)
    max_header_line: int = 8 * 1024  # one header's name and value; 431 beyond (nginx: one 8k buffer per line)
    max_header_bytes: int = 32 * 1024  # all header names and values together; 431 beyond (nginx: 4 x 8k)
    max_headers: int = 100  # 431 beyond (nginx has no count; 100 as in Go's and h11's practice)
    max_body: int = MAX_BODY  # the decoded body; 413 beyond
    max_body_wire: int = 4 * MAX_BODY  # the body's bytes on the wire, chunk framing and trailers included; 413
    header_timeout: float = 10.0  # from a request's first byte to the end of its headers; 408 (nginx: 60 s)
    body_timeout: float = 10.0  # from the end of the headers to the end of the body; 408 (nginx: 60 s between reads)
    idle_timeout: float = 30.0  # a connection with no request under way is closed, without an answer
    connections_per_source: int = 64  # open connections from one client address; 503 beyond; 0: no cap
    connections: int = 4096  # open connections in all; 503 beyond; lowered to fit the process's descriptor limit

    def updated(self, settings: list[str] | tuple[str, ...]) -> Self:
        """These limits with ``NAME=VALUE`` settings applied (``serve --imds-limit``); ValueError names a bad one."""
        kinds = {item.name: type(getattr(self, item.name)) for item in fields(self)}
        changes: dict[str, Any] = {}  # each value of its field's kind, checked as it is read
        for setting in settings:
            name, _, text = setting.partition("=")
            name = name.strip().replace("-", "_")
            if name not in kinds:
                raise ValueError(f"unknown limit {name!r} in {setting!r}; known: {', '.join(kinds)}")
            try:
                value = kinds[name](text.strip())
            except ValueError:
                raise ValueError(
                    f"{name} needs a number{' of seconds' if kinds[name] is float else ''}, got {text.strip()!r}"
                ) from None
            if not math.isfinite(value) or value < 0 or (value == 0 and name != "connections_per_source"):
                raise ValueError(
                    f"{name} must be positive{' (0: no cap)' if name == 'connections_per_source' else ''}"
                    f", got {text.strip()!r}"
                )
            changes[name] = value
        return replace(self, **changes)

    @property
    def head_wire(self) -> int:
        """Bytes a request's line and headers may occupy on the wire (names, values, separators)."""
        return self.max_url + self.max_header_bytes + 4 * self.max_headers + 1024


# A refused connection's request is read and dropped for this long after its 503, so that closing with unread input
# does not reset the connection before the client has read the answer (nginx's lingering close); at most this many
# refused connections linger at once, any further one is closed at once.
REFUSAL_LINGER = 1.0
MAX_LINGERING = 256
# Descriptors kept for everything else (the database, the other ports, logs) when the connection cap is fitted to
# the process's RLIMIT_NOFILE.
RESERVED_DESCRIPTORS = 256


Handler = Callable[[Request], "Response | Later | Deferred"]
# Requests a client may pipeline behind an answer still awaited; beyond, its connection is not read until it is out.
MAX_QUEUED = 8
# The bytes of one connection's input parsed (and answered) per turn of the event loop: about 150 pipelined GETs, under
# a millisecond of work, so that a flood on one connection delays the others by that much per turn, not by a read's.
SLICE = 16 * 1024
# The longest read remembered as a request that may come again, byte for byte, on its connection (an agent's GET is a
# few hundred bytes; a connection keeps at most this much for it).
REPEAT_MAX = 2048
# The longest answer a connection keeps the bytes of, to write them again (a document of a few events is 1 to 3 KB;
# the connections the server admits by default keep at most 32 MB in all).
SENT_MAX = 8 * 1024
# Header sets kept to be handed out again (:meth:`_Shared.headers_of`): how many, and how large each may be.
KNOWN_HEADER_SETS = 1024
KNOWN_HEADER_BYTES = 2048
# The listen queue of the metadata ports: room for a burst of connects as large as the connection cap. asyncio's
# default is 100, and a connect that finds the queue full is retried by the client's kernel after a second.
LISTEN_BACKLOG = Limits().connections

_REASONS = {
    100: b"Continue",
    200: b"OK",
    304: b"Not Modified",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    413: b"Payload Too Large",
    414: b"URI Too Long",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}
_PLAIN = b"text/plain; charset=utf-8"
_HANDLER_FAILED: Response = (500, b'{"error": "Internal server error"}', JSON, ())

# Where a connection is within its current request: between requests, reading the line and headers, reading the body.
_IDLE, _HEAD, _BODY = 0, 1, 2


def plain_error(status: int, message: bytes) -> bytes:
    """A whole closing answer in the server's own style for what is refused before any surface sees the request."""
    return b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (
        status,
        _REASONS.get(status, b"Unknown"),
        _PLAIN,
        len(message),
        message,
    )


def fit_to_descriptors(connections: int, share: float = 1.0) -> int:
    """``connections`` lowered to ``share`` of the descriptors the process may open, less a reserve: past the limit
    accept() fails for every port alike, so a cap above it would not protect anything."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return connections
    return min(connections, max(16, int((soft - RESERVED_DESCRIPTORS) * share)))


class ConnectionBudget:
    """Open connections per client address and in all, against the caps of :class:`Limits`."""

    def __init__(self, limits: Limits, share: float = 1.0):
        self.per_source_cap = limits.connections_per_source
        self.cap = fit_to_descriptors(limits.connections, share)
        self.open = 0
        self.by_source: dict[str, int] = {}
        self.lingering = 0

    def admit(self, source: str) -> bytes | None:
        """Count a new connection in, or say why it is refused."""
        if self.open >= self.cap:
            return b"too many connections to this server (%d)" % self.cap
        count = self.by_source.get(source, 0)
        if self.per_source_cap and count >= self.per_source_cap:
            return b"too many connections from %s (%d)" % (source.encode(), self.per_source_cap)
        self.by_source[source] = count + 1
        self.open += 1
        return None

    def release(self, source: str) -> None:
        self.open -= 1
        count = self.by_source[source] - 1
        if count:
            self.by_source[source] = count
        else:
            del self.by_source[source]

    def refuse(self, transport: asyncio.Transport, reason: bytes) -> None:
        """Answer 503 without reading the request, then close (after a short linger while few are lingering)."""
        if self.lingering >= MAX_LINGERING:
            transport.abort()
            return
        refusal = _Refusal(self, reason)
        transport.set_protocol(refusal)
        refusal.connection_made(transport)


class _Refusal(asyncio.Protocol):
    """A refused connection: its 503 is written and the write side shut; what the client still sends is dropped
    until it closes its side or the linger runs out."""

    def __init__(self, budget: ConnectionBudget, reason: bytes):
        self.budget = budget
        self.reason = reason
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.budget.lingering += 1
        transport.write(plain_error(503, self.reason))
        if transport.can_write_eof():
            transport.write_eof()
        self.timer = asyncio.get_running_loop().call_later(REFUSAL_LINGER, transport.abort)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the client has read its answer and closed: close our side too

    def connection_lost(self, exc) -> None:
        self.budget.lingering -= 1
        if self.timer is not None:
            self.timer.cancel()


class _HttpDate:
    """The ``Date`` header line, rebuilt at most once a second of the wall's, or when told the clock moved.

    ``clock`` gives the time the line tells (seconds since the epoch): the wall's, or a simulated cloud's, whose
    metadata service tells its own time as a real one does."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._second = -1
        self._line = b""

    def line(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._line = b"date: " + formatdate(self._clock(), usegmt=True).encode() + b"\r\n"
        return self._line

    def moved(self) -> None:
        """The clock jumped: the next line is made anew."""
        self._second = -1


class _Shared:
    """What every connection of one server shares: the handler, the limits, the wire cache, the clock line, the open
    set and the connection budget."""

    def __init__(self, handler: Handler, limits: Limits, clock: Callable[[], float] = time.time):
        self.handler = handler
        self.limits = limits
        self.budget = ConnectionBudget(limits)
        self.date = _HttpDate(clock)
        self.wire: dict[Response, tuple[bytes, bytes]] = {}
        self.connections: set[_Connection] = set()
        self.header_sets: dict[tuple[tuple[bytes, bytes], ...], tuple[tuple[bytes, bytes], ...]] = {}

    def headers_of(self, headers: list[tuple[bytes, bytes]], size: int) -> tuple[tuple[bytes, bytes], ...]:
        """A request's headers as a tuple: for a small set seen before, the very tuple it was then, so that the
        surfaces that keep what they derive from headers find it by identity, whatever connection it came on."""
        found = tuple(headers)
        if size <= KNOWN_HEADER_BYTES:
            seen = self.header_sets.get(found)
            if seen is not None:
                return seen
            if len(self.header_sets) < KNOWN_HEADER_SETS:
                self.header_sets[found] = found
        return found

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

    def sweep(self, now: float) -> None:
        """Enforce the deadlines: a request not complete in time gets 408, an idle connection is closed, and a
        closing connection whose client does not read its last answer is cut off."""
        idle_before = now - self.limits.idle_timeout
        for connection in list(self.connections):
            if connection.transport is None:
                continue
            if connection.closing:
                if connection.deadline < now:
                    connection.transport.abort()
            elif connection.waiting is not None:
                continue  # our own delayed answer holds the connection, not the client
            elif connection.state:
                if connection.deadline < now:
                    connection.expire()
            elif connection.idle_since < idle_before:
                connection.close_idle()


class _Rejected(Exception):
    """Raised from a parser callback to stop parsing a request that was just refused."""


class _Connection(asyncio.Protocol):
    __slots__ = (
        "shared",
        "transport",
        "parser",
        "local",
        "peer",
        "url",
        "headers",
        "body",
        "paused",
        "closing",
        "waiting",
        "received_at",
        "state",
        "deadline",
        "idle_since",
        "head_size",
        "wire",
        "broken",
        "rejection",
        "pending",
        "held",
        "backlog",
        "feeding",
        "expects",
        "begun",
        "parsed",
        "repeat",
        "sent",
    )

    def __init__(self, shared: _Shared):
        self.shared = shared
        self.parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: bytearray | None = None
        self.paused = False
        self.closing = False
        self.waiting: list[tuple[Request, bool]] | None = None  # requests behind a delayed answer, in order
        self.received_at = self.idle_since = time.monotonic()
        self.state = _IDLE
        self.deadline = 0.0  # of the request under way; of the close, once closing
        self.head_size = 0  # header names and values of the request under way
        self.wire = 0  # bytes of the request under way received after the read it began in
        self.broken = False  # input refused: nothing more is parsed
        self.rejection: tuple[int, bytes] | None = None  # to answer once the delayed answers before it are out
        self.pending: Deferred | None = None  # the hanging answer this connection waits for
        self.held = False  # reading paused until answers are out (written, delayed, or awaited)
        self.backlog: memoryview | None = None  # input received but not yet parsed: one slice a turn
        self.feeding = False  # the next slice of the backlog is scheduled
        self.expects = False  # the request under way asked for 100 Continue
        self.begun = 0  # requests begun in the read being parsed
        self.parsed: tuple[Request, bool] | None = None  # the last request parsed whole, and whether it keeps alive
        # The last read that was one whole request, its Request and keep-alive: the same bytes again (an agent polling
        # on its kept-alive connection sends nothing else) are that request again, without the parser.
        self.repeat: tuple[bytes, Request, bool] | None = None
        # The last answer written on a kept-alive connection, the date line it went with and its bytes on the wire.
        self.sent: tuple[Response, bytes, bytes] | None = None

    # ------------------------------------------------------------------------------------------ transport
    def connection_made(self, transport) -> None:
        self.local = _address(transport.get_extra_info("sockname"))
        self.peer = _address(transport.get_extra_info("peername"))
        refused = self.shared.budget.admit(self.peer[0])
        if refused is not None:
            self.shared.budget.refuse(transport, refused)
            return
        self.transport = transport
        self.shared.connections.add(self)

    def connection_lost(self, exc) -> None:
        if self.pending is not None:
            self.pending.cancel()  # the surface forgets the waiter
            self.pending = None
        if self.transport is not None:
            self.shared.connections.discard(self)
            self.shared.budget.release(self.peer[0])
        self.transport = None
        self.backlog = None
        # The parser holds this connection's hooks: left in place, the two would make a cycle that only the
        # garbage collector frees (a connection per approval, when each VM approves on its own connection).
        self.parser = None

    def data_received(self, data: bytes) -> None:
        if self.broken or self.parser is None:
            return
        if self.backlog is not None:  # a read that was under way when reading paused
            self.backlog = memoryview(bytes(self.backlog) + data)
            return
        repeat = self.repeat
        if repeat is not None and self.state == _IDLE and self.waiting is None and not self.closing:
            if data == repeat[0]:
                # Parsed from idle, the same bytes make the same callbacks with the same values: the same request.
                self.received_at = self.idle_since = time.monotonic()
                self._dispatch(repeat[1], repeat[2])
                return
        if len(data) > SLICE:
            assert self.transport is not None  # connected: these run only between connection_made and connection_lost
            self.backlog = memoryview(data)[SLICE:]
            self.transport.pause_reading()
            self._schedule_backlog()
            data = data[:SLICE]
        elif len(data) <= REPEAT_MAX and self.state == _IDLE:
            self._feed_whole(data)
            return
        self._feed(data)

    def _feed_whole(self, data: bytes) -> None:
        """Parse a read that begins a request; if it was exactly one whole request, remember it as ``repeat``."""
        self.begun = 0
        self.parsed = None
        self._feed(data)
        parsed = self.parsed
        if parsed is not None and self.begun == 1 and self.state == _IDLE and not self.broken:
            self.repeat = (data, parsed[0], parsed[1])

    def _schedule_backlog(self) -> None:
        if not self.feeding:
            self.feeding = True
            asyncio.get_running_loop().call_soon(self._feed_backlog)

    def _feed_backlog(self) -> None:
        """The next slice of the input; reading resumes once it is all parsed, unless answers hold it."""
        self.feeding = False
        backlog = self.backlog
        if backlog is None or self.held:  # held: the call that lifts the hold schedules the rest
            return
        if self.transport is None or self.closing or self.broken:
            self.backlog = None
            return
        self.backlog = backlog[SLICE:] if len(backlog) > SLICE else None
        self._feed(backlog[:SLICE])
        if self.backlog is not None:
            if not self.held:
                self._schedule_backlog()
        elif not self.held and self.transport is not None and not self.closing:
            self.transport.resume_reading()

    def _hold_reading(self) -> None:
        assert self.transport is not None  # connected: these run only between connection_made and connection_lost
        self.held = True
        self.transport.pause_reading()

    def _release_reading(self) -> None:
        assert self.transport is not None  # connected: these run only between connection_made and connection_lost
        self.held = False
        if self.backlog is not None:
            self._schedule_backlog()  # reading stays paused until the backlog is parsed
        else:
            self.transport.resume_reading()

    def _feed(self, data: bytes | memoryview) -> None:
        parser = self.parser
        if self.broken or parser is None:
            return
        self.received_at = time.monotonic()
        if self.state:  # a request begun in an earlier read: count its bytes before the parser keeps them
            self.wire += len(data)
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reject(400, b"upgrades are not supported")
        except httptools.HttpParserError as error:
            if not self.broken:  # not a refusal of ours raised out of a callback
                self._reject(400, f"malformed HTTP request: {error}".encode())
        # httptools keeps a header's name and value until the header ends, so a header that never ends is measured
        # here, on the bytes received, instead of in on_header.
        if self.state and not self.broken:
            limits = self.shared.limits
            if self.state == _HEAD and self.wire > limits.head_wire:
                self._reject(431, b"request headers longer than %d bytes" % limits.max_header_bytes)
            elif self.state == _BODY and self.wire > limits.max_body_wire:
                self._reject(413, b"request body longer than %d bytes on the wire" % limits.max_body_wire)

    def pause_writing(self) -> None:
        self.paused = True
        self._hold_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closing and self.waiting is None:
            self._release_reading()

    # ---------------------------------------------------------------------------------------- parser hooks
    def on_message_begin(self) -> None:
        self.begun += 1
        self.expects = False
        self.url = b""
        self.headers = []
        self.body = None
        self.head_size = 0
        self.wire = 0
        self.state = _HEAD
        self.deadline = self.received_at + self.shared.limits.header_timeout

    def on_url(self, url: bytes) -> None:
        url = self.url + url  # bounded by max_url, so each piece costs at most that much
        if len(url) > self.shared.limits.max_url:
            self._stop(414, b"request target longer than %d bytes" % self.shared.limits.max_url)
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value)
        self.head_size += size
        limits = self.shared.limits
        if size > limits.max_header_line:
            self._stop(431, b"a request header longer than %d bytes" % limits.max_header_line)
        if self.head_size > limits.max_header_bytes:
            self._stop(431, b"request headers longer than %d bytes" % limits.max_header_bytes)
        if len(self.headers) >= limits.max_headers:
            self._stop(431, b"more than %d request headers" % limits.max_headers)
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        limits = self.shared.limits
        self.state = _BODY
        self.deadline = self.received_at + limits.body_timeout
        expects = False
        for name, value in self.headers:
            if name == b"expect" and value.lower() == b"100-continue":
                expects = True
            elif name == b"content-length" and value.isdigit() and int(value) > limits.max_body:
                self._stop(413, b"request body too large")  # answer now rather than read a body we refuse
        if expects and self.transport is not None:
            self.expects = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self.body is None:
            self.body = bytearray(body)
        else:
            self.body += body
        if len(self.body) > self.shared.limits.max_body:
            self._stop(413, b"request body too large")

    def on_message_complete(self) -> None:
        self.state = _IDLE
        self.idle_since = self.received_at
        if self.transport is None or self.closing:
            return
        try:
            url = httptools.parse_url(self.url)
        except httptools.HttpParserInvalidURLError:
            self._stop(400, b"invalid request target")
        path = url.path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        parser = self.parser
        assert parser is not None  # this runs inside its feed_data
        request = Request(
            parser.get_method().decode("latin-1"),
            path,
            url.query or b"",
            self.shared.headers_of(self.headers, self.head_size),
            bytes(self.body) if self.body else b"",
            self.local,
            self.peer,
        )
        keep_alive = parser.should_keep_alive()
        # A request whose parse wrote something (100 Continue) is not one a repeat may stand for.
        self.parsed = None if self.expects else (request, keep_alive)
        if self.waiting is not None:  # answers go out in request order
            self.waiting.append((request, keep_alive))
            if len(self.waiting) >= MAX_QUEUED and self.transport is not None:
                self._hold_reading()
            return
        self._dispatch(request, keep_alive)

    def _dispatch(self, request: Request, keep_alive: bool) -> None:
        try:
            answer = self.shared.handler(request)
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            answer = _HANDLER_FAILED
        if isinstance(answer, Later):
            assert self.transport is not None
            self.waiting = []
            self._hold_reading()
            asyncio.get_running_loop().call_later(answer.seconds, self._answer_later, answer, request, keep_alive)
            return
        if isinstance(answer, Deferred):
            self.waiting = []
            self._hold(answer, keep_alive)
            return
        self._write(answer, keep_alive)

    def _hold(self, answer: Deferred, keep_alive: bool) -> None:
        # Reading goes on, so that a client that hangs up is noticed (and its waiter forgotten) at once.
        self.pending = answer
        answer.attach(lambda response: self._answer_deferred(response, keep_alive))

    def _answer_later(self, later: Later, request: Request, keep_alive: bool) -> None:
        if self.transport is None or self.closing:
            return
        try:
            answer = later.produce()
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            answer = _HANDLER_FAILED
        if isinstance(answer, Deferred):  # an approval after a delay still waits for its commit
            if not self.paused:
                self._release_reading()
            self._hold(answer, keep_alive)
            return
        self._resume(answer, keep_alive)

    def _answer_deferred(self, answer: Response, keep_alive: bool) -> None:
        self.pending = None
        if self.transport is None or self.closing:
            return
        self._resume(answer, keep_alive)

    def _resume(self, answer: Response, keep_alive: bool) -> None:
        """Write an answer that was waited for, then serve the requests queued behind it."""
        assert self.transport is not None
        waiting, self.waiting = self.waiting or [], None
        self._write(answer, keep_alive)
        self.idle_since = time.monotonic()
        for queued, queued_keep_alive in waiting:
            if self.transport is None or self.closing:
                return
            if self.waiting is not None:
                self.waiting.append((queued, queued_keep_alive))
            else:
                self._dispatch(queued, queued_keep_alive)
        if self.waiting is None and self.rejection is not None and not self.closing:
            self._fail(*self.rejection)
        if self.waiting is None and self.transport is not None and not self.closing and not self.paused:
            self._release_reading()

    def _write(self, response: Response, keep_alive: bool) -> None:
        assert self.transport is not None  # connected: these run only between connection_made and connection_lost
        if response[0] == DROP:
            self.closing = True
            self.transport.abort()
            return
        line = self.shared.date.line()
        if keep_alive:
            sent = self.sent
            if sent is not None and sent[0] is response and sent[1] is line:  # the same answer in the same second
                self.transport.write(sent[2])
                return
            head, rest = self.shared.encode(response)
            wire = b"".join((head, line, rest))
            if len(wire) <= SENT_MAX and type(response) is not Fresh:
                self.sent = (response, line, wire)
            self.transport.write(wire)
        else:
            head, rest = self.shared.encode(response)
            self.transport.write(b"".join((head, line, b"connection: close\r\n", rest)))
            self._close()

    # ----------------------------------------------------------------------------------------- refusals
    def _reject(self, status: int, message: bytes) -> None:
        """Refuse the request under way: nothing after it is read, and its answer closes the connection (after the
        delayed answers of the requests before it, to keep answers in request order)."""
        if self.broken:
            return
        self.broken = True
        self.state = _IDLE
        if self.waiting is not None:
            self.rejection = (status, message)
        else:
            self._fail(status, message)

    def _stop(self, status: int, message: bytes) -> None:
        self._reject(status, message)
        raise _Rejected()

    def expire(self) -> None:
        """The request under way missed its deadline."""
        assert self.transport is not None  # connected: these run only between connection_made and connection_lost
        if self.transport.get_write_buffer_size():
            self.closing = True  # the client does not read what it is sent: nothing more to say to it
            self.transport.abort()
            return
        limits = self.shared.limits
        if self.state == _HEAD:
            self._reject(408, b"request headers not received within %g s" % limits.header_timeout)
        else:
            self._reject(408, b"request body not received within %g s" % limits.body_timeout)

    def close_idle(self) -> None:
        assert self.transport is not None  # connected: these run only between connection_made and connection_lost
        if self.transport.get_write_buffer_size():
            self.closing = True
            self.transport.abort()
        else:
            self._close()

    # --------------------------------------------------------------------------------------------- helpers
    def _fail(self, status: int, message: bytes) -> None:
        if self.transport is None or self.closing:
            return
        head, rest = self.shared.encode((status, message, _PLAIN, ()))
        self.transport.write(b"".join((head, self.shared.date.line(), b"connection: close\r\n", rest)))
        self._close()

    def _close(self) -> None:
        assert self.transport is not None  # connected: these run only between connection_made and connection_lost
        self.closing = True
        # a client that does not read its last answer is cut off after this, by the sweep
        self.deadline = time.monotonic() + self.shared.limits.idle_timeout
        self.transport.close()


def _address(value) -> tuple[str, int]:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return "", 0


class Http1Server:
    """Serves ``handler`` on already-bound listening sockets until closed."""

    def __init__(self, handler: Handler, limits: Limits = Limits(), clock: Callable[[], float] = time.time):
        """``clock``: the time the ``Date`` header tells (:class:`_HttpDate`); :meth:`clock_moved` after it jumps."""
        self.shared = _Shared(handler, limits, clock)
        self._servers: list[asyncio.AbstractServer] = []
        self._sweeper: asyncio.Task | None = None

    def clock_moved(self) -> None:
        self.shared.date.moved()

    async def start(self, sockets) -> None:
        loop = asyncio.get_running_loop()
        for sock in sockets:
            server = await loop.create_server(lambda: _Connection(self.shared), sock=sock, backlog=LISTEN_BACKLOG)
            self._servers.append(server)
        self._sweeper = asyncio.create_task(self._sweep())

    async def _sweep(self) -> None:
        """Deadlines and idle connections, one sweep a second instead of a timer per request."""
        while True:
            await asyncio.sleep(1.0)
            self.shared.sweep(time.monotonic())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for server in self._servers:
            server.close()
        for connection in list(self.shared.connections):
            if connection.transport is not None and not connection.closing:
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
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock
