"""The bounds of the metadata port (``http1.Limits``) for the ports uvicorn serves: control, ARM, EC2 API, Compute
Engine API.

uvicorn's httptools protocol bounds none of them: it appends every piece of the request target to the last
(quadratic in the pieces), lets httptools keep a header of any size, takes any number of headers, any body size and
any number of chunks, keeps a connection that trickles bytes forever (its keep-alive timer is cancelled by every read
and armed only after a response), waits for ever for a client that does not read an answer, and accepts any number
of connections (``limit_concurrency`` answers 503 only once a request's headers have arrived). This subclass adds
the checks at the parser callbacks, a deadline per request, an idle timeout that also covers a connection that never
sends a request, a send timeout, and each port's per-address and total connection caps; a sweep a second enforces
the times. Refusals are plain text, as uvicorn's own answer to a malformed request.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from forewarn.server.http1 import ConnectionBudget, Limits, plain_error


@dataclass(frozen=True)
class ApiLimits(Limits):
    """The limits of :class:`Limits`, and one the metadata port does without (its idle timeout closes a client that
    does not read its answers, as none of its answers is a stream)."""

    send_timeout: float = 10.0  # an answer of which the client takes nothing for this long: connection cut


# The control, ARM, EC2 API and Compute Engine API ports. Bodies: 4 MiB, far above any request these APIs take (ARM
# documents the same 4 MB as its cap on a deployment template; a real ARM request cap is not documented).
# Connections: each port counts its own (so a flood of one does not shut the others), and as these ports serve
# operators and tests, not every VM, they share a quarter of the descriptors.
MANAGEMENT_LIMITS = ApiLimits(max_body=4 * 1024 * 1024, max_body_wire=16 * 1024 * 1024, connections=1024)
MANAGEMENT_DESCRIPTOR_SHARE = 0.25
# A chunked body may have this many chunks, and one more per KiB it carries; 413 beyond. Each chunk costs the loop a
# few Python calls whatever its size, so a body of 1-byte chunks made that cost, not the bytes, the bound: 8
# connections of them held another client to a few answers in 30 s. Clients chunk by buffer (KiBs) or by message.
FREE_CHUNKS = 256
BYTES_PER_CHUNK = 1024

_IDLE, _HEAD, _BODY = 0, 1, 2


class _Refused(Exception):
    """Raised from a parser callback to stop a request that was just refused (uvicorn then calls
    ``send_400_response``, which sends the refusal instead)."""


class UvicornGuard:
    """The limits, the connection budget and the open connections of the uvicorn ports; ``protocol`` is the class
    to give uvicorn as ``Config(http=...)`` and ``run`` the sweep to keep running beside it."""

    def __init__(self, limits: ApiLimits = MANAGEMENT_LIMITS, ports: int = 1):
        self.limits = limits
        self.descriptor_share = MANAGEMENT_DESCRIPTOR_SHARE / ports
        self.budgets: dict[int, ConnectionBudget] = {}  # by the local port a connection arrived on
        self.connections: set[GuardedHttpToolsProtocol] = set()
        self.protocol = type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"guard": self})

    def budget(self, port: int) -> ConnectionBudget:
        """The connections of one listening port: each has its own cap (``ports`` of them share the descriptors)."""
        found = self.budgets.get(port)
        if found is None:
            found = self.budgets[port] = ConnectionBudget(self.limits, self.descriptor_share)
        return found

    async def run(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> None:
        idle_before = now - self.limits.idle_timeout
        for connection in list(self.connections):
            transport = connection.transport
            if transport is None:
                continue
            if transport.is_closing():
                if connection.closing_since is None:
                    connection.closing_since = now
                elif connection.closing_since < idle_before:
                    transport.abort()  # its client does not read the last answer
                continue
            answering = connection.cycle is not None and not connection.cycle.response_complete
            if connection.state == _BODY or (connection.state == _HEAD and not answering):
                if connection.deadline < now:
                    connection.expire()
            elif answering:  # the application is answering (an earlier request, when the next one is arriving)
                connection.watch_delivery(now)
            elif connection.idle_since < idle_before:
                transport.close()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    guard: UvicornGuard

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.source = ""
        self.budget: ConnectionBudget | None = None  # of the port it arrived on, once admitted
        self.received_at = self.idle_since = time.monotonic()
        self.state = _IDLE
        self.deadline = 0.0
        self.url_size = self.head_size = self.header_count = self.body_size = self.wire = self.chunks = 0
        self.refusal: tuple[int, bytes] | None = None
        self.closing_since: float | None = None
        self.delivered: int | None = None  # what the client has taken of the answers so far (see delivery)
        self.delivered_at = 0.0  # when that last grew, or nothing waited for the client

    def connection_made(self, transport) -> None:
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.source = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        budget = self.guard.budget(local[1] if isinstance(local, tuple) and len(local) > 1 else 0)
        refused = budget.admit(self.source)
        if refused is not None:
            budget.refuse(transport, refused)
            return
        self.budget = budget
        self.guard.connections.add(self)
        super().connection_made(transport)

    def connection_lost(self, exc) -> None:
        if self.budget is not None:
            self.guard.connections.discard(self)
            self.budget.release(self.source)
            self.budget = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refusal is not None:
            return
        self.received_at = time.monotonic()
        if self.state:  # a request begun in an earlier read: httptools keeps an unfinished header, so count here
            self.wire += len(data)
        super().data_received(data)
        if self.state and self.refusal is None:
            limits = self.guard.limits
            if self.state == _HEAD and self.wire > limits.head_wire:
                self.refuse(431, b"request headers longer than %d bytes" % limits.max_header_bytes)
            elif self.state == _BODY and self.wire > limits.max_body_wire:
                self.refuse(413, b"request body longer than %d bytes on the wire" % limits.max_body_wire)

    # ------------------------------------------------------------------------------------- parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.state = _HEAD
        self.deadline = self.received_at + self.guard.limits.header_timeout
        self.url_size = self.head_size = self.header_count = self.body_size = self.wire = self.chunks = 0

    def on_url(self, url: bytes) -> None:
        self.url_size += len(url)
        if self.url_size > self.guard.limits.max_url:
            self._stop(414, b"request target longer than %d bytes" % self.guard.limits.max_url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        limits = self.guard.limits
        size = len(name) + len(value)
        self.head_size += size
        self.header_count += 1
        if size > limits.max_header_line:
            self._stop(431, b"a request header longer than %d bytes" % limits.max_header_line)
        if self.head_size > limits.max_header_bytes:
            self._stop(431, b"request headers longer than %d bytes" % limits.max_header_bytes)
        if self.header_count > limits.max_headers:
            self._stop(431, b"more than %d request headers" % limits.max_headers)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        limits = self.guard.limits
        for name, value in self.headers:
            if name == b"content-length" and value.isdigit() and int(value) > limits.max_body:
                self._stop(413, b"request body longer than %d bytes" % limits.max_body)
        self.state = _BODY
        self.deadline = self.received_at + limits.body_timeout
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self.body_size += len(body)
        if self.body_size > self.guard.limits.max_body:
            self._stop(413, b"request body longer than %d bytes" % self.guard.limits.max_body)
        super().on_body(body)

    def on_chunk_header(self) -> None:
        self.chunks += 1
        if self.chunks > FREE_CHUNKS + self.body_size // BYTES_PER_CHUNK:
            self._stop(
                413,
                b"request body in more than %d chunks and one more per %d bytes" % (FREE_CHUNKS, BYTES_PER_CHUNK),
            )

    def on_message_complete(self) -> None:
        self.state = _IDLE
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self.idle_since = time.monotonic()
        super().on_response_complete()

    # -------------------------------------------------------------------------------------------- refusals
    def _stop(self, status: int, message: bytes) -> None:
        self.refusal = (status, message)
        raise _Refused()

    def send_400_response(self, msg: str) -> None:
        if self.refusal is None:
            self.refusal = (400, msg.encode("ascii", "replace"))
        self.refuse(*self.refusal, force=True)

    def refuse(self, status: int, message: bytes, force: bool = False) -> None:
        """Answer ``status`` and close, unless the application has begun its own answer (then only close)."""
        if self.refusal is not None and not force:
            return
        self.refusal = (status, message)
        self.state = _IDLE
        if self.transport is None or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the application's request sees a disconnect, not a half-read body
            self.cycle.message_event.set()
            if self.cycle.response_started:
                self.transport.abort()
                return
        self.transport.write(plain_error(status, message))
        self.transport.close()

    def watch_delivery(self, now: float) -> None:
        """Cut a connection whose client takes nothing of its answer for ``send_timeout`` (a dashboard stream that is
        never read would otherwise hold its connection and its stream for ever)."""
        waiting, delivered = delivery(self.transport)
        if not waiting or delivered != self.delivered:
            self.delivered, self.delivered_at = delivered, now
        elif now - self.delivered_at > self.guard.limits.send_timeout:
            self.transport.abort()

    def expire(self) -> None:
        limits = self.guard.limits
        if self.transport.get_write_buffer_size():
            self.transport.abort()
        elif self.state == _HEAD:
            self.refuse(408, b"request headers not received within %g s" % limits.header_timeout)
        else:
            self.refuse(408, b"request body not received within %g s" % limits.body_timeout)


# struct tcp_info (Linux, include/uapi/linux/tcp.h): tcpi_unacked, tcpi_bytes_acked and tcpi_notsent_bytes, by offset.
_TCP_INFO_SIZE = 148
_UNACKED, _BYTES_ACKED, _NOTSENT = struct.Struct("=I"), struct.Struct("=Q"), struct.Struct("=I")


def delivery(transport: asyncio.Transport) -> tuple[bool, int]:
    """Whether bytes of an answer wait for the client, and a count that grows as the client takes them.

    The transport's buffer alone sees a client that does not read only once the kernel's buffers are full, up to
    4 MB for a stream of small messages. On Linux, TCP_INFO tells what the kernel still holds (unsent, or sent and
    not acknowledged) and how many bytes the client has acknowledged; elsewhere the buffer's size stands for both."""
    buffered = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    except (AttributeError, OSError):  # no TCP_INFO here, or the socket is gone
        info = b""
    if len(info) < _TCP_INFO_SIZE:
        return buffered > 0, -buffered
    (unacked,) = _UNACKED.unpack_from(info, 24)
    (acknowledged,) = _BYTES_ACKED.unpack_from(info, 120)
    (unsent,) = _NOTSENT.unpack_from(info, 144)
    return bool(buffered or unacked or unsent), acknowledged
