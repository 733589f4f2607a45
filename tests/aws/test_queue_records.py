"""SQS queues and messages, EventBridge rules and Auto Scaling hooks in the store, on SQLite and PostgreSQL: what a
group commit writes (a message received and deleted in one commit stays deleted), and what a restart reads back."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from forewarn.app.runtime import Maintenance
from forewarn.aws.component import Ec2Component
from forewarn.aws.eventbridge.delivery import QueueDelivery
from forewarn.aws.eventbus import Rule, Target
from forewarn.aws.lifecycle import TERMINATING, LifecycleHook
from forewarn.aws.queues import MessageAttribute, MessageChanged, QueueSettings, Redrive
from forewarn.fleet.file import parse_fleet
from forewarn.store import Attempt, Outgoing
from helpers import T0, open_store

FLEET = """
hosts: [{name: h1}]
ec2_instances:
  - {id: i-0aaaaaaaaaaaaaaa1, host: h1, auto_scaling_group: web}
"""


def open_service(url: str) -> Maintenance:
    return Maintenance.open(open_store(url), parse_fleet(FLEET), "manual", 1.0, T0, "seed")


def component(service: Maintenance) -> Ec2Component:
    return service.settled_engine().component(Ec2Component)


def test_everything_comes_back_after_a_restart(store_url):
    service = open_service(store_url)
    redrive = Redrive("arn:aws:sqs:us-east-1:123456789012:dead", 3)
    service.perform(
        lambda e: e.component(Ec2Component).queues.create("dead", "us-east-1", "123456789012", QueueSettings())
    )
    service.perform(
        lambda e: e.component(Ec2Component).queues.create(
            "work", "us-east-1", "123456789012", QueueSettings(visibility_timeout=10, redrive=redrive)
        )
    )
    attribute = MessageAttribute("raw", "Binary", None, b"\x00\x01")
    for body in ("one", "two", "three"):
        service.perform(lambda e, body=body: e.component(Ec2Component).queues.send("work", body, (attribute,)))

    async def received_and_deleted_in_one_commit() -> None:
        # One group commit: a delete (its statement comes first), a receive (an upsert of "two"), then a purge of the
        # same queue (a delete of "two"): "two" must stay deleted, whatever order the statements run in.
        got = await service.perform_soon(lambda e: e.component(Ec2Component).queues.receive("scratch", 1))
        receipt = next(c.message.receipt for c in got if isinstance(c, MessageChanged))
        await asyncio.gather(
            service.perform_soon(lambda e: e.component(Ec2Component).queues.delete_message("scratch", receipt)),
            service.perform_soon(lambda e: e.component(Ec2Component).queues.receive("scratch", 1)),
            service.perform_soon(lambda e: e.component(Ec2Component).queues.purge("scratch")),
        )
        assert component(service).queues.messages["scratch"] == {}

    queues = component(service).queues
    service.perform(lambda e: e.component(Ec2Component).queues.create("scratch", "us-east-1", "1", QueueSettings()))
    for body in ("one", "two"):
        service.perform(lambda e, body=body: e.component(Ec2Component).queues.send("scratch", body))
    got = service.perform(lambda e: e.component(Ec2Component).queues.receive("work", 1))
    receipt = next(c.message.receipt for c in got if isinstance(c, MessageChanged))
    service.perform(lambda e: e.component(Ec2Component).queues.delete_message("work", receipt))
    assert len(queues.messages["work"]) == 2
    asyncio.run(received_and_deleted_in_one_commit())
    fifo = QueueSettings(fifo=True, content_based_deduplication=True)
    service.perform(lambda e: e.component(Ec2Component).queues.create("jobs.fifo", "us-east-1", "1", fifo))
    service.perform(lambda e: e.component(Ec2Component).queues.send("jobs.fifo", "job", group_id="g"))
    pattern = {"source": ["aws.ec2"]}
    rule = Rule("r", pattern, json.dumps(pattern), "us-east-1", "123456789012", T0, targets=())
    service.perform(lambda e: e.component(Ec2Component).bus.put_rule(rule))
    service.perform(lambda e: e.component(Ec2Component).bus.put_targets("r", [Target("q", "arn:aws:sqs:x:1:work")]))
    hook = LifecycleHook("web", "drain", TERMINATING, heartbeat_timeout=120)
    service.perform(lambda e: e.component(Ec2Component).put_lifecycle_hook(hook))
    service.perform(lambda e: e.component(Ec2Component).terminate_in_group("i-0aaaaaaaaaaaaaaa1", True))
    before = component(service)
    kept = (
        before.queues.queues,
        before.queues.messages,
        before.bus.rules,
        before.lifecycle.hooks,
        before.lifecycle.actions,
    )
    service.store.close()

    after = component(open_service(store_url))
    assert (
        after.queues.queues,
        after.queues.messages,
        after.bus.rules,
        after.lifecycle.hooks,
        after.lifecycle.actions,
    ) == kept
    assert [m.body for m in after.queues.messages["work"].values()] == ["two", "three"]
    [job] = after.queues.messages["jobs.fifo"].values()
    assert (job.group_id, after.queues.queues["jobs.fifo"].sent[0].message_id) == ("g", job.message_id)
    assert after.queues.messages["work"]["" + next(iter(after.queues.messages["work"]))].attributes == (attribute,)
    assert after.ec2_states["i-0aaaaaaaaaaaaaaa1"].lifecycle_state == "Terminated"


WARNING = '{"detail-type":"EC2 Spot Instance Interruption Warning"}'


def test_a_delivery_to_a_queue_is_recorded_delivered_in_the_transaction_that_puts_its_message_there(store_url):
    """Recorded in a transaction of its own after the send, a process killed between the two would have the outbox
    send the message again when it starts: a handler would get the interruption warning twice."""
    service = open_service(store_url)
    service.perform(lambda e: e.component(Ec2Component).queues.create("durable", "us-east-1", "1", QueueSettings()))
    arn = component(service).queues.queues["durable"].arn
    service.store.commit([], service.now(), None, [Outgoing(arn, WARNING, service.now() + timedelta(hours=1), "sqs")])
    [delivery] = service.store.due_deliveries(service.now())

    async def attempted() -> Attempt | None:
        return await QueueDelivery(service).attempt(delivery)

    assert asyncio.run(attempted()) is None  # nothing left for the outbox to record
    service.store.close()
    again = open_service(store_url)
    assert [m.body for m in component(again).queues.messages["durable"].values()] == [WARNING]
    assert [row["status"] for row in again.store.deliveries()] == ["delivered"]
    assert again.store.due_deliveries(again.now() + timedelta(days=2)) == []
