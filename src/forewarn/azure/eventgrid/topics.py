"""Event Grid in one object: the registry of topics and subscriptions, the publishing outbox, the delivery policy,
the ARM provider, and the topics and subscriptions declared in the ``--event-grid`` file.

Wiring (cli/main.py, azure/serving/wiring.py)::

    eventgrid = EventGrid(store, settings, declared)          # before Maintenance.open
    Maintenance.open(..., outboxes=[..., eventgrid.outbox])   # publications committed with their changes
    eventgrid.attach(service)                                 # declared topics and prevalidated subscriptions
    eventgrid.register(management)                            # ARM provider + validation URL on the ARM port
    OutboxSender(service, policies=[eventgrid.delivery])      # the one sender delivers Event Grid too
    eventgrid.start_validating(arm_url)                      # handshakes of declared subscriptions
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import datetime

from forewarn.app.runtime import Maintenance
from forewarn.azure.arm.router import ManagementApi
from forewarn.azure.arm.wire import ArmError
from forewarn.azure.eventgrid.config import EventGridFile, EventGridFileError
from forewarn.azure.eventgrid.delivery import EventGridDelivery
from forewarn.azure.eventgrid.handshake import checked_endpoint, validate
from forewarn.azure.eventgrid.model import SUCCEEDED, EventSubscription, SystemTopic, metric_resource_id
from forewarn.azure.eventgrid.publish import eventgrid_outbox
from forewarn.azure.eventgrid.registry import EventGridRegistry
from forewarn.azure.eventgrid.settings import EventGridSettings
from forewarn.azure.fleet import azure_fleet
from forewarn.net.own_listeners import OwnListeners
from forewarn.store import SQLStore

log = logging.getLogger("forewarn.azure.eventgrid")


class EventGrid:
    def __init__(
        self, store: SQLStore, settings: EventGridSettings = EventGridSettings(), declared: EventGridFile | None = None
    ):
        self.settings = declared.settings if declared is not None else settings
        self.declared = declared
        self.registry = EventGridRegistry.load(store)
        self.outbox = eventgrid_outbox(self.registry, self.settings)
        self.service: Maintenance | None = None  # once attached
        self.delivery: EventGridDelivery | None = None
        self._to_validate: list[EventSubscription] = []
        self._validating: asyncio.Task | None = None
        self._azure_subscriptions: dict[str, str] | None = None
        self.own: OwnListeners | None = None  # the server's listeners, once it listens (keep_away_from)

    # ----------------------------------------------------------------------------------------------- set-up
    def attach(self, service: Maintenance) -> None:
        """Take the opened service (clock, seed, fleet), and apply the declared file: its topics, and its
        subscriptions that need no handshake; the others are validated once the server listens."""
        self.service = service
        self.delivery = EventGridDelivery(service, self.registry, self.settings)
        if self.declared is not None:
            self._apply_declared(self.declared)

    @property
    def attached(self) -> Maintenance:
        """The service, which every request and delivery comes after (``attach`` runs before the server listens)."""
        if self.service is None:
            raise RuntimeError("Event Grid is used before it is attached to the service")
        return self.service

    def azure_subscription(self, text: str) -> str | None:
        """The fleet's spelling of an Azure subscription id, or None if no VM of the fleet is in it."""
        if self._azure_subscriptions is None:  # the fleet never changes while serving
            self._azure_subscriptions = {}
            for vm in azure_fleet(self.attached.settled_engine().fleet).vms.values():
                self._azure_subscriptions.setdefault(vm.subscription_id.lower(), vm.subscription_id)
        return self._azure_subscriptions.get(text.lower())

    def keep_away_from(self, own: OwnListeners) -> None:
        """Refuse subscriptions whose endpoint is this server, and never send a handshake or delivery to it."""
        self.own = own
        if self.delivery is not None:
            self.delivery.own = own

    async def check_endpoint(self, subscription: EventSubscription) -> None:
        """Event Grid's 400 for a subscription whose endpoint leads back to this server (checked again at send
        time)."""
        await checked_endpoint(subscription.destination.endpoint_url, self.own)

    def register(self, management: ManagementApi) -> None:
        """Serve Microsoft.EventGrid and the validation URL on the ARM port (azure/arm/router.py)."""
        from forewarn.azure.eventgrid.arm import EventGridArm

        arm = EventGridArm(self)
        management.add_provider("microsoft.eventgrid", arm.handle)
        management.add_public("eventgrid", arm.validation_url)

    def _apply_declared(self, declared: EventGridFile) -> None:
        wanted_topics: set[str] = set()
        wanted_subscriptions: set[str] = set()
        for item in declared.topics:
            subscription_id = self.azure_subscription(item.subscription)
            if subscription_id is None:
                raise EventGridFileError(
                    f"Event Grid file: system topic {item.name}: subscription "
                    f"{item.subscription} has no VM in the fleet"
                )
            topic = SystemTopic(subscription_id, item.resource_group, item.name, "", item.tags, origin="file")
            topic = replace(topic, metric_resource_id=metric_resource_id(topic.key))
            other = self.registry.topic_of_source(subscription_id)
            if other is not None and other.key != topic.key:
                raise EventGridFileError(
                    f"Event Grid file: system topic {item.name}: subscription {subscription_id} "
                    f"already has system topic {other.id} (created through ARM); Azure allows one "
                    "per source"
                )
            wanted_topics.add(topic.key)
            if self.registry.topics.get(topic.key) != topic:
                self.registry.put_topic(topic)
                log.info("system topic %s declared in the Event Grid file", topic.id)
            for declared_subscription in item.event_subscriptions:
                subscription = replace(declared_subscription, topic_id=topic.id)
                wanted_subscriptions.add(subscription.key)
                stored = self.registry.subscriptions.get(subscription.key)
                unchanged = stored is not None and stored.definition() == subscription.definition()
                if unchanged and stored is not None and stored.state == SUCCEEDED:
                    continue  # validated before, unchanged: no new handshake on every start
                if subscription.skip_validation or not subscription.revalidates(stored):
                    self.registry.put_subscription(subscription)
                    log.info(
                        "event subscription %s declared in the Event Grid file%s",
                        subscription.id,
                        ", without validation" if subscription.skip_validation else "",
                    )
                else:
                    self._to_validate.append(subscription)
        # What an earlier version of the file declared and this one does not is removed, as the file is the record.
        for subscription in list(self.registry.subscriptions.values()):
            if subscription.origin == "file" and subscription.key not in wanted_subscriptions:
                self.registry.delete_subscription(subscription.key)
                log.info("event subscription %s removed: no longer in the Event Grid file", subscription.id)
        for topic in list(self.registry.topics.values()):
            if topic.origin == "file" and topic.key not in wanted_topics:
                self.registry.delete_topic(topic.key)

    def start_validating(self, public_base: str | None) -> None:
        """Start the handshakes of the declared subscriptions that need one, in the background (the server's sockets
        listen already, so a subscriber that GETs the validation URL at once is answered)."""
        if self._to_validate:
            self._validating = asyncio.create_task(self.validate_declared(public_base))

    async def validate_declared(self, public_base: str | None) -> None:
        """Handshakes of the declared subscriptions that need one. Without an ARM port (``--arm-port 0``) nothing
        serves the validation URL, so only the synchronous handshake can succeed."""
        pending, self._to_validate = self._to_validate, []
        public_base = public_base or "http://127.0.0.1:0"
        for subscription in pending:
            try:
                await self.validate_and_store(subscription, public_base)
            except ArmError as error:
                log.error("event subscription %s from the Event Grid file: %s", subscription.id, error.message)

    async def validate_and_store(self, subscription: EventSubscription, public_base: str) -> EventSubscription:
        """Run the handshake for a new or changed subscription and store it with its state; raises the handshake's
        ArmError (nothing stored) when the endpoint refuses."""
        topic = self.registry.topics[subscription.topic_key]
        now = self.now()
        outcome = await validate(
            subscription,
            topic,
            seed=self.attached.settled_engine().seed,
            now=now,
            public_base=public_base,
            timeout=self.settings.handshake_timeout,
            window=self.settings.validation_window,
            own=self.own,
        )
        if subscription.topic_key not in self.registry.topics:  # deleted while we waited for the subscriber
            raise ArmError(404, "ResourceNotFound", f"The system topic {topic.id} was deleted meanwhile.")
        stored = replace(subscription, state=outcome.state, validation=outcome.validation, failure=None)
        self.registry.put_subscription(stored)
        log.info("event subscription %s: %s", stored.id, stored.state)
        return stored

    def now(self) -> datetime:
        return self.attached.now()
