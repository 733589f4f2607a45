"""Azure Resource Graph on the ARM port: ``POST /providers/Microsoft.ResourceGraph/resources`` over the
``maintenanceresources`` table ("Scheduled Events in Event Grid"; Microsoft's "Scheduled Events Using Azure Resource
Graph").

The table is a read model of the engine: one row per scheduled event published centrally (``Event.central``), at its
latest status, upserted as each change is committed and rebuilt from the engine's events when the server starts. The
query engine is ``forewarn.azure.resource_graph`` (KQL through duckdb-kql).

What is ours, where ARG is not documented: retention (``--resource-graph-retention``, default 30 days after an
event's last change; live events are always kept), the quota (15 queries per 5 s per caller, the documented example),
and the row a principal may see: one whose subscription it may read scheduled events in.

Queries run on worker threads, never on the event loop the metadata endpoints, the control API and the ARM port
share: a self-join can run for its whole timeout, and every IMDS GET waited with it. Each query reads one snapshot
of the table through its own DuckDB cursor (DuckDB MVCC); at most ``max_concurrent_queries`` run at once, and one
more is answered ARG's throttling 429 at once rather than queued.

Writes stay off the loop too: the rows of a commit are made on the loop (they read the engine), then upserted in
order by one writer thread, because DuckDB takes about a quarter of a second to upsert ten thousand rows (a wave's
start) and every metadata GET would wait that long. A query first waits for the writes queued before it arrived, so
a caller still reads its own committed changes (with ``delay`` 0).

Memory is bounded by DuckDB for the rows and all queries together (``memory_limit``): a query that needs more is
refused, and a write that meets the bound while queries hold it is tried again until they have ended. An answer is
bounded in rows (1,000 a page) and in bytes (``max_response_bytes``, facets included).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from starlette.responses import Response

from forewarn.app.runtime import Maintenance
from forewarn.azure.arm.router import ManagementCall
from forewarn.azure.arm.wire import ArmError, method_not_allowed, parse_body, read_body, well_formed_api_version
from forewarn.azure.changes import EventChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.imds.scheduled_events import not_before_text
from forewarn.azure.model import Event
from forewarn.azure.resource_graph.request import (
    MAX_RESPONSE_BYTES,
    QueryLimits,
    QueryRequest,
    ResourceGraphError,
    response_too_large,
)
from forewarn.azure.resource_graph.rows import scheduled_event_row
from forewarn.core.changes import Rebuilt, Reset
from forewarn.engine.engine import Engine

if TYPE_CHECKING:
    from forewarn.azure.resource_graph.table import MaintenanceTable

log = logging.getLogger("forewarn.events")

READ_ROWS = "Microsoft.ResourceGraph/resources/read"
READ_EVENTS = "Microsoft.Maintenance/scheduledevents/read"


@dataclass(frozen=True)
class ResourceGraphSettings:
    retention: timedelta = timedelta(days=30)
    # Reference 4.1: "you should see the updated results within 5 minutes in general". 0: rows change at once; more
    # lets a controller be tested against rows that lag the events (simulated time).
    delay: timedelta = timedelta(0)
    quota: int = 15  # queries per window and caller (the example of Resource Graph's "Guidance for throttled requests")
    quota_window: float = 5.0  # wall seconds
    tenant_id: str = "72f988bf-86f1-41af-91ab-2d7cd011db47"  # any GUID; rows carry it as tenantId
    query_timeout: float = 30.0  # wall seconds a query (with its facets, each) may run before QueryTimeout
    max_concurrent_queries: int = 4  # running at once on worker threads; one more is answered 429
    limits: QueryLimits = QueryLimits()  # join, mv-expand and union legs per query (ARG's defaults)
    # DuckDB's memory_limit, for the rows and every query together (--resource-graph-memory). 2 GiB: the million
    # rows of bench/resource_graph_query.py take 1.1 GiB, and its queries (the documented ones among them) all run over
    # them within the rest; what a query needs beyond is refused with QueryMemoryLimitExceeded, never spilled to disk.
    memory_limit: int = 2 * 1024**3
    max_response_bytes: int = MAX_RESPONSE_BYTES  # a whole answer, facets included: beyond, ResponsePayloadTooLarge


@dataclass
class PendingUpsert:
    """Rows queued for one upsert on the writer thread, which later rows of the same time may join until it starts."""

    rows: list[dict]
    changed_at: datetime


class ResourceGraphApi:
    def __init__(self, service: Maintenance, settings: ResourceGraphSettings = ResourceGraphSettings()):
        self.service = service
        self.settings = settings
        self._table: MaintenanceTable | None = None  # made (DuckDB loaded) at start or first use
        self._quota: dict[str, list[float]] = {}
        self._quota_lock = threading.Lock()
        self._purged_at: datetime | None = None
        self._lagging: list[tuple[datetime, int, dict]] = []  # rows not visible yet, by when they will be
        self._lagging_order = 0
        self._slots = threading.BoundedSemaphore(settings.max_concurrent_queries)
        self._table_lock = threading.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="resource-graph-writer")
        self._written: Future | None = None  # the last write queued: a query waits for it
        self._joinable: PendingUpsert | None = None  # the last write queued, while it is an upsert not yet started
        self._joinable_lock = threading.Lock()
        if service.settled_engine().component(AzureComponent).policies.any_published_centrally():
            self._table_made_now()
        self._load(service.settled_engine())
        service.subscribe(self._on_change)

    # ----------------------------------------------------------------------------------------------- read model
    @property
    def table(self) -> MaintenanceTable:
        with self._table_lock:
            if self._table is None:
                from forewarn.azure.resource_graph.table import MaintenanceTable

                self._table = MaintenanceTable(self.settings.memory_limit)
            return self._table

    def _table_made_now(self) -> None:
        """The table made now, as the server starts, when its fleet publishes centrally: DuckDB's import holds the
        interpreter (a C extension's set-up, 34 ms) and the table's making 15 ms more, and made by the writer's first
        row they held every metadata GET that long. A fleet that publishes nothing centrally still loads DuckDB only
        with its first central event or query. Without the extra, its first use says so, as before."""
        with contextlib.suppress(ImportError):
            self.table  # noqa: B018 (made by the property)

    def _write(self, work, *args) -> None:
        """``work(*args)`` on the writer thread, after every write queued before it."""
        with self._joinable_lock:
            self._joinable = None  # an upsert queued after this write must not join one queued before it
            self._written = self._writer.submit(_logged, self._with_room, work, *args)

    def _upsert_soon(self, rows: list[dict], changed_at: datetime) -> None:
        """``rows`` upserted on the writer thread, joined to the upsert queued last if it has not started and has the
        same time. Each write holds the interpreter for part of its DuckDB statements (a few rows: 6 ms and more,
        whatever their number), and with it every metadata GET: a schedule's commands, a clock move's parts, each
        made its own while the writer was busy with the one before."""
        with self._joinable_lock:
            joinable = self._joinable
            if joinable is not None and joinable.changed_at == changed_at:
                joinable.rows.extend(rows)
                return
            pending = self._joinable = PendingUpsert(rows, changed_at)
            self._written = self._writer.submit(_logged, self._with_room, self._take_upsert, pending)

    def _take_upsert(self, pending: PendingUpsert) -> None:
        with self._joinable_lock:
            if self._joinable is pending:
                self._joinable = None  # started: what comes next is written after it
        self._upsert(pending.rows, pending.changed_at)

    def _with_room(self, work, *args) -> None:
        """``work(*args)``, tried again while DuckDB has no room for it: the memory bound is shared with the
        queries, and one that filled it is refused and frees it, at the latest at its timeout. Rows are never
        dropped because a query was heavy when they were written; a table that does not fit at all is logged."""
        give_up = time.monotonic() + self.settings.query_timeout + 5
        pause = 0.05
        while True:
            try:
                return work(*args)
            except MemoryError:
                if time.monotonic() + pause > give_up:
                    raise
                log.info("Resource Graph: no room for a write while queries hold the memory bound; trying again")
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _upsert(self, rows: list[dict], changed_at: datetime) -> None:
        self.table.upsert(rows, changed_at)

    def _replace_table(self, rows: list[dict], changed_at: datetime) -> None:
        with self._table_lock:
            self._table = None  # a reset removes events (an upsert alone would keep their rows); made again on use
        if rows:
            self._upsert(rows, changed_at)

    def _remove_older_than(self, cutoff: datetime) -> None:
        self.table.remove_older_than(cutoff)

    def _row(self, engine: Engine, event: Event) -> dict:
        vm = azure_fleet(engine.fleet).vms[event.resources[0]]
        return scheduled_event_row(
            event_id=event.event_id,
            status=event.status.value,
            event_type=event.event_type.value,
            source=event.source.value,
            not_before=not_before_text(event),
            duration_seconds=event.duration_seconds,
            description=event.description,
            resources=event.resources,
            subscription_id=vm.subscription_id,
            resource_group=vm.resource_group,
            location=vm.location,
            target_resource_id=vm.owner_resource_id,
            tenant_id=self.settings.tenant_id,
            zones=[vm.zone] if vm.zone else None,
        )

    def row_of(self, event_id: str) -> dict | None:
        """The maintenanceresources row of an event as it is now (None: the event is not published centrally). A
        query sees it once the configured lag is over."""
        engine = self.service.settled_engine()
        event = engine.component(AzureComponent).find(event_id)
        return None if event is None or not event.central else self._row(engine, event)

    def _load(self, engine: Engine) -> None:
        """Every central event as it is now (at start, or after the service rebuilt its engine): no lag. The events
        memory holds are taken here; those that ended are read from the database on the writer thread, before any
        write queued after this one (at a million VMs that read is seconds, which the event loop must not wait for)."""
        self._lagging.clear()
        component = engine.component(AzureComponent)
        self._write(self._load_rows, engine, component, list(component.events.values()), engine.now)

    def _load_rows(self, engine: Engine, component: AzureComponent, held: list[Event], now: datetime) -> None:
        rows = [self._row(engine, event) for event in component.all_events(held) if event.central]
        if rows or self._table is not None:
            self._replace_table(rows, now)

    def written(self) -> None:
        """Returns once every write queued so far is done (a query waits so by itself)."""
        written = self._written
        if written is not None:
            written.result()

    def _on_change(self, changes) -> None:
        engine = self.service.settled_engine()
        if isinstance(changes[0], Rebuilt):
            # the service rebuilt its engine from the database (or was reset): what it holds is the truth
            self._purged_at = None  # a reset moves the clock back
            if isinstance(changes[0], Reset):  # and gives every caller a full quota, as a fresh server does
                with self._quota_lock:
                    self._quota.clear()
            self._load(engine)
            return
        latest = {c.event.event_id: c.event for c in changes if isinstance(c, EventChanged) and c.event.central}
        if not latest:
            return
        rows = [self._row(engine, event) for event in latest.values()]
        if not self.settings.delay:
            self._upsert_soon(rows, engine.now)
            return
        for row in rows:
            self._lagging_order += 1
            heapq.heappush(self._lagging, (engine.now + self.settings.delay, self._lagging_order, row))

    def _catch_up(self, now: datetime) -> None:
        """Rows whose lag is over become visible, in the order their changes happened."""
        due = []
        while self._lagging and self._lagging[0][0] <= now:
            due.append(heapq.heappop(self._lagging)[2])
        if due:
            self._upsert_soon(due, now)

    # ------------------------------------------------------------------------------------------------- requests
    async def handle(self, call: ManagementCall) -> Response:
        lower = call.lower
        if lower not in (["providers", "microsoft.resourcegraph", "resources"],):
            raise ArmError(404, "NotFound", f"No Microsoft.ResourceGraph route matches {call.request.url.path!r}.")
        if call.method != "POST":
            raise method_not_allowed(call.method)
        well_formed_api_version(call.request)
        remaining, resets = self._spend_quota(call)
        headers = {"x-ms-user-quota-remaining": str(max(remaining, 0)), "x-ms-user-quota-resets-after": resets}
        if remaining < 0:
            response = ArmError(
                429,
                "RateLimiting",
                "Please provide below info when asking for support: too many requests; retry after the quota resets.",
            ).response()
            response.headers.update(headers)
            return response
        request, facets = _query_request(await read_body(call.request), self.service.now())
        allowed = within = None
        if call.principal is not None:
            principal = call.principal
            if not principal.scopes_for(READ_ROWS):  # may query Resource Graph nowhere
                raise ArmError(
                    403,
                    "AuthorizationFailed",
                    f"The client '{principal.name}' with object id '{principal.object_id}' does not have "
                    f"authorization to perform action '{READ_ROWS}'.",
                )
            # Rows under the scopes where the principal may read scheduled events, and nothing else.
            scopes = principal.scopes_for(READ_EVENTS)
            if "/" not in scopes:
                allowed = {scope.split("/")[2] for scope in scopes if scope.startswith("/subscriptions/")}
                within = scopes
        # Lagging rows and retention are writes: queued behind the upserts of changes, before this query runs.
        self._catch_up(self.service.now())
        self._purge()
        written = self._written
        if not self._slots.acquire(blocking=False):
            response = ArmError(
                429,
                "RateLimiting",
                "Please provide below info when asking for support: too many "
                f"queries are running ({self.settings.max_concurrent_queries}); retry in a moment.",
            ).response()
            response.headers.update({**headers, "retry-after": "1"})
            return response
        status, content = await _off_the_loop(
            self._slots.release, self._answer, written, request, facets, allowed, within
        )
        return Response(content, status_code=status, media_type="application/json; charset=utf-8", headers=headers)

    def _answer(
        self, written: Future | None, request: QueryRequest, facets: list[Facet], allowed, within
    ) -> tuple[int, bytes]:
        """The query and its facets, as the response's status and bytes, once ``written`` (the last write queued
        before the query arrived) is done. Runs on a worker thread."""
        if written is not None:
            written.result()
        limit = self.settings.max_response_bytes
        try:
            body = self._run(request, allowed, within, limit)
            left = limit - len(_encoded(body))
            for facet in facets:  # each may take what the answer so far left of the bound
                body["facets"].append(self._facet(request, facet, allowed, within, max(left, 0)))
                left -= len(_encoded(body["facets"][-1]))
            content = _encoded(body)
            if len(content) > limit:
                raise response_too_large(limit)
        except ResourceGraphError as error:
            return error.status, _encoded(error.body())
        return 200, content

    def _run(self, request: QueryRequest, allowed, within, max_bytes: int) -> dict:
        from forewarn.azure.resource_graph.query import run_query

        return run_query(
            self.table,
            request,
            allowed,
            timeout_seconds=self.settings.query_timeout,
            within=within,
            limits=self.settings.limits,
            max_bytes=max_bytes,
        )

    def _facet(self, request: QueryRequest, facet: Facet, allowed, within, max_bytes: int) -> dict:
        """A facet is the query's result counted by one expression (the Resource Graph REST API's facets):
        ``query | summarize count()
        by EXPRESSION``, filtered, sorted and cut to ``$top``. A facet that cannot be computed is a FacetError,
        and the query's own answer still stands."""
        kql = request.query
        if facet.filter:
            kql += f" | where {facet.filter}"
        sort_by = "count_" if facet.sort_by == "count" else facet.sort_by  # summarize count() names it count_
        kql += f" | summarize count() by {facet.expression} | order by {sort_by} {facet.sort_order}"
        try:
            counted = self._run(
                replace(request, query=kql, top=facet.top, skip=None, skip_token=None, result_format="objectArray"),
                allowed,
                within,
                max_bytes,
            )
        except ResourceGraphError as error:
            detail = error.details[-1] if error.details else {"code": error.code, "message": error.message}
            return {
                "expression": facet.expression,
                "resultType": "FacetError",
                "errors": [{"code": detail["code"], "message": detail["message"]}],
            }
        data = [{("count" if key == "count_" else key): value for key, value in row.items()} for row in counted["data"]]
        return {
            "expression": facet.expression,
            "resultType": "FacetResult",
            "totalRecords": counted["totalRecords"],
            "count": counted["count"],
            "data": data,
        }

    def _spend_quota(self, call: ManagementCall) -> tuple[int, str]:
        """Remaining queries of the caller's window (-1: over it) and when the window resets, as ``hh:mm:ss``."""
        who = (
            call.principal.object_id
            if call.principal
            else (call.request.client.host if call.request.client else "anonymous")
        )
        now = time.monotonic()
        window = self.settings.quota_window
        with self._quota_lock:
            recent = [moment for moment in self._quota.get(who, []) if now - moment < window]
            recent.append(now)
            self._quota[who] = recent
        left = self.settings.quota - len(recent)
        resets = max(0, int(window - (now - recent[0]) + 0.999))
        return left, f"{resets // 3600:02d}:{resets % 3600 // 60:02d}:{resets % 60:02d}"

    def _purge(self) -> None:
        """Retention, applied at most once per simulated hour (a delete walks the table)."""
        now = self.service.now()
        if self._purged_at is not None and now - self._purged_at < timedelta(hours=1):
            return
        self._purged_at = now
        self._write(self._remove_older_than, now - self.settings.retention)


