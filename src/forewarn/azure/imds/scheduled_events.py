"""Azure Instance Metadata Service: ``/metadata/scheduledevents``, ``/metadata/instance``, ``/metadata/versions``.

A synchronous handler served by ``server/http1.py``, because a GET is the hot path: it resolves the caller's scope,
checks headers and api-version, and returns a response rendered once per (scope, DocumentIncarnation, api-version).
Rendering happens on the first read after a change; nothing is encoded or queried per request.

Wire rules (Microsoft's "Azure Metadata Service: Scheduled Events for Windows VMs" and "Azure Instance Metadata
Service"): field order as IMDS sends it, NotBefore in RFC 1123 GMT and ``""`` once Started, uppercase EventIds, fields
and event types gated by api-version, ``Metadata: true`` required, ``X-Forwarded-For`` and duplicate query parameters
refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from email.utils import format_datetime
from typing import Any
from urllib.parse import parse_qsl

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.changes import IncarnationChanged, VmChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.imds import instance as azure_instance
from forewarn.azure.imds.errors import (
    DUPLICATE_PARAMETER,
    FAULT_BODIES,
    FORWARDED_REFUSED,
    METHOD_NOT_ALLOWED,
    MISSING_METADATA_HEADER,
    NOT_FOUND,
    SERVICE_ERROR,
    TOO_MANY_REQUESTS,
    bad_api_version,
    error_body,
)
from forewarn.azure.model import Event, EventStatus, EventType
from forewarn.azure.rules import AzureRules
from forewarn.azure.vms import VM, Power
from forewarn.core.changes import Change, Rebuilt
from forewarn.core.errors import Invalid, NotFound
from forewarn.engine.engine import Engine
from forewarn.net.browser_guard import Refusal
from forewarn.net.callers import CallerResolver, UnknownCaller
from forewarn.net.http import DROP, JSON, RENDERED_AS_LANDED, Deferred, Later, Request, Response
from forewarn.net.untrusted_json import JsonInputError, parse_json

log = logging.getLogger("forewarn.imds")

# Scheduled events have their own api-version set, separate from the instance endpoint's (azure-docs#46856).
SCHEDULED_EVENTS_VERSIONS = (
    "2017-03-01",
    "2017-08-01",
    "2017-11-01",
    "2019-01-01",
    "2019-04-01",
    "2019-08-01",
    "2020-07-01",
)
PREVIEW_VERSION = "2017-03-01"
# Which versions scheduledevents lists in its error is not documented; its three newest is our assumption.
NEWEST_SCHEDULED_EVENTS_VERSIONS = ["2020-07-01", "2019-08-01", "2019-04-01"]

# Event types and fields by the version that introduced them (001 release notes).
TYPE_SINCE = {EventType.PREEMPT: "2017-11-01", EventType.TERMINATE: "2019-01-01"}
DESCRIPTION_SINCE = "2019-04-01"
EVENT_SOURCE_SINCE = "2019-08-01"
DURATION_SINCE = "2020-07-01"


BAD_START_REQUESTS = error_body(
    'Bad request. The body must be JSON of the form {"StartRequests": [{"EventId": "<EventId>"}]}'
)


@dataclass(frozen=True)
class ImdsSettings:
    """How closely the endpoint behaves like the real one. See PROFILES for the named sets."""

    # What a POST naming an EventId this VM cannot see gets: "reject" (400, nothing approved) or "accept" (200).
    unknown_event_ids: str = "reject"
    # Lenient: no Metadata header needed, a missing or unknown api-version means the newest, X-Forwarded-For and
    # duplicate parameters pass (what Microsoft's mock server accepts).
    lenient: bool = False
    # Requests per second per VM before 429 (real IMDS: about 5); 0 for no limit.
    rate_limit: float = 0.0
    # Wall seconds the request that enables Scheduled Events for a scope waits (real: "up to two minutes").
    first_call_delay: float = 0.0
    # "answer": a VM that is down (rebooting, redeploying, reimaging, deleted) still gets answers; "drop": its
    # connections are dropped unanswered, as a real VM that is down cannot ask.
    while_down: str = "answer"


PROFILES = {
    "lenient": ImdsSettings(unknown_event_ids="accept", lenient=True),
    "strict": ImdsSettings(),
    "realistic": ImdsSettings(rate_limit=5.0, first_call_delay=60.0, while_down="drop"),
}
# The realistic profile also makes the engine require enabling (a scope's first request); see Rules.


@dataclass
class Fault:
    """An injected failure: the VMs named (all when empty) get ``status`` (410, 429 or 500) for ``requests``
    requests or until ``until`` (simulated time), whichever ends first; or their answers wait ``delay`` seconds."""

    fault_id: int
    status: int
    vms: frozenset[str]
    requests: int | None
    until: datetime | None
    delay: float = 0.0

    def applies(self, vm: str, now: datetime) -> bool:
        if self.vms and vm not in self.vms:
            return False
        if self.until is not None and now >= self.until:
            return False
        return self.requests is None or self.requests > 0


# A frozen VM is paused for seconds; it is not down. Every other state but running is.
_ANSWERING = (Power.RUNNING, Power.FROZEN)


class _TokenBucket:
    __slots__ = ("tokens", "stamp")

    def __init__(self, capacity: float, now: float):
        self.tokens = capacity
        self.stamp = now


# A request's query parameters (or the error body refusing them), the error body of the common checks (or None) and
# its If-None-Match values.
_Admission = tuple[dict | bytes, bytes | None, tuple[bytes, ...]]
# Distinct (query, headers) pairs whose admission is kept; more are checked afresh each time.
KNOWN_ADMISSIONS = 4096


def _json(status: int, body: bytes, *extra: tuple[bytes, bytes]) -> Response:
    return (status, body, JSON, extra)


ALLOW_GET_POST = (b"allow", b"GET, POST")
_OK_EMPTY = _json(200, b"")
ALLOW_GET = (b"allow", b"GET")


class _Refused(Exception):
    """Raised by the common checks; carries the 400 that answers the request."""

    def __init__(self, response: Response):
        self.response = response


class AzureImds:
    """The Azure metadata endpoints as a synchronous handler: :class:`Request` in, :data:`Response` out."""

    def __init__(self, service: Maintenance, resolver: CallerResolver, settings: ImdsSettings = ImdsSettings()):
        self.service = service
        self.resolver = resolver
        self.settings = settings
        # Whether every request passes _gate (settings do not change while serving; faults are checked apart).
        self._gated = settings.while_down == "drop" or settings.rate_limit > 0
        self._rules = service.rules
        self._azure_rules = self._rules.of(AzureRules)  # the Azure part of _rules, found once per rules
        self._documents: dict[str, dict[str, Response]] = {}
        self._empty_documents: dict[int, dict[str, Response]] = {}  # by DocumentIncarnation
        self._instance_answers: dict[tuple, Response] = {}
        self._queries: dict[bytes, dict | bytes] = {}
        self._admissions: dict[tuple, _Admission] = {}
        self._buckets: dict[str, _TokenBucket] = {}
        self._powers: dict[str, Power] = {}  # each VM's committed power state, asked of every request with while_down
        self.faults: list[Fault] = []
        self._next_fault = 1
        service.subscribe(self._on_change)
        # The scopes whose VMs asked a follower for their events: the leader enables them, as if asked here.
        service.on_reads_relayed(lambda scopes: azure_commands.seen_in(scopes, service))

    # ------------------------------------------------------------------------------------------ read model
    def _on_change(self, changes) -> None:
        if isinstance(changes[0], Rebuilt):  # the service rebuilt its engine: forget everything
            self._documents.clear()
            self._empty_documents.clear()
            self._powers.clear()
            return
        kept: dict[str, list[str]] = {}  # the scopes whose documents were kept, with the versions asked
        for change in changes:
            if isinstance(change, IncarnationChanged):
                dropped = self._documents.pop(change.scope, None)
                if dropped and len(kept) < RENDERED_AS_LANDED:
                    kept[change.scope] = list(dropped)
            elif isinstance(change, VmChanged):
                self._powers[change.state.name] = change.state.power  # as committed: this is the commit's news
        for scope, versions in kept.items():
            for version in versions:
                self._rendered(scope, version)

    def _power(self, name: str) -> Power:
        """The VM's power state as committed: kept until a change to the VM is announced (after its commit), so a
        request does not wait for a group commit under way (a miss does, once)."""
        power = self._powers.get(name)
        if power is None:
            power = self._powers[name] = self.service.settled_engine().component(AzureComponent).vm_states.power(name)
        return power

    def _cached(self, scope: str, version: str) -> bool:
        per_scope = self._documents.get(scope)
        return per_scope is not None and version in per_scope

    def _rendered(self, scope: str, version: str) -> Response:
        """The 200 response for a scope's document: rendered, with its ETag, once per change of the scope.

        The scopes with no live event (most of a large fleet, most of the time) share their responses by
        DocumentIncarnation: all of them at incarnation 1 hold one dict of responses, rendered once per api-version."""
        per_scope = self._documents.get(scope)
        if per_scope is not None:
            found = per_scope.get(version)
            if found is not None:
                # Cached documents are dropped only once the change that moved them is committed: this one is
                # what the database holds, even while a group commit is under way (reading the engine would wait
                # for that commit, and hold every request on the loop behind its fsync).
                return found
        engine = self.service.settled_engine()
        if per_scope is None:
            if engine.component(AzureComponent).live_events(scope):
                per_scope = {}
            else:
                per_scope = self._empty_documents.setdefault(engine.component(AzureComponent).incarnation(scope), {})
            self._documents[scope] = per_scope
        found = per_scope.get(version)
        if found is None:
            body = render_document(
                engine.component(AzureComponent).incarnation(scope),
                engine.component(AzureComponent).live_events(scope),
                version,
            )
            etag = b'"' + hashlib.blake2b(body, digest_size=8).hexdigest().encode() + b'"'
            found = _json(200, body, (b"etag", etag))
            per_scope[version] = found
        return found

    def document(self, scope: str, version: str) -> bytes:
        """The bytes of a scope's document for an api-version, as a VM of that scope gets them."""
        return self._rendered(scope, version)[1]

    def document_with_etag(self, scope: str, version: str) -> tuple[bytes, str]:
        """The document's bytes and the ETag header a VM of that scope gets with them."""
        response = self._rendered(scope, version)
        return response[1], dict(response[3])[b"etag"].decode()

    # ------------------------------------------------------------------------------------------- requests
    # ---------------------------------------------------------------- one of the listener's surfaces (cloud.py)
    def claims(self, path: str) -> bool:
        return path.startswith("/metadata")

    def refuse(self, path: str, refusal: Refusal) -> Response:
        return browser_refusal(refusal)

    def handle(self, request: Request) -> Response | Later | Deferred:
        path = request.path
        try:
            if path == "/metadata/scheduledevents":
                return self._scheduled_events(request)
            if path == "/metadata/instance" or path.startswith("/metadata/instance/"):
                return self._instance_metadata(request)
            if path == "/metadata/versions":
                return self._versions(request)
            return _json(404, NOT_FOUND)
        except _Refused as refused:
            return refused.response
        except Unavailable as error:
            # Nothing was changed (the service rebuilt its engine from the database). Real IMDS answers its own
            # failures with 500, which clients retry.
            log.error("%s %s: %s", request.method, path, error)
            return _json(500, SERVICE_ERROR)

    serve = handle  # IMDS answers Unavailable in its own shape itself

    def _query(self, raw: bytes) -> dict | bytes:
        """The query parameters, or an error body; cached, since clients repeat the same query every second."""
        found = self._queries.get(raw)
        if found is None:
            found = parse_query(raw, allow_duplicates=self.settings.lenient)
            if len(self._queries) < 4096:
                self._queries[raw] = found
        return found

    def _admission(self, request: Request, versions, newest) -> _Admission:
        """The common checks of every IMDS request and its If-None-Match values: functions of its query and headers
        alone, so kept for the ones an agent sends again and again (a few hundred bytes each, at most
        :data:`KNOWN_ADMISSIONS` of them)."""
        key = (versions, request.query, request.headers)
        found = self._admissions.get(key)
        if found is None:
            query = self._query(request.query)
            refused = None
            if not self.settings.lenient:
                refused = refusal(request, query, versions, newest)
            elif versions is not None and isinstance(query, dict) and query.get("api-version") not in versions:
                newest_version = versions[-1] if versions is SCHEDULED_EVENTS_VERSIONS else versions[0]
                query = {**query, "api-version": newest_version}  # lenient: missing or unknown means the newest
            if_none_match = tuple(value for name, value in request.headers if name == b"if-none-match")
            found = (query, refused, if_none_match)
            size = len(request.query) + sum(len(name) + len(value) for name, value in request.headers)
            if len(self._admissions) < KNOWN_ADMISSIONS and size <= 2048:
                self._admissions[key] = found
        return found

    def _admit(self, request: Request, versions, newest) -> tuple[VM, dict, tuple[bytes, ...]]:
        """The caller's VM, the query parameters and the If-None-Match values; raises :class:`_Refused` with the 400
        that refuses them."""
        found = self._admissions.get((versions, request.query, request.headers))
        query, refused, if_none_match = found if found is not None else self._admission(request, versions, newest)
        if refused is not None:
            raise _Refused(_json(400, refused))
        assert isinstance(query, dict)  # a query that did not parse is refused above
        try:
            vm = self.resolver.resolve(request.local, request.peer)
        except UnknownCaller as error:
            raise _Refused(_json(400, error_body(f"Bad request. {error}"))) from None
        if not isinstance(vm, VM):  # an EC2 instance: Azure's paths do not exist on its metadata service
            raise _Refused(_json(404, NOT_FOUND))
        if self._gated or self.faults:
            self._gate(vm)
        return vm, query, if_none_match

    def _gate(self, vm: VM) -> None:
        """What stands between a VM and its answer beyond the request itself: the VM being down, the rate limit,
        injected faults. Raises :class:`_Refused` with the answer (or the dropped connection)."""
        settings = self.settings
        if settings.while_down == "drop" and self._power(vm.name) not in _ANSWERING:
            raise _Refused((DROP, b"", JSON, ()))
        if settings.rate_limit > 0:
            now = time.monotonic()
            bucket = self._buckets.get(vm.name)
            if bucket is None:
                bucket = self._buckets[vm.name] = _TokenBucket(settings.rate_limit, now)
            bucket.tokens = min(settings.rate_limit, bucket.tokens + (now - bucket.stamp) * settings.rate_limit)
            bucket.stamp = now
            if bucket.tokens < 1:
                raise _Refused(_json(429, TOO_MANY_REQUESTS))
            bucket.tokens -= 1
        if self.faults:
            fault = self._take_fault(vm, failing=True)
            if fault is not None:
                raise _Refused(_json(fault.status, FAULT_BODIES[fault.status]))

    def delay_for(self, vm: VM) -> float:
        """Injected latency for this VM's next answer, in wall seconds."""
        fault = self._take_fault(vm, failing=False) if self.faults else None
        return 0.0 if fault is None else fault.delay

    def _take_fault(self, vm: VM, failing: bool) -> Fault | None:
        """The first fault of the kind asked (failing, or slowing) that applies to this request; it counts it."""
        now = self.service.now()
        found = None
        for fault in self.faults:
            if bool(fault.status) == failing and fault.applies(vm.name, now):
                found = fault
                break
        if found is not None and found.requests is not None:
            found.requests -= 1
        self.faults = [f for f in self.faults if f.requests != 0 and (f.until is None or now < f.until)]
        return found

    # --------------------------------------------------------------------------------------- fault injection
    def inject(self, status: int, vms: list[str], requests: int | None, until: datetime | None, delay: float) -> Fault:
        for name in vms:
            azure_fleet(self.service.settled_engine().fleet).vm(name)  # unknown names are refused
        if status not in (0, 410, 429, 500):
            raise Invalid(f"faults answer 410, 429 or 500 (or 0 with a delay), not {status}")
        if status == 0 and delay <= 0:
            raise Invalid("a fault needs a status or a delay")
        if requests is not None and requests < 1:
            raise Invalid("requests must be at least 1")
        fault = Fault(self._next_fault, status, frozenset(vms), requests, until, delay)
        self._next_fault += 1
        self.faults.append(fault)
        log.info("fault %s injected: %s", fault.fault_id, fault)
        return fault

    def clear_faults(self) -> int:
        count, self.faults = len(self.faults), []
        return count

    def _scheduled_events(self, request: Request) -> Response | Later | Deferred:
        method = request.method
        if method != "GET" and method != "POST":
            return _json(405, METHOD_NOT_ALLOWED, ALLOW_GET_POST)
        vm, query, if_none_match = self._admit(request, SCHEDULED_EVENTS_VERSIONS, NEWEST_SCHEDULED_EVENTS_VERSIONS)
        rules = self.service.rules
        if rules is not self._rules:  # the engine was rebuilt, or its rules replaced
            self._rules, self._azure_rules = rules, rules.of(AzureRules)
        enabling = None
        if self._azure_rules.enabling_required:
            # The idle timer lives in memory (nothing commits it): read it without waiting for a commit under way.
            first_call = not self.service.in_memory(
                lambda engine: engine.component(AzureComponent).is_enabled(vm.scope)
            )
            enabling = azure_commands.request_seen(self.service, vm.scope)
            delay = self.settings.first_call_delay if first_call else 0.0
        else:
            delay = 0.0
        if self.faults:
            delay += self.delay_for(vm)
        if delay > 0:
            return self._later(delay, vm, query, request, if_none_match, enabling)
        if enabling is not None:
            return self._once_enabled(enabling, vm, query, request, if_none_match)
        return self._scheduled_events_answer(vm, query, request, if_none_match)

    def _later(
        self,
        delay: float,
        vm: VM,
        query: dict,
        request: Request,
        if_none_match: tuple[bytes, ...],
        enabling: asyncio.Future | None,
    ) -> Later:
        # Apart from _scheduled_events: a lambda there would make its variables cells, on every request.
        if enabling is not None:
            return Later(delay, lambda: self._once_enabled(enabling, vm, query, request, if_none_match))
        return Later(delay, lambda: self._scheduled_events_answer(vm, query, request, if_none_match))

    def _once_enabled(
        self, enabling: asyncio.Future, vm: VM, query: dict, request: Request, if_none_match: tuple[bytes, ...]
    ) -> Response | Deferred:
        """The answer once the enabling of the scope this read made is durable (the group commit, off the event
        loop); a POST's approval then waits for its own commit too."""
        if enabling.done():
            return self._enabled_answer(enabling, vm, query, request, if_none_match)
        answer = Deferred()

        def enabled(done: asyncio.Future) -> None:
            then = self._enabled_answer(done, vm, query, request, if_none_match)
            if isinstance(then, Deferred):  # an approval, waiting for its commit
                then.attach(answer.resolve)
            else:
                answer.resolve(then)

        enabling.add_done_callback(enabled)
        return answer

    def _enabled_answer(
        self, enabling: asyncio.Future, vm: VM, query: dict, request: Request, if_none_match: tuple[bytes, ...]
    ) -> Response | Deferred:
        error = enabling.exception() if not enabling.cancelled() else Unavailable("the server is stopping")
        try:
            if error is not None:
                raise error
            return self._scheduled_events_answer(vm, query, request, if_none_match)
        except Exception as failed:  # nothing was enabled (Unavailable), or a defect: the VM asks again, as after a 500
            defect = None if isinstance(failed, Unavailable) else failed
            log.error("%s %s: %s", request.method, request.path, failed, exc_info=defect)
            return _json(500, SERVICE_ERROR)

    def _scheduled_events_answer(
        self, vm: VM, query: dict, request: Request, if_none_match: tuple[bytes, ...]
    ) -> Response | Deferred:
        if request.method == "POST":
            return self._approve(vm, request.body)
        service = self.service
        if service.wall() >= service.due_wall:
            try:
                service.catch_up()
            except Unavailable as error:  # serve the last committed document; the timer retries the deadline
                log.error("applying a due deadline failed: %s", error)
        if not self._cached(vm.scope, query["api-version"]):
            # To be rendered from the engine, which a transaction under way may hold ahead of the database: this
            # answer waits for it to land, not the event loop with every other request.
            answer = Deferred()
            if service.after_landing(lambda: self._answer_later(answer, vm, query, request, if_none_match)):
                return answer
        response = self._rendered(vm.scope, query["api-version"])
        for value in if_none_match:
            etag = response[3][0][1]
            if value.strip() == b"*" or etag in (tag.strip().removeprefix(b"W/") for tag in value.split(b",")):
                return (304, b"", JSON, response[3])
        return response

    def _answer_later(
        self, answer: Deferred, vm: VM, query: dict, request: Request, if_none_match: tuple[bytes, ...]
    ) -> None:
        try:
            then = self._scheduled_events_answer(vm, query, request, if_none_match)
        except Unavailable as error:  # as handle answers it
            log.error("%s %s: %s", request.method, request.path, error)
            then = _json(500, SERVICE_ERROR)
        if isinstance(then, Deferred):  # another transaction under way by now
            then.attach(answer.resolve)
        else:
            answer.resolve(then)

    def _approve(self, vm, body: bytes) -> Response | Deferred:
        event_ids = parse_start_requests(body)
        if event_ids is None:
            return _json(400, BAD_START_REQUESTS)
        reject = self.settings.unknown_event_ids == "reject"

        # Both run when the group runs, on the engine as committed so far (and as the commands before this one in the
        # group left it), not on one whose transaction is still under way.
        def approve(engine: Engine) -> list[Change]:
            return engine.component(AzureComponent).approve_from(vm.scope, event_ids, vm.name, reject)

        def check(engine: Engine) -> None:
            engine.component(AzureComponent).check_approve_from(vm.scope, event_ids, reject)

        # Committed with the other approvals that arrive while the transaction before theirs is under way, in one
        # transaction; answered once it is durable (Maintenance.perform_soon).
        committed = self.service.perform_soon(approve, check)
        answer = Deferred()

        def answered(done: asyncio.Future) -> None:
            error = done.exception()
            if error is None:
                answer.resolve(_OK_EMPTY)
            elif isinstance(error, NotFound):  # not this VM's event (or it vanished before the group ran)
                log.info("%s asked to start events: refused: %s", vm.name, error)
                answer.resolve(_json(400, error_body(f"Bad request. {error}")))
            else:
                # Unavailable (the commit failed; the engine was rebuilt from what was committed) or a defect: the
                # approval did not happen, and the VM may ask again.
                defect = None if isinstance(error, Unavailable) else error
                log.error("%s approving %s: %s", vm.name, ", ".join(event_ids), error, exc_info=defect)
                answer.resolve(_json(500, SERVICE_ERROR))

        committed.add_done_callback(answered)
        return answer

    def _instance_metadata(self, request: Request) -> Response | Later:
        if request.method != "GET":
            return _json(405, METHOD_NOT_ALLOWED, ALLOW_GET)
        versions = azure_instance.INSTANCE_API_VERSIONS
        vm, query, _ = self._admit(request, versions, list(versions[:3]))
        extended = query.get("extended")
        key = (
            vm.name,
            query["api-version"],
            request.path,
            query.get("format"),
            extended is not None and extended.lower() == "true",
        )
        found = self._instance_answers.get(key)
        if found is None:
            status, body, content_type = azure_instance.answer(
                vm, key[1], key[2][len("/metadata/instance") :], key[3], key[4]
            )
            found = (status, body, content_type, ())
            if len(self._instance_answers) < 65536:
                self._instance_answers[key] = found
        delay = self.delay_for(vm)
        return Later(delay, lambda: found) if delay > 0 else found

    def _versions(self, request: Request) -> Response:
        if request.method != "GET":
            return _json(405, METHOD_NOT_ALLOWED, ALLOW_GET)
        refused = self._admission(request, None, None)[1]
        if refused is not None:
            return _json(400, refused)
        return _json(200, json.dumps(azure_instance.versions_document()).encode())


