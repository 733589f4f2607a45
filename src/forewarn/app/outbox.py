"""Sending the outbox: messages committed with the commands that caused them, delivered at least once.

One sender serves every kind of message, each with its own policy: ``webhook`` (AWS Health events: one POST per
message, below) and ``eventgrid`` (azure/eventgrid/delivery.py: Event Grid's headers, batching, retry schedule and dead
letters). Due messages are grouped in lanes, one per (kind, target): a lane is sent by one task at a time, and lanes
run concurrently, so a slow or unreachable endpoint delays only its own messages.

Attempts follow the engine's clock, so a manual clock walks through a day of retries as fast as it is advanced.
A failed AWS Health message is retried after 30 s, doubling up to an hour, with a deterministic jitter of up to
10 %; a message still undelivered when it expires is marked ``expired`` and kept, for the operator to see.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Protocol

from forewarn.app.runtime import Maintenance
from forewarn.net.outbound import NoAnswer, Outbound
from forewarn.net.own_listeners import OwnListeners, SelfTarget
from forewarn.store import Attempt, Delivery, StoreError

log = logging.getLogger("forewarn.outbox")

FIRST_RETRY = timedelta(seconds=30)
LONGEST_RETRY = timedelta(hours=1)
DUE_BATCH = 1000  # due messages read per round; lanes that finish wake the next round
FAILED_LANE_PAUSE = 1.0  # wall seconds a lane rests after its policy raised (a store failure), not to spin


def retry_delay(delivery_id: int, attempts: int) -> timedelta:
    base = min(FIRST_RETRY * (2 ** (attempts - 1)), LONGEST_RETRY)
    jitter = int.from_bytes(hashlib.blake2b(f"{delivery_id}:{attempts}".encode(), digest_size=2).digest(), "big")
    return base * (1 + (jitter / 65535) / 10)


class SendingPolicy(Protocol):
    kind: str

    async def deliver(self, client: Outbound, deliveries: list[Delivery]) -> None:
        """Act on due deliveries of one lane (same kind and target) and record every outcome in the store."""


class WebhookPolicy:
    """AWS Health events: each message POSTed alone; any 2xx is delivered."""

    kind = "webhook"

    def __init__(self, service: Maintenance, own: OwnListeners | None = None):
        self.service = service
        self.own = own  # this server's listeners: never a webhook's destination

    async def deliver(self, client: Outbound, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            await self._attempt(client, delivery)

    async def _attempt(self, client: Outbound, delivery: Delivery) -> None:
        attempts = delivery.attempts + 1
        error = None
        try:
            target = await self.own.destination(delivery.target) if self.own is not None else None
            answer = await client.send(
                "POST",
                target.url if target else delivery.target,
                body=delivery.payload.encode(),
                headers={"content-type": "application/json", **(target.headers if target else {})},
            )
            if not 200 <= answer.status < 300:
                error = f"HTTP {answer.status}"
        except SelfTarget as refused:
            error = f"refused: {refused}"
        except NoAnswer as failure:
            error = str(failure)
        now = self.service.now()
        store = self.service.store
        if error is None:
            await asyncio.to_thread(
                store.record_attempts, [Attempt(delivery.delivery_id, "delivered", attempts, now, None)]
            )
            log.info("delivery %s to %s: delivered (attempt %s)", delivery.delivery_id, delivery.target, attempts)
            return
        next_at = now + retry_delay(delivery.delivery_id, attempts)
        status = "expired" if next_at > delivery.expires_at else "pending"
        await asyncio.to_thread(
            store.record_attempts, [Attempt(delivery.delivery_id, status, attempts, next_at, error)]
        )
        log.info(
            "delivery %s to %s: %s (attempt %s); %s",
            delivery.delivery_id,
            delivery.target,
            error,
            attempts,
            "given up" if status == "expired" else f"next attempt at {next_at.isoformat()}",
        )


class OutboxSender:
    def __init__(
        self,
        service: Maintenance,
        timeout: float = 10.0,
        policies: Iterable[SendingPolicy] = (),
        own: OwnListeners | None = None,
    ):
        self.service = service
        self.timeout = timeout
        self.policies: dict[str, SendingPolicy] = {"webhook": WebhookPolicy(service, own)}
        for policy in policies:
            self.policies[policy.kind] = policy
        self._wake = asyncio.Event()
        self._busy: set[tuple[str, str]] = set()
        self._lanes_ended = 0  # lanes that ended so far: one that ends while the outbox is read makes the read stale
        self._tasks: set[asyncio.Task] = set()
        self._client: Outbound | None = None
        service.watch_deliveries(self._wake.set)

    def client(self) -> Outbound:
        """The one pool of connections of every lane (net/outbound.py), made when the first message is sent."""
        if self._client is None:
            self._client = Outbound(self.timeout)
        return self._client

    async def run(self) -> None:
        try:
            while True:
                # Cleared before reading: a command committed (or a lane finished) meanwhile wakes the next round.
                self._wake.clear()
                try:
                    ended = self._lanes_ended
                    due = await self.read_due()
                    if ended == self._lanes_ended:  # else what was read may be older than a lane's outcome: again
                        self.start_lanes(due)
                    sleep_for = self._sleep_for(await self._read_next_due())
                except StoreError as error:  # the database is out of reach; deliveries go on once it is back
                    log.warning("reading the outbox failed (%s); retrying in 1 s", error)
                    await asyncio.sleep(1)
                    continue
                except Exception:  # a store failure must not stop deliveries for good
                    log.exception("reading the outbox failed; retrying in 1 s")
                    await asyncio.sleep(1)
                    continue
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=sleep_for)
                except TimeoutError:
                    pass
        finally:
            for task in list(self._tasks):
                task.cancel()
            await self.aclose()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # The outbox is read off the event loop: the sender wakes after every part of a clock move, while the group
    # commit's thread holds the database for the next part, and a read on the loop waited for that part's commit
    # (70-90 ms of every metadata GET at a million VMs, bench/stalls.py).
    async def read_due(self) -> list[Delivery]:
        """The deliveries due now, oldest first."""
        return await asyncio.to_thread(self.service.store.due_deliveries, self.service.now(), DUE_BATCH)

    async def _read_next_due(self) -> datetime | None:
        # Messages due already are in flight (their lanes wake us when done): the first one due later.
        return await asyncio.to_thread(self.service.store.next_delivery_at, after=self.service.now())

    def _sleep_for(self, due: datetime | None) -> float:
        if due is None:
            return 3600.0
        when = self.service.clock.wall_when(due)
        if when is None:  # a manual clock: only a command moves time, and commands wake us
            return 3600.0
        return min(max(when - time.time(), 0.0), 3600.0)

    def start_lanes(self, due: list[Delivery]) -> list[asyncio.Task]:
        """Start a task for each lane with ``due`` messages that is not being sent already."""
        lanes: dict[tuple[str, str], list[Delivery]] = {}
        for delivery in due:
            lane = (delivery.kind, delivery.target)
            if lane not in self._busy:
                lanes.setdefault(lane, []).append(delivery)
        started = []
        for lane, deliveries in lanes.items():
            policy = self.policies.get(lane[0])
            if policy is None:
                log.error(
                    "deliveries %s..%s: no sending policy for kind %r; left pending",
                    deliveries[0].delivery_id,
                    deliveries[-1].delivery_id,
                    lane[0],
                )
                continue
            self._busy.add(lane)
            task = asyncio.create_task(self._send_lane(self.client(), lane, policy, deliveries))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started.append(task)
        return started

    async def _send_lane(
        self, client: Outbound, lane: tuple[str, str], policy: SendingPolicy, deliveries: list[Delivery]
    ) -> None:
        try:
            await policy.deliver(client, deliveries)
        except asyncio.CancelledError:
            raise
        except StoreError as error:  # an outcome not recorded stays due: the message is sent again (at least once)
            log.warning(
                "recording %s deliveries to %s failed (%s); retrying in %g s",
                lane[0],
                lane[1],
                error,
                FAILED_LANE_PAUSE,
            )
            await asyncio.sleep(FAILED_LANE_PAUSE)
        except Exception:
            log.exception("sending %s deliveries to %s failed; retrying in %g s", lane[0], lane[1], FAILED_LANE_PAUSE)
            await asyncio.sleep(FAILED_LANE_PAUSE)
        finally:
            self._busy.discard(lane)
            self._lanes_ended += 1
            self._wake.set()

    async def send_due(self) -> int:
        """Send what is due now and wait for it (tests and benchmarks drive the sender this way)."""
        tasks = self.start_lanes(await self.read_due())
        if tasks:
            await asyncio.gather(*tasks)
        return len(tasks)
