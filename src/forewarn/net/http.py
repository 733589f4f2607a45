"""The contract between the metadata surfaces and the HTTP server that runs them (``server/http1.py``).

A surface is a synchronous function of a :class:`Request` returning a :data:`Response` (or a :class:`Later` or a
:class:`Deferred`); it never sees sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

JSON = b"application/json; charset=utf-8"
TEXT = b"text/plain; charset=utf-8"


@dataclass(slots=True)  # not frozen: a frozen dataclass costs 0.7 µs more to build, on every request; read-only by use
class Request:
    method: str
    path: str
    query: bytes
    headers: tuple[tuple[bytes, bytes], ...]  # names lowercased, in the order received; hashable, so a surface can
    # keep what it derives from a request's headers alone (an agent sends the same ones all day)
    body: bytes
    local: tuple[str, int]  # the address and port the connection arrived on
    peer: tuple[str, int]  # the caller's address and port


# (status, body, content type, extra headers): hashable, so the server can cache the wire bytes of a response.
Response = tuple[int, bytes, bytes, tuple[tuple[bytes, bytes], ...]]


class Fresh(tuple):
    """A Response that is unique to its request (a new token, say): the server must not cache its wire bytes."""


# A Response with this status is not answered: the connection is dropped, as when the VM behind it is down.
DROP = 0

# As a commit lands, a metadata surface renders again the kept answers of at most this many machines it changed: the
# engine holds exactly what was committed then, and the next transaction may already be under way when they ask
# again, so an answer dropped would make its machine wait for that transaction too. Bounded, so that a commit that
# changes a whole fleet of machines that all asked holds the event loop for milliseconds, not seconds; the answers of
# the rest are rendered when asked.
RENDERED_AS_LANDED = 256


@dataclass(frozen=True)
class Later:
    """Answer after a wall-clock delay (IMDS's first-call delay, injected slowness); ``produce`` runs then, so the
    answer shows the state at that moment. The connection answers its later requests after this one."""

    seconds: float
    produce: Callable[[], Response | Deferred]  # an approval after a delay still waits for its commit


class Deferred:
    """An answer the surface gives when something happens: a hanging GET (GCE's ``wait_for_change``), an approval
    answered once its group commit is durable. The server holds the connection meanwhile, with no thread and no task:
    the surface keeps this object and calls :meth:`resolve`; the server calls :meth:`cancel` if the connection closes
    first, and ``on_cancel`` lets the surface forget it."""

    __slots__ = ("_deliver", "_answer", "on_cancel", "done")

    def __init__(self, on_cancel: Callable[[Deferred], None] | None = None):
        self._deliver: Callable[[Response], None] | None = None
        self._answer: Response | None = None  # resolved before the server attached: kept until it does
        self.on_cancel = on_cancel
        self.done = False

    def resolve(self, response: Response) -> None:
        """Answer now (once; later calls do nothing)."""
        if self.done:
            return
        self.done = True
        if self._deliver is not None:
            self._deliver(response)
        else:
            self._answer = response

    def attach(self, deliver: Callable[[Response], None]) -> None:
        """The server's: where the answer goes (at once, if it came already)."""
        if self._answer is not None:
            answer, self._answer = self._answer, None
            deliver(answer)
            return
        self._deliver = deliver

    def cancel(self) -> None:
        """The server's: the connection closed unanswered."""
        if self.done:
            return
        self.done = True
        self._deliver = None
        if self.on_cancel is not None:
            self.on_cancel(self)
