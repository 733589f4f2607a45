"""The Compute Engine metadata server (``/computeMetadata/v1/...``) for the simulated GCE instances.

A handler served by ``server/http1.py`` like the Azure and EC2 metadata surfaces: it resolves the caller, checks the
headers and returns the answer rendered once per (instance, path, query) since the instance's last change (dropped
once a change to the instance is committed, so a GET answers what the database holds without waiting for a group
commit under way; only a miss reads the engine). A GET with
``wait_for_change=true`` whose value has not changed (its ``last_etag`` is current, or none was given) is answered
later: it returns a :class:`~forewarn.net.http.Deferred` that this surface resolves when a committed change gives the
path another ETag, or when ``timeout_sec`` runs out on the engine's clock (a manual clock's step wakes it). A waiter
costs one small object and its connection; no thread and no task.

Wire rules (Google's pages "About VM metadata", "View and query VM metadata", "Query metadata server for maintenance
event notices", "Monitor and plan for a host maintenance event"; every choice is listed in docs/gcp.md):
``Metadata-Flavor: Google`` on every request and every answer; a request carrying ``X-Forwarded-For`` is refused;
values are ``application/text``, directory listings one entry a line (sub-directories end in ``/``), ``recursive=true``
gives JSON with camelCase keys, ``alt=json|text`` chooses; every answer has an ``ETag``.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import html
import itertools
import json
import logging
import weakref
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.core.bounds import iso_time
from forewarn.core.changes import Rebuilt, TimeMoved
from forewarn.gcp.changes import GceEventChanged, GceStateChanged
from forewarn.gcp.component import GcpComponent
from forewarn.gcp.model import GceInstance, GceMaintenance
from forewarn.net.browser_guard import Refusal
from forewarn.net.callers import CallerResolver, UnknownCaller
from forewarn.net.http import RENDERED_AS_LANDED, Deferred, Request, Response

log = logging.getLogger("forewarn.gcemetadata")

ROOT = "/computeMetadata/v1/"
TEXT = b"application/text"
JSON_TYPE = b"application/json"
HTML = b"text/html; charset=UTF-8"
FLAVOR = (b"metadata-flavor", b"Google")
SERVER = (b"server", b"Metadata Server for VM")
COMMON_HEADERS = (
    FLAVOR,
    (b"content-type-options", b"nosniff"),
    SERVER,
    (b"x-xss-protection", b"0"),
    (b"x-frame-options", b"SAMEORIGIN"),
)
# The longest wait forewarn holds a hanging GET for when no timeout_sec is given: our bound (docs/limits.md).
MAX_TIMEOUT = 3600 * 24
UNAVAILABLE = (503, b"Service Unavailable\n", TEXT, (FLAVOR, SERVER))
WAITERS_PER_INSTANCE = 1024
# Each service's metadata servers, so that the control API can say how many hanging GETs they hold (hanging_gets).
_SERVERS: weakref.WeakKeyDictionary[Maintenance, weakref.WeakSet[GceMetadata]] = weakref.WeakKeyDictionary()


def _error_page(status: int, title: str, message: str) -> bytes:
    """Google's error page, without its style sheet and logo (the lines clients and people read). ``message`` is
    HTML: whatever of the request it quotes must be escaped (a path with a script in it would run as the metadata
    server's own page)."""
    return (
        "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n"
        f"  <title>Error {status} ({title})!!1</title>\n"
        f"  <p><b>{status}.</b> <ins>That\u2019s an error.</ins>\n"
        f"  <p>{message} <ins>That\u2019s all we know.</ins>\n"
    ).encode()


def _refusal(status: int, title: str, message: str) -> Response:
    return (status, _error_page(status, title, message), HTML, (FLAVOR, SERVER))


def _forbidden(path: str, why: str) -> Response:
    return _refusal(
        403,
        "Forbidden",
        f"Your client does not have permission to get URL <code>{html.escape(path)}</code> from this server. "
        + html.escape(why),
    )


def not_found(path: str) -> Response:
    return _refusal(
        404, "Not Found", f"The requested URL <code>{html.escape(path)}</code> was not found on this server."
    )


def bad_request(why: str) -> Response:
    """A 400 in text; ``why`` quotes a query value, escaped like the HTML pages' quotes (a browser guessing the type
    of ``application/text`` must not find markup in it)."""
    return (400, html.escape(why).encode() + b"\n", TEXT, (FLAVOR, SERVER))


def browser_refusal(path: str, refusal: Refusal) -> Response:
    """What the metadata listener's guard refused (net/browser_guard.py): a 403 page, as for a request without
    ``Metadata-Flavor``."""
    return _forbidden(path, refusal.message)


def etag(body: bytes) -> bytes:
    """The ETag of an answer: a digest of its content, so an unchanged value keeps its ETag."""
    return hashlib.blake2b(body, digest_size=8).hexdigest().encode()


def camel(key: str) -> str:
    head, *rest = key.split("-")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


Tree = dict[str, Any]  # a directory: key -> sub-directory (dict) or value (str, int)


def hanging_gets(service: Maintenance) -> int:
    """The ``wait_for_change`` GETs the metadata servers of ``service`` hold now, unanswered."""
    return sum(server.waiting for server in _SERVERS.get(service, ()))


class Waiter:
    """A hanging GET: which instance and answer it waits on, the ETag it already has, and its simulated deadline."""

    __slots__ = ("deferred", "instance", "key", "last", "until")

    def __init__(
        self, deferred: Deferred, instance: str, key: tuple[str, str, str], last: bytes | None, until: datetime
    ):
        self.deferred = deferred
        self.instance = instance
        self.key = key
        self.last = last
        self.until = until


class GceMetadata:
    """The metadata server as a synchronous handler: :class:`Request` in, a Response or a Deferred out."""

    def __init__(
        self,
        service: Maintenance,
        resolver: CallerResolver,
        loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.get_running_loop,
    ):
        self.service = service
        self.resolver = resolver
        self._loop = loop
        self._answers: dict[str, dict[tuple[str, str, str], Response]] = {}
        # Whether each instance watches maintenance-event, as committed: asked on every GET of it, and dropped with
        # the instance's answers once the change that moves it is committed (read without waiting for a commit).
        self._watched: dict[str, bool] = {}
        self._waiters: dict[str, set[Waiter]] = {}
        self._timeouts: list[tuple[datetime, int, Waiter]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._by_deferred: dict[Deferred, Waiter] = {}
        self._inner: dict[Deferred, Deferred] = {}  # an answer that waited for a transaction: what it became
        self._gone = 0  # timeouts in the heap whose waiter went away (its client hung up)
        service.subscribe(self._on_change)
        _SERVERS.setdefault(service, weakref.WeakSet()).add(self)

    # ------------------------------------------------------------------------------------------ read model
    def _instance(self, name: str) -> GceInstance:
        """An instance of the fleet, which never changes: read without waiting for a group commit under way."""
        return self.service.in_memory(lambda engine: engine.component(GcpComponent).gce_instance(name))

    def _watches(self, name: str) -> bool:
        """Whether the instance asked for maintenance-event since its last maintenance, as committed."""
        found = self._watched.get(name)
        if found is None:
            found = self._watched[name] = self.service.settled_engine().component(GcpComponent).gce_states[name].watched
        return found

    def tree(self, instance: GceInstance) -> Tree:
        engine = self.service.settled_engine()
        state = engine.component(GcpComponent).gce_states[instance.name]
        project_number = str(int(hashlib.blake2b(instance.project.encode(), digest_size=5).hexdigest(), 16))
        node: Tree = {
            "hostname": f"{instance.name}.{instance.zone}.c.{instance.project}.internal",
            "id": int(instance.instance_id),
            "machine-type": f"projects/{project_number}/machineTypes/{instance.machine_type}",
            "maintenance-event": engine.component(GcpComponent).maintenance_event(instance.name),
            "name": instance.name,
            "preempted": "TRUE" if state.preempted else "FALSE",
            "scheduling": {
                "automatic-restart": "TRUE" if state.automatic_restart else "FALSE",
                "on-host-maintenance": state.on_host_maintenance.value,
                "preemptible": "TRUE" if instance.preemptible else "FALSE",
                "provisioning-model": instance.provisioning_model.value,
            },
            "zone": f"projects/{project_number}/zones/{instance.zone}",
        }
        upcoming = engine.component(GcpComponent).upcoming(instance.name)
        if upcoming is not None:
            node["upcoming-maintenance"] = upcoming_json(upcoming)
        if instance.interruptible and instance.termination_action is not None:
            node["scheduling"]["instance-termination-action"] = instance.termination_action.value
        return {
            "instance": dict(sorted(node.items())),
            "project": {"numeric-project-id": int(project_number), "project-id": instance.project},
        }

    def answer(self, instance: GceInstance, path: str, recursive: str, alt: str) -> Response:
        key = (path, recursive, alt)
        per_instance = self._answers.setdefault(instance.name, {})
        found = per_instance.get(key)
        if found is None:
            found = self._render(instance, path, recursive == "true", alt)
            if len(per_instance) < 256:
                per_instance[key] = found
        return found

    def _render(self, instance: GceInstance, path: str, recursive: bool, alt: str) -> Response:
        node: Any = self.tree(instance)
        relative = path[len(ROOT) :]
        parts = [part for part in relative.split("/") if part]
        for part in parts:
            if not isinstance(node, dict) or part not in node:
                return not_found(path)
            node = node[part]
        directory = isinstance(node, dict)
        if directory and relative and not relative.endswith("/"):
            return (301, b"", TEXT, ((b"location", (path + "/").encode()), *COMMON_HEADERS))
        if directory and recursive:
            if alt == "text":
                body = "".join(f"{key} {value}\n" for key, value in _flatten(node, "")).encode()
                content_type = TEXT
            else:
                body = json.dumps(_camel_tree(node), separators=(",", ":")).encode()
                content_type = JSON_TYPE
        elif directory:
            names = [f"{key}/" if isinstance(value, dict) else key for key, value in node.items()]
            if alt == "json":
                body, content_type = json.dumps(names, separators=(",", ":")).encode(), JSON_TYPE
            else:
                body, content_type = "".join(f"{name}\n" for name in names).encode(), TEXT
        else:
            text = str(node)
            if alt == "json":
                body, content_type = json.dumps(node if isinstance(node, int) else text).encode(), JSON_TYPE
            else:
                body, content_type = text.encode(), TEXT
        return (200, body, content_type, ((b"etag", etag(body)), *COMMON_HEADERS))

    def _on_change(self, changes) -> None:
        if isinstance(changes[0], Rebuilt):
            self._answers.clear()
            self._watched.clear()
            touched = set(self._waiters)
        else:
            touched = set()
            for change in changes:
                if isinstance(change, GceEventChanged):
                    touched.add(change.event.instance)
                elif isinstance(change, GceStateChanged):
                    touched.add(change.state.name)
            self._render_again(touched)
        for name in touched & self._waiters.keys():
            self._wake(name)
        if any(isinstance(change, TimeMoved) for change in changes) or isinstance(changes[0], Rebuilt):
            self._expire(self.service.now())

    def _render_again(self, touched: set[str]) -> None:
        """Drop what the instances a commit changed had kept, and render it again from the engine, which holds what
        was committed now (up to RENDERED_AS_LANDED instances; the others' are rendered when asked)."""
        kept: dict[str, list[tuple[str, str, str]]] = {}
        for name in touched:
            answers = self._answers.pop(name, None)
            watched = self._watched.pop(name, None)
            if (answers or watched is not None) and len(kept) < RENDERED_AS_LANDED:
                kept[name] = list(answers or ())
        for name, keys in kept.items():
            instance = self._instance(name)
            for key in keys:
                self.answer(instance, *key)
            self._watches(name)

    def _wake(self, name: str) -> None:
        instance = self._instance(name)
        for waiter in list(self._waiters.get(name, ())):
            answer = self.answer(instance, *waiter.key)
            if etag_of(answer) != waiter.last:
                self._finish(waiter, answer)

    def _finish(self, waiter: Waiter, answer: Response) -> None:
        waiters = self._waiters.get(waiter.instance)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[waiter.instance]
        self._by_deferred.pop(waiter.deferred, None)
        waiter.deferred.resolve(answer)

    def _expire(self, now: datetime) -> None:
        """Answer the waiters whose timeout_sec ran out (with the value as it is)."""
        heap = self._timeouts
        while heap and (heap[0][0] <= now or heap[0][2].deferred.done):
            _, _, waiter = heapq.heappop(heap)
            if not waiter.deferred.done:
                instance = self._instance(waiter.instance)
                self._finish(waiter, self.answer(instance, *waiter.key))
        self._arm_timer()

    def _arm_timer(self) -> None:
        """Real clocks: one timer, at the wall time of the earliest timeout (a manual clock's steps expire them)."""
        if not self._timeouts:
            return
        when = self.service.clock.wall_when(self._timeouts[0][0])
        if when is None or when == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = self._loop()
        self._timer_at = when
        self._timer = loop.call_later(max(when - self.service.wall(), 0.0) + 0.001, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        self._timer_at = None
        self._expire(self.service.now())

    @property
    def waiting(self) -> int:
        return sum(len(waiters) for waiters in self._waiters.values())

    # ------------------------------------------------------------------------------------------- requests
    # ---------------------------------------------------------------- one of the listener's surfaces (cloud.py)
    def claims(self, path: str) -> bool:
        return path.startswith("/computeMetadata")

    def refuse(self, path: str, refusal: Refusal) -> Response:
        return browser_refusal(path, refusal)

    def serve(self, request: Request) -> Response | Deferred:
        """``handle``, with a read that meets the engine waiting to be rebuilt from a database out of reach
        (app/runtime.py) answered as a retryable 503 with the server's headers."""
        try:
            return self.handle(request)
        except Unavailable as error:
            log.error("%s %s: %s", request.method, request.path, error)
            return (503, b"Service Unavailable\n", b"text/plain", (FLAVOR, SERVER))

    def handle(self, request: Request) -> Response | Deferred:
        path = request.path
        refused = header_refusal(request)
        if refused is not None:
            return refused
        try:
            instance = self._caller(request)
        except UnknownCaller:
            return not_found(path)
        if instance is None:
            return not_found(path)
        query = dict(parse_qsl(request.query.decode("latin-1"), keep_blank_values=True))
        recursive, alt, refused = _options(query)
        if refused is not None:
            return refused
        service = self.service
        if service.wall() >= service.due_wall:
            try:
                service.catch_up()
            except Unavailable as error:
                log.error("applying a due deadline failed: %s", error)
        if self._reads_engine(instance.name, (path, recursive, alt)):
            # To be read from the engine, which a transaction under way may hold ahead of the database: this answer
            # waits for it to land, not the event loop with every other request.
            later = Deferred(on_cancel=self._cancel_inner)
            if service.after_landing(lambda: self._answer_later(later, request)):
                return later
        if path.endswith("/maintenance-event") and not self._watches(instance.name):
            return self._once_watched(request, instance, query, (path, recursive, alt))
        return self._answered(request, instance, query, (path, recursive, alt))

    def _reads_engine(self, name: str, key: tuple) -> bool:
        """Whether answering reads the engine: the answer is not kept, or (maintenance-event) whether the instance
        watches it is not."""
        if key[0].endswith("/maintenance-event") and name not in self._watched:
            return True
        answers = self._answers.get(name)
        return answers is None or key not in answers

    def _answer_later(self, later: Deferred, request: Request) -> None:
        if later.done:  # the client closed its connection meanwhile
            return
        then = self.serve(request)
        if isinstance(then, Deferred):  # a hanging GET, a watch to commit, or another transaction under way
            self._inner[later] = then
            then.attach(lambda response: self._resolve_later(later, response))
        else:
            later.resolve(then)

    def _resolve_later(self, later: Deferred, response: Response) -> None:
        self._inner.pop(later, None)
        later.resolve(response)

    def _cancel_inner(self, later: Deferred) -> None:
        inner = self._inner.pop(later, None)
        if inner is not None:
            inner.cancel()

    def _once_watched(self, request: Request, instance: GceInstance, query: dict, key: tuple) -> Deferred:
        """The instance's first read of maintenance-event since its last maintenance, answered once the watch it
        starts is durable (the group commit: off the event loop, committed before answered)."""
        name = instance.name
        committed = self.service.perform_soon(lambda engine: engine.component(GcpComponent).watch(name))
        held: list[Deferred] = []  # the hanging GET the answer turned into, if it did

        def closed(_: Deferred) -> None:
            for deferred in held:
                deferred.cancel()

        answer = Deferred(on_cancel=closed)

        def watched(done: asyncio.Future) -> None:
            if answer.done:  # the client closed its connection meanwhile
                return
            try:
                error = done.exception() if not done.cancelled() else Unavailable("the server is stopping")
                if error is not None:
                    raise error
                then = self._answered(request, instance, query, key)
            except Exception as failed:  # not watched (Unavailable: nothing changed), or a defect: the client retries
                defect = None if isinstance(failed, Unavailable) else failed
                log.error("%s %s: %s", request.method, request.path, failed, exc_info=defect)
                then = UNAVAILABLE
            if isinstance(then, Deferred):
                held.append(then)
                then.attach(answer.resolve)
            else:
                answer.resolve(then)

        committed.add_done_callback(watched)
        return answer

    def _answered(self, request: Request, instance: GceInstance, query: dict, key: tuple) -> Response | Deferred:
        """The answer to ``key`` (path, recursive, alt), now, or once it changes (``wait_for_change``)."""
        service = self.service
        name = instance.name
        path, recursive, alt = key
        answer = self.answer(instance, path, recursive, alt)
        if query.get("wait_for_change", "false").lower() != "true" or answer[0] != 200:
            return answer if request.method == "GET" else (answer[0], b"", answer[2], answer[3])
        last = query.get("last_etag")
        if last is not None and last.encode() != etag_of(answer):
            return answer
        timeout = query.get("timeout_sec")
        seconds = MAX_TIMEOUT
        if timeout is not None:
            if not timeout.isdigit() or int(timeout) < 1:
                return bad_request(f"Invalid value for timeout_sec: {timeout}")
            seconds = min(int(timeout), MAX_TIMEOUT)
        waiters = self._waiters.setdefault(name, set())
        if len(waiters) >= WAITERS_PER_INSTANCE:
            return (429, b"Too many requests\n", TEXT, (FLAVOR, SERVER))
        deferred = Deferred(on_cancel=self._forget)
        waiter = Waiter(deferred, name, key, etag_of(answer), service.now() + timedelta(seconds=seconds))
        waiters.add(waiter)
        self._by_deferred[deferred] = waiter
        heapq.heappush(self._timeouts, (waiter.until, next(self._order), waiter))
        self._arm_timer()
        return deferred

    def read(self, name: str, target: str) -> Response:
        """The answer a plain GET of ``target`` (a path, with ``recursive`` and ``alt`` if it has a query) with
        ``Metadata-Flavor: Google`` gets from instance ``name`` now: the control API's view of it. Unlike the
        instance's own read, it does not count as the instance asking for maintenance-event, and never waits."""
        instance = self._instance(name)
        path, _, query_text = target.partition("?")
        if not path.startswith(ROOT):
            return _outside_root(path)
        recursive, alt, refused = _options(dict(parse_qsl(query_text, keep_blank_values=True)))
        if refused is not None:
            return refused
        return self.answer(instance, path, recursive, alt)

    def _forget(self, deferred: Deferred) -> None:
        # A client that gives up and asks again (gcp-metadata does, every 3 s outside Google Cloud) leaves its old
        # timeout in the heap: drop them once they are most of it, so the heap follows the waiters, not the retries.
        self._gone += 1
        if self._gone > 1024 and self._gone * 2 > len(self._timeouts):
            self._timeouts = [entry for entry in self._timeouts if not entry[2].deferred.done]
            heapq.heapify(self._timeouts)
            self._gone = 0
        waiter = self._by_deferred.pop(deferred, None)
        if waiter is not None:
            waiters = self._waiters.get(waiter.instance)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[waiter.instance]

    def _caller(self, request: Request) -> GceInstance | None:
        machine = self.resolver.resolve(request.local, request.peer)
        return machine if machine.__class__ is GceInstance else None  # type: ignore[return-value]


def header_refusal(request: Request) -> Response | None:
    """The answer the metadata server gives a request before looking at its instance (a proxied request, a path
    outside ``/computeMetadata/v1/``, a missing ``Metadata-Flavor: Google``, a method other than GET and HEAD), or
    None. The replay of a recording (``forewarn replay``) applies the same rules."""
    path = request.path
    flavors: list[bytes] = []
    legacies: list[bytes] = []
    for header, value in request.headers:
        if header == b"metadata-flavor":
            flavors.append(value)
        elif header == b"x-google-metadata-request":
            legacies.append(value)
        elif header == b"x-forwarded-for":
            return _forbidden(path, "Request had an X-Forwarded-For header, so it may come from a proxy.")
    if not path.startswith(ROOT):
        return _outside_root(path)
    # A header given twice is ambiguous (which one a proxy on the way kept is anyone's guess): it counts as none.
    flavor = flavors[0] if len(flavors) == 1 else None
    legacy = legacies[0] if len(legacies) == 1 else None
    if flavor != b"Google" and (legacy is None or legacy.lower() != b"true"):
        return _forbidden(path, "Missing Metadata-Flavor:Google header.")
    if request.method not in ("GET", "HEAD"):
        return (405, b"Method not allowed\n", TEXT, ((b"allow", b"GET, HEAD"), FLAVOR, SERVER))
    return None


def _outside_root(path: str) -> Response:
    if path in ("/computeMetadata/", "/computeMetadata"):
        return (200, b"v1/\n", TEXT, COMMON_HEADERS)
    return not_found(path)  # the legacy v1beta1 and 0.1 endpoints are turned off, as on Compute Engine now


def _options(query: dict[str, str]) -> tuple[str, str, Response | None]:
    """``recursive`` and ``alt`` of a query, lowercased, and the 400 a bad one gets (None when both are good)."""
    recursive = query.get("recursive", "false").lower()
    alt = query.get("alt", "").lower()
    refused = None
    if alt not in ("", "json", "text"):
        refused = bad_request(f"Invalid value for alt: {query.get('alt')}")
    elif recursive not in ("true", "false", ""):
        refused = bad_request(f"Invalid value for recursive: {query.get('recursive')}")
    return recursive, alt, refused


def etag_of(answer: Response) -> bytes | None:
    for name, value in answer[3]:
        if name == b"etag":
            return value
    return None


def upcoming_json(event: GceMaintenance) -> str:
    """The ``upcoming-maintenance`` value ("Monitor and plan for a host maintenance event"): snake_case keys."""
    return json.dumps(
        {
            "can_reschedule": event.can_reschedule,
            "latest_window_start_time": iso_time(event.latest_window_start),
            "maintenance_status": "ONGOING" if event.started_at is not None else "PENDING",
            "type": event.maintenance_type.value,
            "window_end_time": iso_time(event.window_end),
            "window_start_time": iso_time(event.window_start),
        },
        separators=(",", ":"),
    )


def _flatten(node: Tree, prefix: str):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}/")
        else:
            yield f"{prefix}{key}", value


def _camel_tree(node: Tree) -> Tree:
    return {camel(key): _camel_tree(value) if isinstance(value, dict) else value for key, value in node.items()}