async def _off_the_loop(finished, work, *args):
    """``work(*args)`` on a thread of its own, awaited; ``finished()`` runs on that thread when it ends.

    A daemon thread rather than an executor's: a query still running at shutdown must not hold the process up until
    its timeout, and one whose caller went away still ends (and frees its slot) at its timeout."""
    loop = asyncio.get_running_loop()
    outcome = loop.create_future()

    def settle(method, value) -> None:
        if not outcome.done():
            method(value)

    def run() -> None:
        try:
            result = work(*args)
        except BaseException as error:  # handed to the awaiting request, which answers it in ARM's shape
            deliver = (outcome.set_exception, error)
        else:
            deliver = (outcome.set_result, result)
        finally:
            finished()
        try:
            loop.call_soon_threadsafe(settle, *deliver)
        except RuntimeError:  # the loop closed: the server is stopping and nobody awaits the answer
            pass

    threading.Thread(target=run, name="resource-graph-query", daemon=True).start()
    return await outcome


def _logged(work, *args) -> None:
    """A failed write is said in the log; the writes after it still run, and the next rebuild makes the table anew."""
    try:
        work(*args)
    except MemoryError as error:
        log.error("Resource Graph: the maintenanceresources rows do not fit in --resource-graph-memory: %s", error)
    except Exception:
        log.exception("Resource Graph: a write to the maintenanceresources table failed")


