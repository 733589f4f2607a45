#!/usr/bin/env python3
"""Event Grid delivery throughput to a local webhook: events per second without batching and with it, side by side.

    .venv/bin/python bench/eventgrid_delivery.py                    # 2,000 events; batches of 1, 10 and 100
    .venv/bin/python bench/eventgrid_delivery.py --events 5000 --batches 1,50

For each batch size, in a fresh SQLite file store (synchronous=FULL, as ``forewarn serve`` runs it):

1. a fleet of N standalone VMs, each on its own host and opted in to central publishing, and a system topic with one
   event subscription (``maxEventsPerBatch`` = the batch size) pointing at the webhook;
2. one command schedules a Freeze on every host: N events, and N queued deliveries committed with them (the outbox;
   not timed);
3. the outbox sender (app/outbox.py with the Event Grid policy, as the server runs it) delivers them all; timed
   from the first request to the last delivery recorded in the store.

The webhook is a separate process on the lean HTTP/1.1 server forewarn's IMDS uses (server/http1.py), answering 200
and counting events; the script checks it received every event exactly once. The figure is what one subscription
gets from the sender: up to ``concurrent_requests`` requests in flight (16 by default), outcomes committed
``outcomes_per_commit`` at a time (64), so neither a round trip nor an fsync is paid per event.

Each round records the sender's CPU time (this process: the figure is CPU microseconds per event, robust on a busy
machine) and the webhook's, and the machine's other load (bench/benchlib.py). A round in which other processes used
the machine is run again, up to 3 times, then reported INVALID. The sender is not required to saturate its core: on
aiohttp's client (net/outbound.py) it is no longer CPU-bound, and waits on round trips and the commits' fsyncs, which
are part of what is measured. ``--check``: 200 events, batches 1 and 10, no verdict: fails only if an event is lost
or doubled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchlib import machine_note, markdown_table, measured
from imds_vs_nginx import VENV_BIN, BenchError, Proc, free_port, guarded, http, say

#: events/s measured before (bench/README.md, 2026-11-30: one request at a time, a commit per request).
BEFORE = {1: 741, 10: 5443, 100: 19823}
GOAL_UNBATCHED = 2000

T0 = datetime(2026, 4, 20, 22, 11, 58, tzinfo=UTC)
SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"


# ------------------------------------------------------------------------------------------------- the webhook
def serve_webhook(port: int) -> None:
    """Run as ``--webhook PORT``: 200 to every POST; GET /count answers how many events arrived."""
    from forewarn.net.http import JSON, Fresh
    from forewarn.server.http1 import Http1Server, Limits, listening_socket

    received = {"events": 0, "requests": 0}
    ok = (200, b"", JSON, ())

    def handle(request):
        if request.method == "GET":
            return Fresh((200, json.dumps(received).encode(), JSON, ()))
        body = json.loads(request.body)
        received["events"] += len(body) if isinstance(body, list) else 1
        received["requests"] += 1
        return ok

    async def main():
        server = Http1Server(handle, Limits(connections_per_source=0))  # every delivery comes from one address
        await server.start([listening_socket("127.0.0.1", port)])
        await asyncio.Event().wait()

    asyncio.run(main())


# --------------------------------------------------------------------------------------------------- a run
def fleet_text(events: int) -> str:
    central = "{scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}"
    lines = [f"defaults: {{subscription: {SUB}, resource_group: bench-rg, location: westeurope}}", "vms:"]
    lines += [
        f"  - {{name: vm-{i:05d}, host: host-{i:05d}, scheduled_events_policy: {central}}}" for i in range(events)
    ]
    return "\n".join(lines) + "\n"


async def deliver_all(events: int, batch: int, webhook: str, tmp: Path) -> dict:
    from forewarn.app.outbox import OutboxSender
    from forewarn.app.runtime import Maintenance
    from forewarn.azure import commands as azure_commands
    from forewarn.azure.eventgrid.model import EventSubscription, SystemTopic, WebHookDestination
    from forewarn.azure.eventgrid.topics import EventGrid, metric_resource_id
    from forewarn.azure.model import EventType, ScheduleRequest
    from forewarn.fleet.file import parse_fleet
    from forewarn.server.stores import open_fleet_store as open_store

    # A file of its own for each round: a round run again (refused by the verdict) starts from an empty outbox too.
    rounds = len(list(tmp.glob(f"batch-{batch}-*.db")))
    store = open_store(str(tmp / f"batch-{batch}-{rounds + 1}.db"))
    fleet = parse_fleet(fleet_text(events), "bench.yaml")
    eventgrid = EventGrid(store)
    service = Maintenance.open(store, fleet, "manual", 1.0, T0, "bench", outboxes=[eventgrid.outbox])
    eventgrid.attach(service)
    topic = SystemTopic(SUB, "events-rg", "maintenance", "")
    topic = SystemTopic(SUB, "events-rg", "maintenance", metric_resource_id(topic.key))
    eventgrid.registry.put_topic(topic)
    destination = WebHookDestination(webhook, max_events_per_batch=batch, preferred_batch_kb=1024)
    eventgrid.registry.put_subscription(EventSubscription(topic.id, f"bench-{batch}", destination))
    azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, hosts=tuple(fleet.hosts)))
    queued = len(store.due_deliveries(service.now(), limit=events + 1))
    if queued != events:
        raise BenchError(f"expected {events} queued deliveries, found {queued}")
    sender = OutboxSender(service, policies=[eventgrid.delivery])
    logging_off()
    started, cpu = time.perf_counter(), time.process_time()
    while store.next_delivery_at() is not None:
        if await sender.send_due() == 0:
            raise BenchError("deliveries are left that the sender does not send")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await sender.aclose()
    delivered = sum(1 for d in store.deliveries(events + 10) if d["status"] == "delivered")
    store.close()
    return {
        "batch": batch,
        "events": events,
        "delivered": delivered,
        "seconds": elapsed,
        "sender_cpu": cpu,
        "events_per_second": events / elapsed,
    }


def logging_off() -> None:
    import logging

    logging.getLogger().setLevel(logging.WARNING)


def run(args: argparse.Namespace, procs: list, tmp: Path) -> int:
    port = free_port()
    webhook = Proc("webhook", [str(VENV_BIN / "python"), __file__, "--webhook", str(port)], tmp / "webhook.log")
    procs.append(webhook)
    base = f"http://127.0.0.1:{port}"
    webhook.wait_ready(f"{base}/count", 30)
    sizes = [int(size) for size in args.batches.split(",")]
    results = []
    for batch in sizes:

        def one_round(batch: int = batch) -> dict:
            before = json.loads(http("GET", f"{base}/count")[1])["events"]
            result = asyncio.run(deliver_all(args.events, batch, f"{base}/events", tmp))
            arrived = json.loads(http("GET", f"{base}/count")[1])["events"] - before
            if arrived != args.events or result["delivered"] != args.events:
                raise BenchError(
                    f"batch {batch}: the webhook got {arrived} events, the store says {result['delivered']} "
                    f"delivered, of {args.events}"
                )
            return result

        # The round is this process (setting up, then sending) and the webhook; waits on fsync and round trips count.
        run = measured(one_round, {"webhook": webhook.pids}, own="sender", check=args.check)
        results.append((run.value, run))
        cpu = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in run.usage.cpu.items())
        say(
            f"# maxEventsPerBatch {batch}: {args.events} events in {run.value['seconds']:.2f} s; round CPU: {cpu} {run.note()}"
        )
    rows = []
    unbatched = next((r for r, _ in results if r["batch"] == 1), results[0][0])
    for r, run in results:
        if not run.valid:
            status = run.note()
        elif r["batch"] == 1 and not args.check:
            status = "met" if r["events_per_second"] >= GOAL_UNBATCHED else "not met"
        else:
            status = ""
        before = BEFORE.get(r["batch"])
        rows.append(
            [
                r["batch"],
                f"{r['events']:,}",
                f"{r['seconds']:.2f}",
                f"{r['events_per_second']:,.0f}",
                f"{r['sender_cpu'] / r['events'] * 1e6:,.0f}",
                f"{r['sender_cpu'] / r['seconds']:.2f}",
                f"{r['events_per_second'] / unbatched['events_per_second']:.1f}x",
                f"{before:,}" if before else "-",
                status,
            ]
        )
    say()
    headers = ["maxEventsPerBatch", "events", "seconds", "events/s", "sender CPU µs/event", "sender CPU/wall"]
    headers += ["vs unbatched", "before events/s", f"≥ {GOAL_UNBATCHED:,}/s unbatched"]
    say(markdown_table(headers, rows))
    say(f"\n{machine_note()}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batches", default="1,10,100", help="maxEventsPerBatch values to run, comma-separated")
    parser.add_argument("--check", action="store_true", help="small and fast: fails on a broken setup only")
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temporary directory (databases, logs)")
    parser.add_argument("--webhook", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.webhook:
        serve_webhook(args.webhook)
        return 0
    if args.check:
        args.events, args.batches = 200, "1,10"
    return guarded(run, args, "forewarn-bench-eventgrid-")


if __name__ == "__main__":
    sys.exit(main())