# ------------------------------------------------------------------------------------------- request checks
def parse_query(raw: bytes, allow_duplicates: bool = False) -> dict | bytes:
    """The query parameters of a request, or the error body refusing duplicate names."""
    pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names) and not allow_duplicates:
        return DUPLICATE_PARAMETER
    return dict(pairs)


def refusal(request: Request, query: dict | bytes, versions, newest) -> bytes | None:
    """Real IMDS's checks of a request, in this order: X-Forwarded-For, duplicate query parameters, the Metadata
    header, the api-version (``versions`` None: none needed). The error body to send, or None."""
    metadata = None
    for key, value in request.headers:
        if key == b"x-forwarded-for":
            return FORWARDED_REFUSED
        if key == b"metadata":
            # Given twice, the header is ambiguous (which one a proxy on the way kept is anyone's guess): none.
            metadata = value if metadata is None else b""
    if isinstance(query, bytes):
        return query
    version = query.get("api-version")
    # The 2017-03-01 preview did not enforce the header; 2017-08-01 enforced it for every request.
    preview = version == PREVIEW_VERSION and versions is SCHEDULED_EVENTS_VERSIONS
    if (metadata is None or metadata.lower() != b"true") and not preview:
        return MISSING_METADATA_HEADER
    if versions is not None and version not in versions:
        return bad_api_version(newest)
    return None


