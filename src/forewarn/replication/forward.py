"""Writes that arrive at a replica are carried out by the leader, and answered with the leader's answer.

- The control, ARM and EC2 ports (ASGI): a request that is not a GET or HEAD is sent to the same port of the leader
  (its address is in ``forewarn_leader``) with its method, path, query, headers (Host included, so the URLs the
  leader writes in its answer name this replica) and body; the leader's status, headers and body are the answer.
  The leader answers once the command is committed, so an answer of 2xx means committed.
- The metadata port: a VM's approval (``POST /metadata/scheduledevents``) is sent to the leader's control port at
  ``/v1/replication/metadata`` with the connection's addresses, so that the leader resolves the same VM, and its
  answer (status, body, headers) is sent back as it is.

When no leader answers (none published, or it does not accept the connection: a failover under way), the request
goes to this replica's own surface, whose command raises ``NotLeader`` (an ``Unavailable``): each surface answers
with its own retryable error (IMDS 500, ARM and EC2 503 ServiceUnavailable, control API 503 StoreUnavailable), with
Retry-After where the surface gives one.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from forewarn.app.errors import Unavailable
from forewarn.net.http import JSON, Deferred, Later, Request, Response
from forewarn.replication.shared import LEADER, SharedService

log = logging.getLogger("forewarn.replication")

FORWARD_PATH = "/v1/replication/metadata"
SEEN_PATH = "/v1/replication/seen"
SEEN_EVERY = 0.5  # seconds between a replica's reports of the scopes its VMs asked for
# Scopes in one request of a report: about 1.4 MB of names at most, well inside the control port's 4 MiB bodies (a
# replica of a tenth of a million-VM fleet can have 100,000 scopes to report after a restart).
SEEN_PER_REPORT = 20_000
BODY_LIMIT = 1024 * 1024 + 1  # past the surfaces' own 1 MiB limit: the local surface refuses it in its own terms
UNAUTHORIZED = b'{"error": {"code": "Unauthorized", "message": "this needs Authorization: Bearer TOKEN"}}'
# Between processes only: a replica marks the writes it forwards, and the leader answers them with the position its
# state reached once they were committed; neither header reaches a client.
FORWARDED = b"x-forewarn-forwarded"
POSITION = b"x-forewarn-position"
READ_YOUR_WRITES_WITHIN = 2.0  # seconds a replica waits to hold its own forwarded write before answering
_HOP_BY_HOP = {
    POSITION,
    FORWARDED,
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"content-length",
    b"content-encoding",
    b"upgrade",
}

Handler = Callable[[Request], Any]
ASGIApp = Callable[..., Awaitable[None]]


class Leaders:
    """Where the leader's surfaces answer, as the replication thread last read it, and the client that reaches
    them."""

    def __init__(self, control_token: str | None):
        self.addresses: dict[str, str] = {}
        self.token = control_token
        self._client: httpx.AsyncClient | None = None
        # The (term, position) of the state this process holds: set by its Node.
        self.held: Callable[[], tuple[int, int]] = lambda: (0, 0)

    def position_header(self) -> tuple[bytes, bytes]:
        term, position = self.held()
        return POSITION, f"{term}.{position}".encode()

    async def caught_up(self, mark: bytes | str | None, within: float = READ_YOUR_WRITES_WITHIN) -> bool:
        """Wait until this replica holds the leader's state as of ``mark`` (``term.position``, what the leader
        answered a forwarded write with), so that the client that wrote reads its write here next. False when it
        took longer than ``within`` seconds (the answer goes out anyway: the write is committed)."""
        try:
            text = mark.decode() if isinstance(mark, bytes) else mark
            term, position = (int(part) for part in (text or "").split("."))
        except ValueError:
            log.warning("the leader answered a forwarded write without its position (%r)", mark)
            return False
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within
        while True:
            held_term, held_position = self.held()
            if held_position >= position:  # positions go on across leaders: the journal's
                return True
            if loop.time() > give_up:
                log.warning(
                    "answering a forwarded write before holding it: this replica is at %s.%s, the write at %s",
                    held_term,
                    held_position,
                    text,
                )
                return False
            await asyncio.sleep(0.005)

    @property
    def client(self) -> httpx.AsyncClient:
        # Created on the event loop that uses it; no retries: a command is sent once.
        if self._client is None:
            logging.getLogger("httpx").setLevel(logging.WARNING)  # not a log line per forwarded command
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=1.0), trust_env=False)
        return self._client

    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}


def encode_request(request: Request, imds_port: int | None, leader_imds_port: int | None) -> dict[str, Any]:
    local = request.local
    if imds_port is not None and local[1] == imds_port and leader_imds_port is not None:
        local = (local[0], leader_imds_port)  # the shared port of the leader identifies nobody either
    return {
        "method": request.method,
        "path": request.path,
        "query": base64.b64encode(request.query).decode(),
        "headers": [[base64.b64encode(k).decode(), base64.b64encode(v).decode()] for k, v in request.headers],
        "body": base64.b64encode(request.body).decode(),
        "local": list(local),
        "peer": list(request.peer),
    }


def decode_request(data: dict[str, Any]) -> Request:
    return Request(
        str(data["method"]),
        str(data["path"]),
        base64.b64decode(data["query"]),
        tuple((base64.b64decode(k), base64.b64decode(v)) for k, v in data["headers"]),
        base64.b64decode(data["body"]),
        (str(data["local"][0]), int(data["local"][1])),
        (str(data["peer"][0]), int(data["peer"][1])),
    )


def encode_response(response: Response) -> dict[str, Any]:
    status, body, content_type, headers = response
    return {
        "status": status,
        "body": base64.b64encode(body).decode(),
        "content_type": content_type.decode("latin-1"),
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers],
    }


def decode_response(data: dict[str, Any]) -> Response:
    return (
        int(data["status"]),
        base64.b64decode(data["body"]),
        str(data["content_type"]).encode("latin-1"),
        tuple((str(k).encode("latin-1"), str(v).encode("latin-1")) for k, v in data["headers"]),
    )


# What a forwarded approval answers if forwarding itself failed unexpectedly: IMDS's retryable error.
FORWARD_FAILED: Response = (500, b'{"error": "Internal server error. Retry the request."}', JSON, ())


async def settled(answer: Any) -> Response:
    """A handler's answer, once any delay it asked for has passed and any commit it waits for is durable."""
    if isinstance(answer, Later):
        await asyncio.sleep(answer.seconds)
        answer = answer.produce()
    if isinstance(answer, Deferred):
        done: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        answer.attach(done.set_result)
        return await done
    return answer