def _encoded(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Facet:
    expression: str
    sort_by: str = "count"
    sort_order: str = "desc"
    filter: str | None = None
    top: int = 10


def _facets(raw) -> list[Facet]:
    """ARG's facet requests: ``[{"expression", "options": {"sortBy", "sortOrder", "filter", "$top"}}]``."""
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > 10:
        raise ArmError(400, "BadRequest", "'facets' must be a list of at most 10 facet requests.")
    found = []
    for item in raw:
        options = item.get("options") or {} if isinstance(item, dict) else None
        expression = item.get("expression") if isinstance(item, dict) else None
        if not isinstance(expression, str) or not expression.strip() or not isinstance(options, dict):
            raise ArmError(
                400,
                "BadRequest",
                "A facet needs an 'expression' (a column of the query's result) and optional 'options'.",
            )
        sort_by = options.get("sortBy", "count")
        sort_order = options.get("sortOrder", "desc")
        top = options.get("$top", 10)
        filter_ = options.get("filter")
        if (
            not isinstance(sort_by, str)
            or sort_order not in ("asc", "desc")
            or not isinstance(top, int)
            or isinstance(top, bool)
            or not 1 <= top <= 1000
            or (filter_ is not None and not isinstance(filter_, str))
        ):
            raise ArmError(
                400,
                "BadRequest",
                "Facet options: sortBy a column or 'count', sortOrder 'asc' or 'desc', "
                "$top 1 to 1000, filter a KQL predicate.",
            )
        found.append(Facet(expression.strip(), sort_by, sort_order, filter_, top))
    return found


def _query_request(raw: bytes, now: datetime) -> tuple[QueryRequest, list[Facet]]:
    body = parse_body(raw) if raw.strip() else None
    if not isinstance(body, dict):
        raise ArmError(400, "InvalidRequestContent", "The request content must be a JSON object.")
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ArmError(400, "BadRequest", "The request must contain a non-empty 'query'.")
    subscriptions = body.get("subscriptions")
    if subscriptions is not None and (
        not isinstance(subscriptions, list) or not all(isinstance(item, str) for item in subscriptions)
    ):
        raise ArmError(400, "BadRequest", "'subscriptions' must be a list of subscription ids.")
    if body.get("managementGroups"):
        raise ArmError(400, "BadRequest", "forewarn has no management groups; query by subscriptions.")
    facets = _facets(body.get("facets"))
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise ArmError(400, "BadRequest", "'options' must be a JSON object.")
    return QueryRequest(
        query=query,
        subscriptions=subscriptions,
        top=options.get("$top"),
        skip=options.get("$skip"),
        skip_token=options.get("$skipToken"),
        result_format=options.get("resultFormat", "objectArray"),
        now=now,
    ), facets
