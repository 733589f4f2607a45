"""Faults on the AWS queue path, to reproduce a backed-up queue: throttled API actions and delayed or duplicated
deliveries to queues.

Throttling follows the token bucket of "Request throttling for the Amazon EC2 API" (EC2 User Guide): each throttle
has a bucket of ``burst`` tokens, refilled at ``rate`` tokens a second of wall-clock time (what clients wait in); a
request of a throttled action takes a token, or is refused with its service's throttling error when none is left.
Delivery faults act on what EventBridge rules and lifecycle hooks put into queues: a chosen fraction of deliveries is
sent twice ("at least once") or held back for some seconds of forewarn's clock (the message's delay).

Faults live in memory, one set per running service, like the metadata endpoints' faults: a restart clears them."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from forewarn.core.errors import Invalid

# The services on the EC2 API's port, by the name their requests are signed for.
SERVICES = ("ec2", "sqs", "events", "autoscaling")
MAX_DELAY = 900  # an SQS message's delay is at most 15 minutes ("SendMessage", DelaySeconds)
MAX_RATE = 1_000_000.0  # requests a second: past any a test sends
MAX_BURST = 1_000_000


@dataclass
class Throttle:
    """One service's actions (all of them when ``actions`` is empty) held to ``rate`` requests a second, with bursts
    of up to ``burst``."""

    throttle_id: int
    service: str
    actions: frozenset[str]
    rate: float
    burst: int
    tokens: float
    filled_at: float
    refused: int = 0

    def covers(self, service: str, action: str) -> bool:
        return service == self.service and (not self.actions or action in self.actions)

    def take(self, now: float) -> bool:
        """A token for one request (True), or none left (False: the request is throttled)."""
        self.tokens = min(float(self.burst), self.tokens + (now - self.filled_at) * self.rate)
        self.filled_at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.refused += 1
        return False


@dataclass(frozen=True)
class DeliveryFaults:
    """Which deliveries to queues go wrong: ``duplicate`` and ``delayed`` are fractions (0 to 1) of them."""

    duplicate: float = 0.0
    delayed: float = 0.0
    delay_seconds: int = 0

    def check(self) -> DeliveryFaults:
        for name, value in (("duplicate", self.duplicate), ("delayed", self.delayed)):
            if not 0 <= value <= 1:
                raise Invalid(f"{name} is a fraction of deliveries, from 0 to 1, not {value}")
        if not 0 <= self.delay_seconds <= MAX_DELAY:
            raise Invalid(f"a delivery's delay is 0 to {MAX_DELAY} seconds (SQS's longest), not {self.delay_seconds}")
        if self.delayed and not self.delay_seconds:
            raise Invalid("say how long a delayed delivery waits (delay)")
        return self


@dataclass
class QueueFaults:
    clock: Callable[[], float] = time.monotonic
    throttles: list[Throttle] = field(default_factory=list)
    deliveries: DeliveryFaults = DeliveryFaults()
    next_id: int = 1

    def throttle(self, service: str, actions: Iterable[str], rate: float, burst: int) -> Throttle:
        if service not in SERVICES:
            raise Invalid(f"the services throttled are {', '.join(SERVICES)}, not {service!r}")
        if not (0 <= rate <= MAX_RATE and 0 <= burst <= MAX_BURST):
            raise Invalid(f"a throttle's rate is 0 to {MAX_RATE:g} a second, its burst 0 to {MAX_BURST}")
        throttle = Throttle(self.next_id, service, frozenset(actions), rate, burst, float(burst), self.clock())
        self.next_id += 1
        self.throttles.append(throttle)
        return throttle

    def throttled(self, service: str, action: str) -> bool:
        """Whether this request is refused: every throttle covering it takes a token (the first with none left
        refuses it)."""
        now = self.clock()
        return not all(t.take(now) for t in self.throttles if t.covers(service, action))

    def fate(self, delivery_id: int) -> tuple[int, int | None]:
        """How a delivery reaches its queue: the copies sent, and the delay of each (None: the queue's own). Decided
        by the delivery's ID, so a retried delivery meets the same fate."""
        faults = self.deliveries
        copies = 2 if _share(delivery_id, "duplicate") < faults.duplicate else 1
        delay = faults.delay_seconds if _share(delivery_id, "delayed") < faults.delayed else None
        return copies, delay

    def clear(self) -> int:
        cleared = len(self.throttles) + (self.deliveries != DeliveryFaults())
        self.throttles, self.deliveries = [], DeliveryFaults()
        return cleared


def _share(delivery_id: int, fault: str) -> float:
    """A number in [0, 1) fixed by the delivery and the fault."""
    digest = hashlib.sha256(f"{fault}/{delivery_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


_FAULTS: WeakKeyDictionary[object, QueueFaults] = WeakKeyDictionary()


def faults_of(service: object) -> QueueFaults:
    """The faults of a running service (its EC2 API port and its control API share them)."""
    found = _FAULTS.get(service)
    if found is None:
        found = _FAULTS[service] = QueueFaults()
    return found