def metadata_surface(path: str) -> str:
    """The metadata surface a path belongs to, for the request counts."""
    if path[:9] == "/metadata":
        return "azure_imds"
    if path[:16] == "/computeMetadata":
        return "gce_metadata"
    return "ec2_imds"


class ReplicaMetadata:
    """The metadata handler of a shared process: a VM's approval at a replica goes to the leader."""

    def __init__(
        self,
        inner: Handler,
        service: SharedService,
        leaders: Leaders,
        imds_port: int,
        counts: dict[tuple[str, int], int],
        serves: Callable[[tuple[str, int], tuple[str, int]], bool] = lambda local, peer: True,
    ):
        self.inner = inner
        self.service = service
        self.leaders = leaders
        self.imds_port = imds_port
        self.counts = counts
        self.serves = serves  # whether the caller is served here (a machine on another host is not: --hosts)

    def handle(self, request: Request) -> Any:
        if (
            request.method == "POST"
            and self.service.role != LEADER
            and request.path == "/metadata/scheduledevents"
            and self.serves(request.local, request.peer)
        ):
            return self._forwarded(request)
        answer = self.inner(request)
        if type(answer) is tuple:  # the hot path: a dict update, no lock, no object
            key = (metadata_surface(request.path), answer[0])
            counts = self.counts
            counts[key] = counts.get(key, 0) + 1
            return answer
        if isinstance(answer, Later):
            surface = metadata_surface(request.path)
            return Later(answer.seconds, lambda: self._count(answer.produce(), surface))
        return answer  # a Deferred (a hanging GET, an approval awaiting its commit): not counted

    def _count(self, answer: Response | Deferred, surface: str) -> Response | Deferred:
        return answer if isinstance(answer, Deferred) else self._tally(answer, surface)

    def _tally(self, answer: Response, surface: str) -> Response:
        key = (surface, answer[0])
        self.counts[key] = self.counts.get(key, 0) + 1
        return answer

    def _forwarded(self, request: Request) -> Deferred:
        """The approval carried out by the leader; its answer when the leader's is in (a connection that closes
        first cancels the forwarding)."""
        task = asyncio.ensure_future(self._counted(self._forward(request), "azure_imds"))

        def forget(_: Deferred) -> None:
            task.cancel()

        answer = Deferred(on_cancel=forget)

        def done(finished: asyncio.Future[Response]) -> None:
            if finished.cancelled():
                return
            error = finished.exception()
            if error is not None:
                log.error("forwarding an approval to the leader failed", exc_info=error)
                answer.resolve(FORWARD_FAILED)
            else:
                answer.resolve(finished.result())

        task.add_done_callback(done)
        return answer

    async def _counted(self, answer: Awaitable[Response], surface: str) -> Response:
        return self._tally(await answer, surface)

    async def _forward(self, request: Request) -> Response:
        control = self.leaders.addresses.get("control")
        leader_imds = self.leaders.addresses.get("imds")
        if control is not None:
            port = int(leader_imds.rsplit(":", 1)[1]) if leader_imds else None
            try:
                answer = await self.leaders.client.post(
                    control + FORWARD_PATH,
                    json=encode_request(request, self.imds_port, port),
                    headers=self.leaders.auth(),
                )
                if answer.status_code == 200:
                    data = answer.json()
                    await self.leaders.caught_up(data.get("position"))
                    return decode_response(data)
                self.service.no_leader_reason = f"the leader answered {answer.status_code}"
            except (httpx.HTTPError, ValueError, KeyError) as error:
                self.service.no_leader_reason = f"the leader at {control} did not answer: {error or type(error)}"
        # NotLeader: the surface's own retryable answer (or, promoted meanwhile, the answer of this new leader)
        return await settled(self.inner(request))


