"""The system topics and event subscriptions in force: durable in the store, indexed in memory.

Every change is written to the store first and only then applied in memory, so nothing reports a topic or a
subscription the database does not hold. The publishing outbox (publish.py) reads the memory index while a command
is committed; every caller runs on the one event loop, so no lock is needed.
"""

from __future__ import annotations

import logging

from forewarn.azure.eventgrid.model import EventSubscription, SystemTopic
from forewarn.core.words import counted
from forewarn.store import SQLStore

log = logging.getLogger("forewarn.azure.eventgrid")


class EventGridRegistry:
    def __init__(self, store: SQLStore, topics: list[SystemTopic], subscriptions: list[EventSubscription]):
        self.store = store
        self.topics: dict[str, SystemTopic] = {topic.key: topic for topic in topics}
        self.subscriptions: dict[str, EventSubscription] = {}
        self._by_topic: dict[str, dict[str, EventSubscription]] = {}
        for subscription in subscriptions:
            self._index(subscription)

    @classmethod
    def load(cls, store: SQLStore) -> EventGridRegistry:
        topic_records, subscription_records = store.eventgrid_records()
        return cls(
            store,
            [SystemTopic.from_record(r) for r in topic_records],
            [EventSubscription.from_record(r) for r in subscription_records],
        )

    def _index(self, subscription: EventSubscription) -> None:
        self.subscriptions[subscription.key] = subscription
        self._by_topic.setdefault(subscription.topic_key, {})[subscription.key] = subscription

    # --------------------------------------------------------------------------------------------------- reads
    def topic_of_source(self, azure_subscription: str) -> SystemTopic | None:
        """The MaintenanceResources topic whose source is this Azure subscription (at most one, as in Azure)."""
        wanted = azure_subscription.lower()
        for topic in self.topics.values():
            if topic.subscription_id.lower() == wanted:
                return topic
        return None

    def topics_in(self, azure_subscription: str, resource_group: str | None = None) -> list[SystemTopic]:
        found = [
            t
            for t in self.topics.values()
            if t.subscription_id.lower() == azure_subscription.lower()
            and (resource_group is None or t.resource_group.lower() == resource_group.lower())
        ]
        return sorted(found, key=lambda t: t.key)

    def subscriptions_of(self, topic_key: str) -> list[EventSubscription]:
        return sorted(self._by_topic.get(topic_key, {}).values(), key=lambda s: s.key)

    def awaiting(self, code: str) -> EventSubscription | None:
        """The subscription whose manual validation uses this code."""
        for subscription in self.subscriptions.values():
            if subscription.validation is not None and subscription.validation.code == code:
                return subscription
        return None

    # -------------------------------------------------------------------------------------------------- writes
    def put_topic(self, topic: SystemTopic) -> None:
        self.store.put_eventgrid_topic(topic.key, topic.to_record())
        self.topics[topic.key] = topic

    def delete_topic(self, topic_key: str) -> list[EventSubscription]:
        """Delete a topic with its event subscriptions (as Azure does); the subscriptions deleted."""
        self.store.delete_eventgrid_topic(topic_key)
        topic = self.topics.pop(topic_key, None)
        removed = list(self._by_topic.pop(topic_key, {}).values())
        for subscription in removed:
            self.subscriptions.pop(subscription.key, None)
        if topic is not None:
            log.info(
                "system topic %s deleted%s",
                topic.id,
                f" with {counted(len(removed), 'event subscription')}" if removed else "",
            )
        return removed

    def put_subscription(self, subscription: EventSubscription) -> None:
        self.store.put_eventgrid_subscription(subscription.key, subscription.topic_key, subscription.to_record())
        previous = self.subscriptions.get(subscription.key)
        if previous is not None:
            self._by_topic.get(previous.topic_key, {}).pop(previous.key, None)
        self._index(subscription)

    def delete_subscription(self, subscription_key: str) -> EventSubscription | None:
        self.store.delete_eventgrid_subscription(subscription_key)
        removed = self.subscriptions.pop(subscription_key, None)
        if removed is not None:
            self._by_topic.get(removed.topic_key, {}).pop(removed.key, None)
        return removed
