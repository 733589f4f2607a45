"""Event Grid delivery to one subscription: concurrent requests up to a bound, outcomes committed in groups, and at
least once across a crash between the requests and their commit.

In process (the outbox sender as the server runs it, on a SQLite file store), against a real HTTP/1.1 webhook on
loopback that holds each request a little and counts how many are in flight at once.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from forewarn.app.outbox import OutboxSender
from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.eventgrid.model import EventSubscription, SystemTopic, WebHookDestination
from forewarn.azure.eventgrid.settings import EventGridSettings
from forewarn.azure.eventgrid.topics import EventGrid, metric_resource_id
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.fleet.file import parse_fleet
from forewarn.net.outbound import Outbound
from forewarn.net.own_listeners import Destination, OwnListeners
from forewarn.server.stores import open_fleet_store
from forewarn.store import StoreError
from helpers import T0

SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
EVENTS = 20


class SlowWebhook:
    """Answers 200 to every POST after ``hold`` seconds, recording event ids and the most requests in flight."""

    def __init__(self, hold: float):
        self.hold = hold
        self.in_flight = 0
        self.most_in_flight = 0
        self.received: list[str] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}/events"

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                await asyncio.sleep(self.hold)
                self.in_flight -= 1
                self.received += [event["id"] for event in json.loads(body)]
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def fleet_text() -> str:
    central = "{scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}"
    lines = [f"defaults: {{subscription: {SUB}, resource_group: rg, location: westeurope}}", "vms:"]
    lines += [
        f"  - {{name: vm-{i:03d}, host: host-{i:03d}, scheduled_events_policy: {central}}}" for i in range(EVENTS)
    ]
    return "\n".join(lines) + "\n"


def open_service(db: Path, settings: EventGridSettings, webhook: str | None) -> tuple[Maintenance, EventGrid]:
    store = open_fleet_store(str(db))
    fleet = parse_fleet(fleet_text(), "fleet.yaml")
    eventgrid = EventGrid(store, settings)
    service = Maintenance.open(store, fleet, "manual", 1.0, T0, "test", outboxes=[eventgrid.outbox])
    eventgrid.attach(service)
    if webhook is not None:  # a fresh database: the topic, the subscription and the events
        topic = SystemTopic(SUB, "events-rg", "maintenance", "")
        topic = SystemTopic(SUB, "events-rg", "maintenance", metric_resource_id(topic.key))
        eventgrid.registry.put_topic(topic)
        eventgrid.registry.put_subscription(EventSubscription(topic.id, "hook", WebHookDestination(webhook)))
        azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, hosts=tuple(fleet.hosts)))
    return service, eventgrid


async def send_due(service, eventgrid) -> None:
    """One round of the server's outbox sender: what is due now is sent and its outcomes recorded."""
    sender = OutboxSender(service, policies=[eventgrid.delivery])
    try:
        await sender.send_due()
    finally:
        await sender.aclose()


def statuses(service: Maintenance) -> Counter[str]:
    return Counter(d["status"] for d in service.store.deliveries(100))


@pytest.mark.parametrize("bound", [1, 4])
def test_requests_to_one_subscription_go_out_concurrently_up_to_the_bound(tmp_path, bound):
    async def scenario() -> SlowWebhook:
        webhook = SlowWebhook(hold=0.05)
        url = await webhook.start()
        service, eventgrid = open_service(tmp_path / "eg.db", EventGridSettings(concurrent_requests=bound), url)
        try:
            await send_due(service, eventgrid)
            assert statuses(service) == {"delivered": EVENTS}
        finally:
            service.store.close()
            await webhook.stop()
        return webhook

    webhook = asyncio.run(scenario())
    assert webhook.most_in_flight == bound
    assert len(webhook.received) == len(set(webhook.received)) == EVENTS


def test_outcomes_are_committed_in_groups(tmp_path):
    async def scenario() -> list[int]:
        webhook = SlowWebhook(hold=0.0)
        url = await webhook.start()
        settings = EventGridSettings(concurrent_requests=4, outcomes_per_commit=8)
        service, eventgrid = open_service(tmp_path / "eg.db", settings, url)
        groups: list[int] = []
        record = service.store.record_attempts

        def counted(attempts):
            groups.append(len(attempts))
            record(attempts)

        service.store.record_attempts = counted  # type: ignore[method-assign]
        try:
            await send_due(service, eventgrid)
            assert statuses(service) == {"delivered": EVENTS}
        finally:
            service.store.close()
            await webhook.stop()
        return groups

    assert asyncio.run(scenario()) == [8, 8, 4]  # 20 outcomes: two full groups, the rest when the round ends


