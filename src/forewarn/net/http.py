"""The contract between the metadata surfaces and the HTTP server that runs them (``server/http1.py``).

A surface is a synchronous function of a :class:`Request` returning a :data:`Response`; it never sees sockets.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

JSON = b"application/json; charset=utf-8"
TEXT = b"text/plain; charset=utf-8"


@dataclass(slots=True)  # not frozen: a frozen dataclass costs 0.7 µs more to build, on every request; read-only by use
class Request:
    method: str
    path: str
    query: bytes
    headers: list[tuple[bytes, bytes]]  # names lowercased, in the order received
    body: bytes
    local: tuple[str, int]  # the address and port the connection arrived on
    peer: tuple[str, int]  # the caller's address and port


# (status, body, content type, extra headers): hashable, so the server can cache the wire bytes of a response.
Response = tuple[int, bytes, bytes, tuple[tuple[bytes, bytes], ...]]


class Fresh(tuple):
    """A Response that is unique to its request (a new token, say): the server must not cache its wire bytes."""


# A Response with this status is not answered: the connection is dropped, as when the VM behind it is down.
DROP = 0


@dataclass(frozen=True)
class Later:
    """Answer after a wall-clock delay (IMDS's first-call delay, injected slowness); ``produce`` runs then, so the
    answer shows the state at that moment. The connection answers its later requests after this one."""

    seconds: float
    produce: Callable[[], Response]


@dataclass(frozen=True)
class Awaited:
    """Answer when ``produce()`` (a coroutine) completes: a replica forwarding a write to its leader. The connection
    answers its later requests after this one."""

    produce: Callable[[], Awaitable[Response]]
