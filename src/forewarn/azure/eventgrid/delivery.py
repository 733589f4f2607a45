"""Delivering queued Event Grid events to webhooks, as Event Grid does (Microsoft's "Event Grid message delivery and
retry" and "Webhook event delivery"): the
sending policy the outbox sender (app/outbox.py) uses for deliveries of kind ``eventgrid``.

- Headers: ``aeg-event-type: Notification``, ``aeg-subscription-name`` in upper case, ``aeg-delivery-count`` from 0,
  ``aeg-data-version`` and ``aeg-metadata-version`` (for CloudEvents: "" and the spec version, plus ``Origin``), and
  the subscription's custom delivery attributes. Event Grid schema bodies are always a JSON array; a CloudEvent goes
  alone as ``application/cloudevents+json``, a batch as ``application/cloudevents-batch+json``.
- Batching (``maxEventsPerBatch`` > 1): the due events of a subscription, up to the count and (except for a single
  event) ``preferredBatchSizeInKilobytes``, without waiting for more; a batch succeeds or fails as a unit.
- Requests to one subscription go out concurrently, up to ``concurrent_requests`` at a time (Event Grid gives no
  order guarantee), and their outcomes are recorded in groups of up to ``outcomes_per_commit`` per store
  transaction, each outcome with the engine time its answer came. An outcome not yet committed when the process dies
  leaves its delivery due, so it is sent again: at least once, never lost.
- Success is 200-204 only. Codes in the non-retried set dead-letter at once; anything else is retried after 10 s,
  30 s, 1 m, 5 m, 10 m, 30 m, 1 h, 3 h, 6 h, then every 12 h, plus up to 10 % deterministic jitter, and at least
  5 m after a 404, 2 m after a 408 and 30 s after a 503. ``maxDeliveryAttempts`` ends it; so does the time to live,
  checked when the next attempt falls due (so expiry is seen late, as in Azure).
- Dead letters are written after a delay (5 minutes of engine time by default) as JSON arrays under
  ``{dir}/{container}/{SUBSCRIPTION-NAME}/{Y}/{M}/{D}/{H}/{guid}.json`` (UTC, not zero padded), the original event
  plus ``deadLetterReason``, ``deliveryAttempts``, ``lastDeliveryOutcome``, ``lastHttpStatusCode``, ``publishTime`` and
  ``lastDeliveryAttemptTime`` (lower case for CloudEvents). Without a dead-letter destination the event is dropped.

Every time is the engine clock's, so a manual clock walks a day of retries as fast as it is advanced.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from forewarn.app.runtime import Maintenance
from forewarn.azure.eventgrid.events import CLOUD_EVENTS_SPEC_VERSION, METADATA_VERSION, event_time
from forewarn.azure.eventgrid.filters import MISSING, lookup
from forewarn.azure.eventgrid.model import AWAITING_MANUAL_ACTION, CLOUD_EVENT_SCHEMA, FAILED, EventSubscription
from forewarn.azure.eventgrid.registry import EventGridRegistry
from forewarn.azure.eventgrid.settings import EventGridSettings
from forewarn.core.ids import derived_guid
from forewarn.net.outbound import NoAnswer, Outbound
from forewarn.net.own_listeners import Destination, OwnListeners, SelfTarget
from forewarn.store import Attempt, Delivery, SQLStore

log = logging.getLogger("forewarn.azure.eventgrid")

KIND = "eventgrid"
ORIGIN = "eventgrid.azure.net"
RETRY_SCHEDULE = (
    timedelta(seconds=10),
    timedelta(seconds=30),
    timedelta(minutes=1),
    timedelta(minutes=5),
    timedelta(minutes=10),
    timedelta(minutes=30),
    timedelta(hours=1),
    timedelta(hours=3),
    timedelta(hours=6),
)
LATER_RETRIES = timedelta(hours=12)
MINIMUM_RETRY = {404: timedelta(minutes=5), 408: timedelta(minutes=2), 503: timedelta(seconds=30)}
MAX_ATTEMPTS_REASON = "MaxDeliveryAttemptsExceeded"  # the documented reason ("Event Grid message delivery and retry")
# While a subscription awaits its manual validation, its queued events wait this long between checks.
AWAITING_RECHECK = timedelta(seconds=10)
# A dead letter that cannot be written (the directory is not writable) is retried this often, for this long, as Event
# Grid gives an unavailable dead-letter destination 4 hours ("Event Grid message delivery and retry").
DEAD_LETTER_RETRY = timedelta(minutes=1)
DEAD_LETTER_GIVE_UP = timedelta(hours=4)

# .NET's HttpStatusCode names, which Event Grid's messages and reasons use ("UndeliverableDueToHttpBadRequest",
# "response code Unknown").
STATUS_NAMES = {
    400: "BadRequest",
    401: "Unauthorized",
    402: "PaymentRequired",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    408: "RequestTimeout",
    409: "Conflict",
    410: "Gone",
    411: "LengthRequired",
    412: "PreconditionFailed",
    413: "RequestEntityTooLarge",
    414: "RequestUriTooLong",
    415: "UnsupportedMediaType",
    422: "UnprocessableEntity",
    429: "TooManyRequests",
    500: "InternalServerError",
    501: "NotImplemented",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "GatewayTimeout",
    505: "HttpVersionNotSupported",
}
# lastDeliveryOutcome, from the documented list ("Event Grid message delivery and retry"); the mapping of codes is ours.
OUTCOMES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    408: "TimedOut",
    413: "PayloadTooLarge",
    429: "Busy",
    500: "Busy",
    502: "Busy",
    503: "Busy",
    504: "Busy",
}


def status_name(code: int) -> str:
    return STATUS_NAMES.get(code, str(code))


def retry_delay(failed_attempts: int, status: int | None, jitter_key: str) -> timedelta:
    """How long after the ``failed_attempts``-th failed attempt the next one is made."""
    base = RETRY_SCHEDULE[failed_attempts - 1] if failed_attempts <= len(RETRY_SCHEDULE) else LATER_RETRIES
    base = max(base, MINIMUM_RETRY.get(status or 0, timedelta(0)))
    draw = int.from_bytes(hashlib.blake2b(f"{jitter_key}:{failed_attempts}".encode(), digest_size=2).digest(), "big")
    return base * (1 + (draw / 65535) / 10)


@dataclass(frozen=True)
class Outcome:
    """What one request came to."""

    delivered: bool
    status: int | None  # the HTTP status, None when no answer came
    outcome: str  # lastDeliveryOutcome
    error: str  # for the log and the delivery's last_error


def batches(deliveries: list[Delivery], max_events: int, preferred_kb: int) -> list[list[Delivery]]:
    """Due deliveries of one subscription in requests: one each, or batches up to ``max_events`` and roughly
    ``preferred_kb`` (an event larger than that still goes, alone). Deliveries with different attempt counts go in
    different requests, so that ``aeg-delivery-count`` is true for each."""
    if max_events <= 1:
        return [[delivery] for delivery in deliveries]
    limit = preferred_kb * 1024
    groups: dict[int, list[list[Delivery]]] = {}
    sizes: dict[int, int] = {}  # bytes in the open run of each attempt count
    for delivery in deliveries:
        runs = groups.setdefault(delivery.attempts, [[]])
        size = len(delivery.payload.encode()) + 1  # with its comma
        if runs[-1] and (len(runs[-1]) >= max_events or sizes[delivery.attempts] + size > limit):
            runs.append([])
            sizes[delivery.attempts] = 0
        runs[-1].append(delivery)
        sizes[delivery.attempts] = sizes.get(delivery.attempts, 0) + size
    return [run for runs in groups.values() for run in runs if run]


class EventGridDelivery:
    """The ``eventgrid`` sending policy. ``deliver`` is given the due deliveries of one event subscription."""

    kind = KIND

    def __init__(self, service: Maintenance, registry: EventGridRegistry, settings: EventGridSettings):
        self.service = service  # its clock, store and seed
        self.registry = registry
        self.settings = settings
        self.own: OwnListeners | None = None  # this server's listeners: never a destination (EventGrid.keep_away_from)

    @property
    def store(self) -> SQLStore:
        return self.service.store

    async def _record(self, attempts: list[Attempt]) -> None:
        """Outcomes recorded off the event loop: the group commit's thread may hold the database for a part of a
        clock move, and the metadata GETs must not wait for it."""
        await asyncio.to_thread(self.store.record_attempts, attempts)

    async def deliver(self, client: Outbound, deliveries: list[Delivery]) -> None:
        subscription = self.registry.subscriptions.get(deliveries[0].target)
        now = self.service.now()
        if subscription is None:
            await self._drop(deliveries, now, "the event subscription was deleted")
            return
        writing = [d for d in deliveries if d.status == "dead-lettering"]
        if writing:
            await self._write_dead_letters(subscription, writing, now)
        pending = [d for d in deliveries if d.status == "pending"]
        if not pending:
            return
        state = subscription.shown_state(now)
        if state == FAILED:
            await self._drop(pending, now, "the event subscription failed its validation")
            return
        expired = [d for d in pending if now > d.expires_at]
        if expired:
            await self._dead_letter(subscription, expired, now, self.settings.ttl_dead_letter_reason, None, 0)
        pending = [d for d in pending if now <= d.expires_at]
        if state == AWAITING_MANUAL_ACTION:  # an update waits for its validation: hold the events, do not count
            await self._record([Attempt(d.delivery_id, "pending", d.attempts, now + AWAITING_RECHECK) for d in pending])
            return
        destination = subscription.destination
        # Checked once for this round of requests (all to the one endpoint), not per request: a name is resolved
        # once, and the requests go to the address that was checked (net/own_listeners.py).
        target: Destination | SelfTarget
        try:
            target = (
                await self.own.destination(destination.endpoint_url)
                if self.own is not None
                else Destination(destination.endpoint_url)
            )
        except SelfTarget as refused:
            target = refused
        outcomes = _GroupCommit(self.store, self.settings.outcomes_per_commit)
        slots = asyncio.Semaphore(self.settings.concurrent_requests)

        async def send(batch: list[Delivery]) -> None:
            async with slots:
                await outcomes.add(await self._attempt(client, subscription, target, batch))

        try:
            async with asyncio.TaskGroup() as group:
                for batch in batches(pending, destination.max_events_per_batch, destination.preferred_batch_kb):
                    group.create_task(send(batch))
        except BaseExceptionGroup as failed:  # the sender handles a store failure as such, not wrapped in a group
            raise failed.exceptions[0] from None
        finally:
            # Outcomes already known are kept even if a sibling failed or the sender is stopping: fewer resends.
            await outcomes.flush()

    # ------------------------------------------------------------------------------------------------ requests
    def request(self, subscription: EventSubscription, batch: list[Delivery]) -> tuple[bytes, dict[str, str]]:
        """The body and headers of one delivery request."""
        cloud = subscription.schema == CLOUD_EVENT_SCHEMA
        first = json.loads(batch[0].payload)
        headers = {
            "aeg-event-type": "Notification",
            "aeg-subscription-name": subscription.name.upper(),
            "aeg-delivery-count": str(batch[0].attempts),
            "aeg-data-version": "" if cloud else str(first.get("dataVersion", "")),
            "aeg-metadata-version": CLOUD_EVENTS_SPEC_VERSION if cloud else METADATA_VERSION,
        }
        if cloud:
            headers["origin"] = ORIGIN
            if len(batch) == 1 and subscription.destination.max_events_per_batch <= 1:
                headers["content-type"] = "application/cloudevents+json; charset=utf-8"
                body = batch[0].payload
            else:
                headers["content-type"] = "application/cloudevents-batch+json; charset=utf-8"
                body = "[" + ",".join(d.payload for d in batch) + "]"
        else:
            headers["content-type"] = "application/json; charset=utf-8"
            body = "[" + ",".join(d.payload for d in batch) + "]"  # always an array, one event or many
        for attribute in subscription.destination.attributes:
            if attribute.kind == "Static":
                headers[attribute.name] = attribute.value or ""
                continue
            value = lookup(first, attribute.source_field or "")  # with batching: the first event's value
            if isinstance(value, bool):
                headers[attribute.name] = "true" if value else "false"
            elif isinstance(value, (str, int, float)) and value is not MISSING:
                headers[attribute.name] = str(value)
        return body.encode(), headers

    async def _post(
        self, client: Outbound, target: Destination | SelfTarget, body: bytes, headers: dict[str, str]
    ) -> Outcome:
        if isinstance(target, SelfTarget):
            return Outcome(False, None, "Aborted", f"refused: {target}")
        if target.headers:
            headers.update(target.headers)
        try:
            answer = await client.send(
                "POST", target.url, body=body, headers=headers, timeout=self.settings.delivery_timeout
            )
        except NoAnswer as failure:
            if failure.kind == "timeout":
                return Outcome(False, None, "TimedOut", f"no answer within {self.settings.delivery_timeout:g} s")
            if failure.kind in ("resolution", "connect"):
                outcome = "ResolutionError" if failure.kind == "resolution" else "SocketError"
                return Outcome(False, None, outcome, f"cannot connect: {failure}")
            return Outcome(False, None, "Aborted", str(failure))
        code = answer.status
        if 200 <= code <= 204:
            return Outcome(True, code, "Delivered", "")
        return Outcome(False, code, OUTCOMES.get(code, "Aborted"), f"HTTP {code}")

    async def _attempt(
        self,
        client: Outbound,
        subscription: EventSubscription,
        target: Destination | SelfTarget,
        batch: list[Delivery],
    ) -> list[Attempt]:
        """One request; returns the outcomes to record (a dead letter or drop is recorded here, at once)."""
        body, headers = self.request(subscription, batch)
        result = await self._post(client, target, body, headers)
        now = self.service.now()  # after the wait: a command may have moved the clock meanwhile
        made = batch[0].attempts + 1
        if result.delivered:
            if log.isEnabledFor(logging.INFO):  # _describe parses the event: not paid per event when not logged
                log.info(
                    "event grid %s to subscription %s: delivered (HTTP %s, attempt %s)",
                    _describe(batch),
                    subscription.name.upper(),
                    result.status,
                    made,
                )
            return [Attempt(d.delivery_id, "delivered", made, now) for d in batch]
        what = _describe(batch)
        detail = {
            "lastDeliveryOutcome": result.outcome,
            "lastHttpStatusCode": result.status,
            "lastDeliveryAttemptTime": event_time(now),
        }
        if result.status in self.settings.non_retried_codes:
            reason = f"UndeliverableDueToHttp{status_name(result.status)}"
            log.info(
                "event grid %s to subscription %s: %s, not retried (attempt %s)",
                what,
                subscription.name.upper(),
                result.error,
                made,
            )
            await self._dead_letter(subscription, batch, now, reason, detail, made, result.error)
            return []
        if made >= subscription.retry.max_delivery_attempts:
            log.info(
                "event grid %s to subscription %s: %s (attempt %s of %s)",
                what,
                subscription.name.upper(),
                result.error,
                made,
                subscription.retry.max_delivery_attempts,
            )
            await self._dead_letter(subscription, batch, now, MAX_ATTEMPTS_REASON, detail, made, result.error)
            return []
        next_at = now + retry_delay(made, result.status, str(batch[0].delivery_id))
        log.info(
            "event grid %s to subscription %s: %s (attempt %s); next attempt at %s",
            what,
            subscription.name.upper(),
            result.error,
            made,
            next_at.isoformat(),
        )
        return [Attempt(d.delivery_id, "pending", made, next_at, result.error, json.dumps(detail)) for d in batch]

    # ---------------------------------------------------------------------------------------- dead letters
    async def _dead_letter(
        self,
        subscription: EventSubscription,
        deliveries: list[Delivery],
        now: datetime,
        reason: str,
        detail: dict | None,
        made: int,
        error: str | None = None,
    ) -> None:
        """Deliveries that will not be retried: to the dead-letter destination after the delay, or dropped."""
        attempts_by_id = {d.delivery_id: max(made, d.attempts) for d in deliveries}
        if subscription.dead_letter is None:
            await self._drop_undeliverable(subscription, deliveries, now, reason, attempts_by_id, error)
            return
        write_at = now + self.settings.dead_letter_delay
        rows = [
            self._dead_lettering(delivery, now, write_at, reason, detail, attempts_by_id[delivery.delivery_id], error)
            for delivery in deliveries
        ]
        await self._record(rows)
        log.info(
            "event grid %s to subscription %s: dead-lettered (%s); written at %s",
            _describe(deliveries),
            subscription.name.upper(),
            reason,
            write_at.isoformat(),
        )
        if self.settings.dead_letter_delay <= timedelta(0):
            stored = {d.delivery_id: d for d in deliveries}
            refreshed = [
                Delivery(
                    d.delivery_id,
                    d.target,
                    d.payload,
                    row.attempts,
                    write_at,
                    d.expires_at,
                    d.kind,
                    "dead-lettering",
                    row.detail,
                    d.created_at,
                )
                for row in rows
                for d in [stored[row.delivery_id]]
            ]
            await self._write_dead_letters(subscription, refreshed, now)

    async def _drop_undeliverable(
        self,
        subscription: EventSubscription,
        deliveries: list[Delivery],
        now: datetime,
        reason: str,
        attempts_by_id: dict[int, int],
        error: str | None,
    ) -> None:
        """Deliveries that will not be retried, for a subscription without a dead-letter destination."""
        await self._record(
            [
                Attempt(
                    d.delivery_id,
                    "dropped",
                    attempts_by_id[d.delivery_id],
                    now,
                    f"{reason}: {error}" if error else reason,
                )
                for d in deliveries
            ]
        )
        log.warning(
            "event grid %s to subscription %s: dropped (%s; no dead-letter destination)",
            _describe(deliveries),
            subscription.name.upper(),
            reason,
        )

    @staticmethod
    def _dead_lettering(
        delivery: Delivery,
        now: datetime,
        write_at: datetime,
        reason: str,
        detail: dict | None,
        attempts: int,
        error: str | None,
    ) -> Attempt:
        """The delivery's row until its dead letter is written at ``write_at``: the dead-letter properties over what
        its detail held."""
        previous = json.loads(delivery.detail) if delivery.detail else {}
        state = {
            **previous,
            **(detail or {}),
            "deadLetterReason": reason,
            "deliveryAttempts": attempts,
            "deadLetteredAt": now.isoformat(),
        }
        return Attempt(delivery.delivery_id, "dead-lettering", attempts, write_at, error or reason, json.dumps(state))

    def dead_letter_path(self, subscription: EventSubscription, deliveries: list[Delivery], now: datetime) -> Path:
        """``{dir}/{container}/{SUBSCRIPTION-NAME}/{Y}/{M}/{D}/{H}/{guid}.json``, UTC, not zero padded ("Event
        Grid message delivery and retry");
        the name is derived from the deliveries, so a write repeated after a crash replaces the same file."""
        assert subscription.dead_letter is not None
        moment = now.astimezone(UTC)
        guid = derived_guid(
            self.service.settled_engine().seed, "deadletter", *(d.delivery_id for d in deliveries)
        ).lower()
        return (
            self.settings.dead_letter_dir
            / subscription.dead_letter.container
            / subscription.name.upper()
            / str(moment.year)
            / str(moment.month)
            / str(moment.day)
            / str(moment.hour)
            / f"{guid}.json"
        )

    async def _write_dead_letters(
        self, subscription: EventSubscription, deliveries: list[Delivery], now: datetime
    ) -> None:
        if subscription.dead_letter is None:  # the destination was removed since: Event Grid drops them
            await self._drop(deliveries, now, "the dead-letter destination was removed")
            return
        cloud = subscription.schema == CLOUD_EVENT_SCHEMA
        events = [dead_letter_event(d, cloud) for d in deliveries]
        path = self.dead_letter_path(subscription, deliveries, now)
        try:
            _write_atomically(path, json.dumps(events, indent=2, ensure_ascii=False).encode())
        except OSError as error:
            first = min(
                datetime.fromisoformat(json.loads(d.detail or "{}").get("deadLetteredAt", now.isoformat()))
                for d in deliveries
            )
            if now - first >= DEAD_LETTER_GIVE_UP:
                await self._drop(deliveries, now, f"the dead letter could not be written for 4 hours: {error}")
                return
            await self._record(
                [
                    Attempt(
                        d.delivery_id,
                        "dead-lettering",
                        d.attempts,
                        now + DEAD_LETTER_RETRY,
                        f"cannot write {path}: {error.strerror or error}",
                    )
                    for d in deliveries
                ]
            )
            log.error(
                "event grid %s to subscription %s: cannot write the dead letter %s (%s); retrying",
                _describe(deliveries),
                subscription.name.upper(),
                path,
                error.strerror or error,
            )
            return
        await self._record(
            [
                Attempt(
                    d.delivery_id,
                    "dead-lettered",
                    d.attempts,
                    now,
                    None,
                    json.dumps({**json.loads(d.detail or "{}"), "path": str(path)}),
                )
                for d in deliveries
            ]
        )
        log.info(
            "event grid %s to subscription %s: dead letter written to %s",
            _describe(deliveries),
            subscription.name.upper(),
            path,
        )

    async def _drop(self, deliveries: list[Delivery], now: datetime, why: str) -> None:
        await self._record([Attempt(d.delivery_id, "dropped", d.attempts, now, why) for d in deliveries])
        log.warning("event grid %s to %s: dropped (%s)", _describe(deliveries), deliveries[0].target, why)


class _GroupCommit:
    """Outcomes of concurrent requests, recorded ``size`` at a time in one transaction instead of one each.

    Until its group commits, a delivery stays due in the store: a crash in between sends it again (at least once).
    The retry schedule does not move: each outcome carries the engine time of its own answer."""

    def __init__(self, store: SQLStore, size: int):
        self.store = store
        self.size = size
        self.waiting: list[Attempt] = []

    async def add(self, outcomes: list[Attempt]) -> None:
        self.waiting.extend(outcomes)
        if len(self.waiting) >= self.size:
            await self.flush()

    async def flush(self) -> None:
        if self.waiting:
            group, self.waiting = self.waiting, []
            await asyncio.to_thread(self.store.record_attempts, group)


def dead_letter_event(delivery: Delivery, cloud: bool) -> dict:
    """The delivered event with Event Grid's dead-letter fields added at the top level (lower case for
    CloudEvents, whose attribute names are lower case)."""
    event: dict[str, Any] = json.loads(delivery.payload)
    state = json.loads(delivery.detail or "{}")
    fields: dict[str, Any] = {
        "deadLetterReason": state.get("deadLetterReason"),
        "deliveryAttempts": state.get("deliveryAttempts", delivery.attempts),
    }
    if state.get("lastDeliveryOutcome") is not None:  # none when no attempt was made before the time to live ran out
        fields["lastDeliveryOutcome"] = state["lastDeliveryOutcome"]
    if state.get("lastHttpStatusCode") is not None:
        fields["lastHttpStatusCode"] = state["lastHttpStatusCode"]
    if delivery.created_at is not None:
        fields["publishTime"] = event_time(delivery.created_at)
    if state.get("lastDeliveryAttemptTime") is not None:
        fields["lastDeliveryAttemptTime"] = state["lastDeliveryAttemptTime"]
    if cloud:
        fields = {name.lower(): value for name, value in fields.items()}
    event.update(fields)
    return event


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _describe(deliveries: list[Delivery]) -> str:
    """``publication 3f2a... (event C7061BAC... Scheduled)``, or a count for a batch, for the log."""
    if len(deliveries) > 1:
        return f"batch of {len(deliveries)} (deliveries {deliveries[0].delivery_id}..{deliveries[-1].delivery_id})"
    event = json.loads(deliveries[0].payload)
    properties = event.get("data", {}).get("resourceInfo", {}).get("properties", {})
    return (
        f"publication {event.get('id')} (event {properties.get('EventId')} {properties.get('EventStatus')}, "
        f"delivery {deliveries[0].delivery_id})"
    )
