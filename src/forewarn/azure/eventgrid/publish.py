"""Publishing scheduled events to the MaintenanceResources system topics: the outbox function registered with
``Maintenance`` (like ``aws.health.events.health_outbox``).

Each transition of a centrally published event (Scheduled, Started, Completed, Canceled; "Scheduled Events in Event
Grid") becomes one queued delivery per event subscription of its Azure subscription's topic that is validated, not
expired, and whose filter passes the event as that subscription would receive it. The deliveries are committed in the
transaction of the change that caused them, so none is lost and none is sent for a change that was not committed.

A publication can be broadcast twice with the same id ("Scheduled Events in Event Grid", "Double Notifications");
which ones is decided from the seed and the publication's id, so a rerun duplicates the same ones, and every
subscription of the topic receives both copies.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

from forewarn.azure.changes import EventChanged
from forewarn.azure.eventgrid.events import PUBLISHED, in_schema, scheduled_event_emitted
from forewarn.azure.eventgrid.filters import matches
from forewarn.azure.eventgrid.registry import EventGridRegistry
from forewarn.azure.eventgrid.settings import EventGridSettings
from forewarn.azure.fleet import azure_fleet
from forewarn.core.changes import Change
from forewarn.engine.engine import Engine
from forewarn.store import Outgoing

KIND = "eventgrid"


def duplicated(seed: str, publication_id: str, rate: float) -> bool:
    if rate <= 0:
        return False
    draw = int.from_bytes(hashlib.blake2b(f"{seed}:duplicate:{publication_id}".encode(), digest_size=8).digest(), "big")
    return draw / 2**64 < rate


def eventgrid_outbox(registry: EventGridRegistry, settings: EventGridSettings):
    """The outbox function for ``Maintenance.add_outbox``."""

    def derive(changes: list[Change], engine: Engine) -> list[Outgoing]:
        items: list[Outgoing] = []
        for change in changes:
            if not isinstance(change, EventChanged) or change.what not in PUBLISHED or not change.event.central:
                continue
            event = change.event
            vm = azure_fleet(engine.fleet).vms[event.resources[0]]
            topic = registry.topic_of_source(vm.subscription_id)
            if topic is None:
                continue  # nobody created the system topic: Azure publishes to no one
            published = scheduled_event_emitted(event, vm, change.what, engine.now, engine.seed, settings)
            twice = duplicated(engine.seed, published["id"], settings.duplicate_rate)
            for subscription in registry.subscriptions_of(topic.key):
                if not subscription.active(engine.now):
                    continue
                delivered = in_schema(published, subscription.schema)
                if not matches(subscription.filter, delivered, subscription.schema):
                    continue
                payload = json.dumps(delivered, separators=(",", ":"), ensure_ascii=False)
                expires_at = engine.now + timedelta(minutes=subscription.retry.ttl_minutes)
                items.append(Outgoing(subscription.key, payload, expires_at, KIND))
                if twice:
                    items.append(
                        Outgoing(
                            subscription.key, payload, expires_at, KIND, next_at=engine.now + settings.duplicate_delay
                        )
                    )
        return items

    return derive