async def read_body(receive: Callable[[], Awaitable[dict]], limit: int) -> tuple[bytes, list[dict]]:
    """The request body (up to ``limit`` bytes) and the messages read, to hand on to an app that reads them again."""
    messages: list[dict] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if not message.get("more_body") or size >= limit:
            break
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
    return body, messages


def replayed(messages: list[dict], receive: Callable[[], Awaitable[dict]]) -> Callable[[], Awaitable[dict]]:
    queue = list(messages)

    async def again() -> dict:
        if queue:
            return queue.pop(0)
        return await receive()

    return again


class ReplicaPort:
    """An ASGI port (control, ARM or EC2) of a shared process: writes at a replica go to the leader's same port."""

    def __init__(
        self, app: ASGIApp, service: SharedService, leaders: Leaders, surface: str, counts: dict[tuple[str, int], int]
    ):
        self.app = app
        self.service = service
        self.leaders = leaders
        self.surface = surface
        self.counts = counts

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                key = (self.surface, int(message["status"]))
                self.counts[key] = self.counts.get(key, 0) + 1
            await send(message)

        await self._serve(scope, receive, counted)

    async def _serve(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[..., Any]) -> None:
        if self.service.role == LEADER and any(name == FORWARDED for name, _ in scope["headers"]):
            await self.app(scope, receive, self._marked(send))
            return
        if self.service.role == LEADER or scope["method"] in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        body, messages = await read_body(receive, BODY_LIMIT)
        target = self.leaders.addresses.get(self.surface)
        if target is not None and len(body) < BODY_LIMIT:
            try:
                answer = await self._send(scope, target, body)
            except httpx.HTTPError as error:
                self.service.no_leader_reason = f"the leader at {target} did not answer: {error or type(error)}"
            else:
                await self.leaders.caught_up(answer.headers.get(POSITION.decode()))
                headers = [(k.lower(), v) for k, v in answer.headers.raw if k.lower() not in _HOP_BY_HOP]
                headers.append((b"content-length", str(len(answer.content)).encode()))
                await send({"type": "http.response.start", "status": answer.status_code, "headers": headers})
                await send({"type": "http.response.body", "body": answer.content})
                return
        await self.app(scope, replayed(messages, receive), send)

    def _marked(self, send: Callable[..., Any]) -> Callable[..., Any]:
        """The leader's answer to a forwarded write carries the position its state reached (after the commit: the
        command's changes were announced, and the position bumped, before the surface answers)."""

        async def marked(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.leaders.position_header()]}
            await send(message)

        return marked

    async def _send(self, scope: dict, target: str, body: bytes) -> httpx.Response:
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string") or b""
        url = target + path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        headers.append((FORWARDED, b"1"))
        return await self.leaders.client.request(scope["method"], url, headers=headers, content=body)


class SeenReporter:
    """At a replica: hands the leader, every ``SEEN_EVERY`` seconds, the scopes whose VMs asked this replica for their
    events (``--require-enabling``): the leader enables them and keeps their idle timers, as if the VMs had asked it.
    A report that does not reach a leader is kept for the next."""

    def __init__(self, service: SharedService, leaders: Leaders, every: float = SEEN_EVERY):
        self.service = service
        self.leaders = leaders
        self.every = every

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self.report()

    async def report(self) -> None:
        """One round: what was noted since the last, in parts of ``SEEN_PER_REPORT``; a part refused, and those after
        it, are noted again for the next round."""
        service = self.service
        if service.role == LEADER:
            service.seen_here.clear()
            return
        control = self.leaders.addresses.get("control")
        if not service.seen_here or control is None:
            return
        scopes, service.seen_here = sorted(service.seen_here), set()
        for start in range(0, len(scopes), SEEN_PER_REPORT):
            part = scopes[start : start + SEEN_PER_REPORT]
            try:
                answer = await self.leaders.client.post(
                    control + SEEN_PATH, json={"scopes": part}, headers=self.leaders.auth()
                )
                reported = answer.status_code == 200
            except httpx.HTTPError as error:
                log.warning("the scopes asked for here did not reach the leader at %s: %s", control, error)
                reported = False
            if not reported:
                service.seen_here.update(scopes[start:])
                return


