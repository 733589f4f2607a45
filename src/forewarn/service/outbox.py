"""Sending the outbox: messages committed with the commands that caused them, delivered at least once.

Attempts follow the engine's clock, so a manual clock walks through a day of retries as fast as it is advanced.
A failed attempt is retried after 30 s, doubling up to an hour, with a deterministic jitter of up to 10 %; a message
still undelivered when it expires is marked ``expired`` and kept, for the operator to see.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import datetime, timedelta

import httpx

from forewarn.service.runtime import Maintenance
from forewarn.store import Delivery

log = logging.getLogger("forewarn.outbox")

FIRST_RETRY = timedelta(seconds=30)
LONGEST_RETRY = timedelta(hours=1)


def retry_delay(delivery_id: int, attempts: int) -> timedelta:
    base = min(FIRST_RETRY * (2 ** (attempts - 1)), LONGEST_RETRY)
    jitter = int.from_bytes(hashlib.blake2b(f"{delivery_id}:{attempts}".encode(), digest_size=2).digest(), "big")
    return base * (1 + (jitter / 65535) / 10)


class OutboxSender:
    def __init__(self, service: Maintenance, timeout: float = 10.0):
        self.service = service
        self.timeout = timeout
        self._wake = asyncio.Event()
        service.subscribe(lambda changes: self._wake.set())

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            while True:
                # Cleared before sending: a command committed while a delivery is in flight wakes the next round.
                self._wake.clear()
                try:
                    await self.send_due(client)
                except Exception:  # a store failure must not stop deliveries for good
                    log.exception("sending the outbox failed; retrying in 1 s")
                    await asyncio.sleep(1)
                    continue
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=self._sleep_for())
                except asyncio.TimeoutError:
                    pass

    def _sleep_for(self) -> float:
        due = self.service.store.next_delivery_at()
        if due is None:
            return 3600.0
        when = self.service.clock.wall_when(due)
        if when is None:  # a manual clock: only a command moves time, and commands wake us
            return 3600.0
        return min(max(when - time.time(), 0.0), 3600.0)

    async def send_due(self, client: httpx.AsyncClient) -> int:
        now = self.service.now()
        sent = 0
        for delivery in self.service.store.due_deliveries(now):
            await self._attempt(client, delivery, now)
            sent += 1
        return sent

    async def _attempt(self, client: httpx.AsyncClient, delivery: Delivery, now: datetime) -> None:
        attempts = delivery.attempts + 1
        error = None
        try:
            response = await client.post(delivery.target, content=delivery.payload,
                                         headers={"content-type": "application/json"})
            if not 200 <= response.status_code < 300:
                error = f"HTTP {response.status_code}"
        except httpx.HTTPError as failure:
            error = f"{failure.__class__.__name__}: {failure}"
        store = self.service.store
        if error is None:
            store.record_attempt(delivery.delivery_id, "delivered", attempts, now, None)
            log.info("delivery %s to %s: delivered (attempt %s)", delivery.delivery_id, delivery.target, attempts)
            return
        next_at = now + retry_delay(delivery.delivery_id, attempts)
        status = "expired" if next_at > delivery.expires_at else "pending"
        store.record_attempt(delivery.delivery_id, status, attempts, next_at, error)
        log.info("delivery %s to %s: %s (attempt %s); %s", delivery.delivery_id, delivery.target, error, attempts,
                 "given up" if status == "expired" else f"next attempt at {next_at.isoformat()}")
