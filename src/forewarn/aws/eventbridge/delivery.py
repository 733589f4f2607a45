"""EventBridge's delivery to SQS targets: each event a command puts on the bus is matched against the rules, and
each matching rule's queue target gets a delivery committed with the command (the outbox: aws/serving/wiring.py gives ``bus_outbox`` to the service as it opens),
sent by the outbox's sender under the ``sqs`` policy below. At least once, as EventBridge delivers: a target whose
queue does not exist (yet) is retried for 24 hours, EventBridge's default retry window ("Event retry policy and
using dead-letter queues"). Faults (aws/faults.py) may send a delivery twice, or with a delay."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta

from forewarn.app.errors import Unavailable
from forewarn.app.outbox import retry_delay
from forewarn.app.runtime import Maintenance
from forewarn.aws.component import Ec2Component
from forewarn.aws.eventbridge.events import bus_events, hook_message
from forewarn.aws.faults import faults_of
from forewarn.aws.lifecycle import LifecycleActionChanged
from forewarn.aws.queues import QueueMissing
from forewarn.core.changes import Change, DeliveryMade
from forewarn.core.errors import CoreError
from forewarn.engine.engine import Engine
from forewarn.net.outbound import Outbound
from forewarn.store import Attempt, Delivery, Outgoing

log = logging.getLogger("forewarn.eventbridge")

KIND = "sqs"
RETRY_FOR = timedelta(hours=24)


def bus_outbox(changes: list[Change], engine: Engine) -> list[Outgoing]:
    """One delivery per event and matching rule's target (``Maintenance.add_outbox``)."""
    component = engine.component(Ec2Component)
    bus = component.bus
    items = [
        Outgoing(target, json.dumps(message, separators=(",", ":")), engine.now + RETRY_FOR, kind=KIND)
        for target, message in hook_notifications(changes, engine)
    ]
    if not bus.rules:
        return items
    for event in bus_events(changes, engine):
        payload = None
        for _rule, target in bus.targets_of(event):
            payload = payload or json.dumps(event, separators=(",", ":"))
            items.append(Outgoing(target.arn, payload, engine.now + RETRY_FOR, kind=KIND))
    return items


def hook_notifications(changes: list[Change], engine: Engine) -> list[tuple[str, dict]]:
    """The messages lifecycle hooks with an SQS notification target send when an instance starts to wait."""
    component = engine.component(Ec2Component)
    found = []
    for change in changes:
        if isinstance(change, LifecycleActionChanged) and change.what == "started":
            hook = component.lifecycle.hooks.get(f"{change.action.group}/{change.action.hook}")
            if hook is not None and hook.notification_target_arn:
                message = hook_message(change.action, hook.notification_metadata)
                instance = component.ec2_instances[change.action.instance_id]
                message["AccountId"] = instance.account_id
                found.append((hook.notification_target_arn, message))
    return found


class QueueDelivery:
    """The ``sqs`` sending policy: a delivery is a message sent to the queue its target ARN names."""

    kind = KIND

    def __init__(self, service: Maintenance):
        self.service = service

    async def deliver(self, client: Outbound, deliveries: list[Delivery]) -> None:
        """The lane's deliveries sent together (one group commit); the failures recorded together after."""
        outcomes = await asyncio.gather(*(self.attempt(delivery) for delivery in deliveries))
        failed = [outcome for outcome in outcomes if outcome is not None]
        await asyncio.to_thread(self.service.store.record_attempts, failed)  # off the loop, as the outbox

    async def attempt(self, delivery: Delivery) -> Attempt | None:
        """Send one delivery. Sent, it is recorded delivered in the send's own transaction (None): a crash after it
        neither loses the message nor has it sent again. Refused, the attempt to record."""
        attempts = delivery.attempts + 1
        name = delivery.target.rpartition(":")[2]
        copies, delay = faults_of(self.service).fate(delivery.delivery_id)
        error = None

        def send(engine: Engine) -> list[Change]:
            queues = engine.component(Ec2Component).queues
            sent = [change for _ in range(copies) for change in queues.send(name, delivery.payload, delay=delay)]
            return [*sent, DeliveryMade(delivery.delivery_id, attempts)]

        try:
            await self.service.perform_soon(
                send,
                check=lambda engine: self.check(engine, delivery.target, name),
            )
        except CoreError as refused:
            error = str(refused)
        except Unavailable as failure:
            error = f"the store failed: {failure}"
        if error is None:
            return None
        now = self.service.now()
        next_at = now + retry_delay(delivery.delivery_id, attempts)
        log.info("delivery %s to %s: %s (attempt %s)", delivery.delivery_id, delivery.target, error, attempts)
        status = "expired" if next_at > delivery.expires_at else "pending"
        return Attempt(delivery.delivery_id, status, attempts, next_at, error)

    @staticmethod
    def check(engine: Engine, arn: str, name: str) -> None:
        """Refused before anything changes: the target's queue is not there (or is another region's)."""
        if engine.component(Ec2Component).queues.by_arn(arn) is None:
            raise QueueMissing(f"the target queue {arn} does not exist", name=name)