class LeaderEndpoint:
    """On the control port of every shared process: ``POST /v1/replication/metadata`` (a replica's forwarded
    metadata write, answered by this process's metadata handler) and ``POST /v1/replication/seen`` (the scopes a
    replica's VMs asked for), both guarded by the control token since they act as any VM; and the probes and
    metrics (``/healthz``, ``/readyz``, ``/metrics``) answered by ``probes``."""

    def __init__(
        self,
        app: ASGIApp,
        metadata: Handler,
        token: str | None,
        probes: Callable[[str], tuple[int, bytes, bytes] | None],
        leaders: Leaders,
        service: SharedService,
    ):
        self.app = app
        self.metadata = metadata
        self.service = service
        self.token = token
        self.probes = probes
        self.position = lambda: leaders.position_header()[1]

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[..., Any]) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if scope["method"] == "GET" and path in ("/healthz", "/readyz", "/metrics"):
                if path == "/metrics" and not self._authorized(scope):  # the probes stay open, as /healthz is
                    await _answer(send, 401, b"application/json", UNAUTHORIZED)
                    return
                probe = self.probes(path)
                if probe is not None:
                    await _answer(send, *probe)
                    return
            elif scope["method"] == "POST" and path == FORWARD_PATH:
                await self._metadata(scope, receive, send)
                return
            elif scope["method"] == "POST" and path == SEEN_PATH:
                await self._seen(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _authorized(self, scope: dict) -> bool:
        if self.token is None:
            return True
        given = dict(scope["headers"]).get(b"authorization", b"")
        return hmac.compare_digest(given, f"Bearer {self.token}".encode())

    async def _admitted(self, scope: dict, send: Callable[..., Any]) -> bool:
        """Whether a replica's request may act as any VM; refused with its answer sent otherwise."""
        if not self._authorized(scope):
            await _answer(send, 401, b"application/json", UNAUTHORIZED)
            return False
        headers = dict(scope["headers"])
        # Never for a web page: a browser sends Origin with every cross-site or rebound POST, and a JSON content type
        # needs a preflight these endpoints never grant.
        if b"origin" in headers or headers.get(b"content-type", b"").split(b";")[0].strip() != b"application/json":
            await _answer(send, 403, b"application/json", b'{"error": {"code": "Forbidden"}}')
            return False
        return True

    async def _seen(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[..., Any]) -> None:
        if not await self._admitted(scope, send):
            return
        body, _ = await read_body(receive, 4 * BODY_LIMIT)
        try:
            scopes = json.loads(body)["scopes"]
            if not isinstance(scopes, list) or not all(isinstance(name, str) for name in scopes):
                raise TypeError("scopes is not a list of names")
        except (ValueError, KeyError, TypeError) as error:
            message = json.dumps({"error": {"code": "Invalid", "message": f"not a report of scopes: {error}"}})
            await _answer(send, 400, b"application/json", message.encode())
            return
        try:
            for commit in self.service.seen_at_replica(scopes):
                await commit  # durable before the replica is answered
        except Unavailable as error:  # not the leader (any more), or its database out of reach: the replica retries
            message = json.dumps({"error": {"code": "Unavailable", "message": str(error)}})
            await _answer(send, 503, b"application/json", message.encode())
            return
        answer = {"position": self.position().decode()}
        await _answer(send, 200, b"application/json", json.dumps(answer).encode())

    async def _metadata(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[..., Any]) -> None:
        if not await self._admitted(scope, send):
            return
        body, _ = await read_body(receive, 4 * BODY_LIMIT)
        try:
            request = decode_request(json.loads(body))
        except (ValueError, KeyError, TypeError, IndexError) as error:
            message = json.dumps({"error": {"code": "Invalid", "message": f"not a forwarded request: {error}"}})
            await _answer(send, 400, b"application/json", message.encode())
            return
        response = await settled(self.metadata(request))
        answer = {**encode_response(response), "position": self.position().decode()}
        await _answer(send, 200, b"application/json", json.dumps(answer).encode())


async def _answer(send: Callable[..., Any], status: int, content_type: bytes, body: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
