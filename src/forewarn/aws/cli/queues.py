"""``forewarn queues``: the SQS queues on the EC2 API's port, and the faults of the AWS queue path."""

from __future__ import annotations

import click

from forewarn.cli.common import CONTEXT, JSON_OPTION, control_client, emit, print_table, run
from forewarn.core.words import counted

SERVICES = ("ec2", "sqs", "events", "autoscaling")  # aws/faults.py's, named here so `--help` imports nothing


def _print_queues(queues: list[dict]) -> None:
    rows = [("QUEUE", "VISIBLE", "IN FLIGHT", "DELAYED", "DEAD-LETTER TARGET")]
    for q in queues:
        target = q["dead_letter_target_arn"]
        redrive = "-" if target is None else f"{target.rpartition(':')[2]} after {q['max_receive_count']}"
        rows.append((q["name"], str(q["visible"]), str(q["in_flight"]), str(q["delayed"]), redrive))
    print_table(rows)


def _print_queue(queue: dict) -> None:
    _print_queues([queue])
    if not queue["messages"]:
        return
    click.echo()
    rows = [("MESSAGE", "SENT", "VISIBLE AT", "RECEIVED", "BODY")]
    for m in queue["messages"]:
        rows.append((m["message_id"], m["sent_at"], m["visible_at"], str(m["receive_count"]), m["body"]))
    print_table(rows, cell_limit=80)


def _print_faults(faults: dict) -> None:
    rows = [("THROTTLE", "SERVICE", "ACTIONS", "RATE/S", "BURST", "REFUSED")]
    for t in faults["throttles"]:
        actions = ",".join(t["actions"]) or "(all)"
        rows.append(
            (str(t["throttle_id"]), t["service"], actions, f"{t['rate']:g}", str(t["burst"]), str(t["refused"]))
        )
    if len(rows) > 1:
        print_table(rows)
    d = faults["deliveries"]
    click.echo(f"deliveries: {d['duplicate']:g} duplicated, {d['delayed']:g} delayed by {d['delay_seconds']}s")


@click.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn queues list
  forewarn queues show nth                          # every message, without receiving any
  forewarn queues throttle ec2 DescribeInstanceStatus --rate 2 --burst 5
  forewarn queues throttle sqs --burst 0            # every SQS request refused (RequestThrottled)
  forewarn queues deliveries --duplicate 0.5 --delayed 1 --delay 30s
  forewarn queues faults
  forewarn queues clear-faults""",
)
def queues():
    """SQS queues on the EC2 API's port, and faults of the queue path (throttling, delayed or duplicated deliveries)."""


@queues.command(name="list", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def queues_list(ctx, as_json):
    """Every queue and how many messages it holds (visible, in flight, delayed)."""
    emit(run(lambda: control_client(ctx).get("/v1/ec2/queues")), as_json, _print_queues)


@queues.command(name="show", context_settings=CONTEXT)
@click.argument("name")
@JSON_OPTION
@click.pass_context
def queues_show(ctx, name, as_json):
    """A queue and its messages, oldest first (nothing is received)."""
    emit(run(lambda: control_client(ctx).get(f"/v1/ec2/queues/{name}")), as_json, _print_queue)


@queues.command(name="faults", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def queues_faults(ctx, as_json):
    """The faults set: throttles (with the requests each refused) and delivery faults."""
    emit(run(lambda: control_client(ctx).get("/v1/ec2/faults")), as_json, _print_faults)


@queues.command(name="throttle", context_settings=CONTEXT)
@click.argument("service", type=click.Choice(SERVICES))
@click.argument("actions", nargs=-1)
@click.option("--rate", type=float, default=0.0, show_default=True, help="Requests a second let through.")
@click.option("--burst", type=int, default=0, show_default=True, help="Requests let through at once.")
@JSON_OPTION
@click.pass_context
def queues_throttle(ctx, service, actions, rate, burst, as_json):
    """Throttle a service's ACTIONS (all when none is named): a throttled request gets its throttling error."""
    body = {"service": service, "actions": list(actions), "rate": rate, "burst": burst}
    emit(
        run(lambda: control_client(ctx).post("/v1/ec2/faults/throttles", body)),
        as_json,
        lambda t: _print_faults({"throttles": [t], "deliveries": {"duplicate": 0, "delayed": 0, "delay_seconds": 0}}),
    )


@queues.command(name="deliveries", context_settings=CONTEXT)
@click.option("--duplicate", type=float, default=0.0, show_default=True, help="Fraction of deliveries sent twice.")
@click.option("--delayed", type=float, default=0.0, show_default=True, help="Fraction of deliveries held back.")
@click.option("--delay", help="How long a held-back delivery waits, on forewarn's clock (e.g. 30s, at most 15m).")
@JSON_OPTION
@click.pass_context
def queues_deliveries(ctx, duplicate, delayed, delay, as_json):
    """Duplicate or delay deliveries from rules and lifecycle hooks to queues (replaces the previous setting)."""
    body = {"duplicate": duplicate, "delayed": delayed, "delay": delay}
    emit(
        run(lambda: control_client(ctx).request("PUT", "/v1/ec2/faults/deliveries", json=body)),
        as_json,
        lambda d: _print_faults({"throttles": [], "deliveries": d}),
    )


@queues.command(name="clear-faults", context_settings=CONTEXT)
@click.pass_context
def queues_clear_faults(ctx):
    """Remove every throttle and delivery fault."""
    cleared = run(lambda: control_client(ctx).request("DELETE", "/v1/ec2/faults"))
    click.echo(f"cleared {counted(cleared['cleared'], 'fault')}")