def browser_refusal(refusal: Refusal) -> Response:
    """What the metadata listener's guard refused (net/browser_guard.py), as IMDS refuses a request it will not
    serve, such as one with X-Forwarded-For: 400 and an error body."""
    return _json(400, error_body(f"Bad request. {refusal.message}"))


# ----------------------------------------------------------------------------------------------- wire format
def not_before_text(event: Event) -> str:
    """RFC 1123 in GMT while Scheduled (``Mon, 20 Apr 2026 22:26:58 GMT``); empty once Started."""
    if event.status is EventStatus.SCHEDULED:
        return format_datetime(event.not_before, usegmt=True)
    return ""


def render_document(incarnation: int, events: list[Event], version: str) -> bytes:
    rendered = []
    for event in events:
        since = TYPE_SINCE.get(event.event_type)
        if since is not None and version < since:
            continue  # e.g. Terminate does not exist for 2017-08-01 clients (drainsafe#4)
        resources = list(event.resources)
        if version == PREVIEW_VERSION:
            resources = ["_" + name for name in resources]  # dropped in 2017-08-01
        item: dict[str, Any] = {
            "EventId": event.event_id,
            "EventStatus": event.status.value,
            "EventType": event.event_type.value,
            "ResourceType": "VirtualMachine",
            "Resources": resources,
            "NotBefore": not_before_text(event),
        }
        if version >= DESCRIPTION_SINCE:
            item["Description"] = event.description
        if version >= EVENT_SOURCE_SINCE:
            item["EventSource"] = event.source.value
        if version >= DURATION_SINCE:
            item["DurationInSeconds"] = event.duration_seconds
        rendered.append(item)
    return json.dumps({"DocumentIncarnation": incarnation, "Events": rendered}, separators=(",", ":")).encode()


def parse_start_requests(body: bytes | None) -> list[str] | None:
    """The EventIds of a ``{"StartRequests": [{"EventId": ...}]}`` body (uppercased), or None when malformed."""
    if not body:
        return None
    try:
        data = parse_json(body)
    except JsonInputError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("StartRequests"), list):
        return None
    event_ids = []
    for item in data["StartRequests"]:
        if not isinstance(item, dict) or not isinstance(item.get("EventId"), str) or not item["EventId"].strip():
            return None
        event_ids.append(item["EventId"].strip().upper())
    return event_ids