def test_outcomes_wait_for_a_busy_database_without_holding_the_event_loop(tmp_path):
    """The group commit's thread may hold the database (a part of a clock move) when a round's outcomes are
    recorded: the metadata GETs, on the same loop, must not wait for it."""
    held = 0.4

    async def scenario() -> float:
        webhook = SlowWebhook(hold=0.0)
        url = await webhook.start()
        service, eventgrid = open_service(tmp_path / "eg.db", EventGridSettings(outcomes_per_commit=8), url)
        due = service.store.due_deliveries(service.now(), 100)
        holding, release = threading.Event(), threading.Event()

        def hold_the_database() -> None:
            with service.store.guard:
                holding.set()
                release.wait(held)

        holder = threading.Thread(target=hold_the_database)
        holder.start()
        client = Outbound(5.0)
        try:
            assert holding.wait(5)
            delivery = asyncio.create_task(eventgrid.delivery.deliver(client, due))
            longest, last = 0.0, time.monotonic()
            while not delivery.done():
                await asyncio.sleep(0.005)
                now = time.monotonic()
                longest, last = max(longest, now - last), now
            await delivery
            assert statuses(service) == {"delivered": EVENTS}
        finally:
            release.set()
            holder.join()
            await client.aclose()
            service.store.close()
            await webhook.stop()
        return longest

    longest = asyncio.run(scenario())
    assert longest < held / 2, f"the loop was held {longest * 1000:.0f} ms while the database was busy"


def test_a_crash_between_the_requests_and_their_commit_sends_them_again(tmp_path):
    """The process dies after the webhook answered and before the outcomes were committed (the commit never
    happens): the store still holds every delivery as due, and the server started again sends each one again."""
    db = tmp_path / "eg.db"
    settings = EventGridSettings(concurrent_requests=4, outcomes_per_commit=100)

    async def crash(webhook: SlowWebhook) -> None:
        service, eventgrid = open_service(db, settings, await webhook.start())

        def dies(attempts):
            raise StoreError("the process died before this commit")

        service.store.record_attempts = dies  # type: ignore[method-assign]
        try:
            await send_due(service, eventgrid)
        finally:
            service.store.close()

    async def restart(webhook: SlowWebhook) -> Counter[str]:
        service, eventgrid = open_service(db, settings, None)
        try:
            assert statuses(service) == {"pending": EVENTS}
            assert {d["attempts"] for d in service.store.deliveries(100)} == {0}
            await send_due(service, eventgrid)
            return statuses(service)
        finally:
            service.store.close()

    async def scenario() -> tuple[SlowWebhook, Counter[str]]:
        webhook = SlowWebhook(hold=0.0)
        await crash(webhook)
        assert len(webhook.received) == EVENTS  # every event went out before the crash
        try:
            after = await restart(webhook)
        finally:
            await webhook.stop()
        return webhook, after

    webhook, after = asyncio.run(scenario())
    assert after == {"delivered": EVENTS}
    assert set(Counter(webhook.received).values()) == {2}  # each event twice: at least once, never lost


def test_endpoints_that_give_no_answer_are_told_apart_and_checked_once_per_round(tmp_path):
    """A name that does not resolve is ResolutionError, a port nobody listens on SocketError (both retried); the
    endpoint goes through the guard against this server's own listeners once for the round, not once per event."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = "http://127.0.0.1:%d/events" % unused.getsockname()[1]

    async def scenario(url: str) -> tuple[list[dict], int]:
        service, eventgrid = open_service(tmp_path / f"eg-{len(list(tmp_path.iterdir()))}.db", EventGridSettings(), url)
        checked = []

        class Counted(OwnListeners):
            async def destination(self, url: str) -> Destination:
                checked.append(url)
                return await super().destination(url)

        eventgrid.delivery.own = Counted({})
        try:
            await send_due(service, eventgrid)
            return service.store.deliveries(100), len(checked)
        finally:
            service.store.close()

    for url, outcome in (("http://no-such-host.invalid/events", "ResolutionError"), (closed, "SocketError")):
        deliveries, checks = asyncio.run(scenario(url))
        assert checks == 1
        assert len(deliveries) == EVENTS
        for delivery in deliveries:
            assert (delivery["status"], delivery["attempts"]) == ("pending", 1), delivery
            assert delivery["detail"]["lastDeliveryOutcome"] == outcome
            assert delivery["last_error"].startswith("cannot connect: ")


def test_the_bounds_are_checked():
    with pytest.raises(ValueError, match="concurrent_requests"):
        EventGridSettings(concurrent_requests=0)
    with pytest.raises(ValueError, match="outcomes_per_commit"):
        EventGridSettings(outcomes_per_commit=0)
