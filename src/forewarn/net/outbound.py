"""The requests forewarn sends to URLs its users give it: AWS Health webhooks, Event Grid deliveries and Event Grid
validation handshakes. One HTTP client library serves them all (aiohttp), so that each behaves the same way.

aiohttp, not httpx: delivering one event per request, the sender is CPU-bound on its client's per-request work, and
httpx 0.28 with httpcore 1.0 spent about 1.2 ms of CPU on each request (its connection pool checks every pooled
connection, through anyio's socket attributes, for each request it assigns), against about 0.1 ms for aiohttp's
client on the same machine; that alone capped unbatched Event Grid delivery near 700 events/s (bench/README.md).

How requests go:

- HTTP/1.1 with keep-alive: one pool of connections per :class:`Outbound` (the outbox sender has one for all its
  lanes), at most ``connections`` open at once; a request waiting for a free connection is not timed out for it.
- ``timeout`` bounds connecting and each wait for data from the endpoint (its answer, then each part of the body).
- Redirects are not followed: a 3xx is the endpoint's answer. No cookies are kept from one request to the next, and
  proxy settings in the environment are not used: requests go straight to the endpoint (an HTTP_PROXY meant for the
  user's browsing would otherwise see every local webhook's traffic). HTTPS is verified against the system's trust
  store.
- At most ``MAX_BODY`` bytes of an answer are read (an answer's body is quoted or parsed, never stored whole).

aiohttp is imported by the first request, not at start (bench/startup.py): it costs about 0.3 s. It is the extra
``webhooks``: without it, every request fails with the message that names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from forewarn.extras import WEBHOOKS

if TYPE_CHECKING:
    import aiohttp

MAX_BODY = 1024 * 1024
CONNECTIONS = 100


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # case-insensitive names
    body: bytes  # at most MAX_BODY bytes of it


class NoAnswer(Exception):
    """The request got no HTTP answer. ``kind``: ``timeout`` (no connection or no data within the timeout),
    ``resolution`` (the host name does not resolve), ``connect`` (no connection: refused, unreachable, TLS failed)
    ``other`` (the URL, the request or the endpoint's answer was not valid HTTP, or the connection broke) or
    ``not-installed`` (no request was sent: aiohttp, the extra ``webhooks``, is not installed).
    The message names the failure as the HTTP client reported it."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Outbound:
    """A pool of connections for outgoing requests; ``aclose`` (or ``async with``) closes them."""

    def __init__(self, timeout: float, connections: int = CONNECTIONS):
        self.timeout = timeout
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    async def __aenter__(self) -> Outbound:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.connections),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )
        return self._session

    def _timeout(self, seconds: float | None) -> aiohttp.ClientTimeout:
        import aiohttp

        seconds = self.timeout if seconds is None else seconds
        made = self._timeouts.get(seconds)
        if made is None:
            # No total and no pool wait limit: waiting for a free connection is this side's queue, not the endpoint's
            made = self._timeouts[seconds] = aiohttp.ClientTimeout(
                total=None, connect=None, sock_connect=seconds, sock_read=seconds
            )
        return made

    async def send(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        """Send one request and read its answer; NoAnswer when none came."""
        try:
            import aiohttp
        except ImportError:
            raise NoAnswer("not-installed", WEBHOOKS.message) from None

        session = self._session or self._open()
        try:
            async with session.request(
                method, url, data=body, headers=headers, timeout=self._timeout(timeout), allow_redirects=False
            ) as response:
                content = bytearray()
                while len(content) <= MAX_BODY:
                    chunk = await response.content.read(MAX_BODY + 1 - len(content))
                    if not chunk:
                        break
                    content += chunk
                if len(content) > MAX_BODY:
                    response.close()  # the rest is never read: the connection is not reused
                    del content[MAX_BODY:]
                return Answer(response.status, response.headers, bytes(content))
        except TimeoutError as failure:  # aiohttp's connect and read timeouts are TimeoutErrors too
            raise NoAnswer("timeout", _text(failure)) from failure
        except aiohttp.ClientConnectorDNSError as failure:
            raise NoAnswer("resolution", _text(failure)) from failure
        except aiohttp.ClientConnectorError as failure:
            raise NoAnswer("connect", _text(failure)) from failure
        except (aiohttp.ClientError, ValueError) as failure:  # ValueError: a header value the client cannot send
            raise NoAnswer("other", _text(failure)) from failure

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def _text(failure: BaseException) -> str:
    return f"{failure.__class__.__name__}: {failure}" if str(failure) else failure.__class__.__name__
