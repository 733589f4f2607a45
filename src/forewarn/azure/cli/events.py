"""Events: ``forewarn schedule``, ``events``, ``show``, ``approve``, ``cancel`` and ``document``."""

from __future__ import annotations

import json
import sys

import click

from forewarn.cli.common import (
    CONTEXT,
    JSON_OPTION,
    control_client,
    emit,
    print_ec2_events,
    print_events,
    run,
    short_time,
    split_names,
)


@click.command(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn schedule --type Freeze --vm WestNO_0,WestNO_1           # one event, both VMs (same host and scope)
  forewarn schedule --type Reboot --host host-02 --notice 5m       # one event per scope on host-02
  forewarn schedule --type Redeploy --vm standalone-01 --source User --notice PT10M
  forewarn schedule --type Reboot --set myvmss --update-domain 1    # one update domain of a scale set
  forewarn schedule --code system-reboot --instance i-0a1b2c3d4e5f60718 --notice 1h   # EC2
Defaults per type: notice Freeze/Reboot 15m, Redeploy 10m, Preempt 30s, Terminate 10m;
DurationInSeconds 5 for Freeze, -1 (unknown) otherwise.""",
)
@click.option("--type", "event_type", help="Azure: Freeze, Reboot, Redeploy, Preempt or Terminate.")
@click.option(
    "--code",
    help="EC2: instance-reboot, system-reboot, system-maintenance, instance-retirement, "
    "instance-stop (with --instance).",
)
@click.option("--instance", "instances", multiple=True, metavar="I-ID", help="EC2 instances (with --code).")
@click.option("--vm", "vms", multiple=True, metavar="A,B", help="VMs to affect (comma-separated or repeated).")
@click.option("--host", "hosts", multiple=True, metavar="H", help="Hosts: every VM on them is affected.")
@click.option(
    "--set", "group", metavar="NAME", help="A scale set or availability set, with --update-domain or --fault-domain."
)
@click.option("--update-domain", type=int, help="With --set: the VMs of this update domain.")
@click.option("--fault-domain", type=int, help="With --set: the VMs of this fault domain.")
@click.option("--notice", help="Time until NotBefore: 30s, 15m, PT15M. Default per type.")
@click.option("--not-before", metavar="TIME", help="Explicit NotBefore (ISO 8601) instead of --notice.")
@click.option("--duration", type=int, help="DurationInSeconds shown to the VMs (-1: unknown).")
@click.option("--source", default="Platform", show_default=True, help="Platform or User.")
@click.option("--description", help="Description shown to the VMs (default depends on type and source).")
@click.option("--impact-window", help="How long the event stays Started before it completes. Default per type.")
@click.option(
    "--extra-impacts",
    type=int,
    help="Short freezes while Started, beyond the announced impact (Azure may impact a VM more than once).",
)
@JSON_OPTION
@click.pass_context
def schedule(
    ctx,
    event_type,
    code,
    instances,
    vms,
    hosts,
    group,
    update_domain,
    fault_domain,
    notice,
    not_before,
    duration,
    source,
    description,
    impact_window,
    extra_impacts,
    as_json,
):
    """Schedule maintenance: Azure events on VMs, hosts or a domain of a set (--type), or EC2 events on instances
    (--code --instance)."""
    if (event_type is None) == (code is None):
        raise click.UsageError("give --type (Azure) or --code (EC2)")
    if code is not None:
        body = {"code": code, "instances": split_names(instances)}
        for key, value in (("notice", notice), ("not_before", not_before), ("description", description)):
            if value is not None:
                body[key] = value
        emit(run(lambda: control_client(ctx).post("/v1/ec2/events", body)), as_json, print_ec2_events)
        return
    body = {"type": event_type, "vms": split_names(vms), "hosts": split_names(hosts), "source": source}
    for key, value in (
        ("notice", notice),
        ("not_before", not_before),
        ("duration_seconds", duration),
        ("description", description),
        ("impact_window", impact_window),
        ("group", group),
        ("update_domain", update_domain),
        ("fault_domain", fault_domain),
        ("extra_impacts", extra_impacts),
    ):
        if value is not None:
            body[key] = value
    events = run(lambda: control_client(ctx).post("/v1/events", body))
    emit(events, as_json, print_events)


@click.command(context_settings=CONTEXT)
@click.option("--all", "include_all", is_flag=True, help="Include Completed and Canceled events (history).")
@JSON_OPTION
@click.pass_context
def events(ctx, include_all, as_json):
    """List events: the live ones (Scheduled, Started), or all of them with --all."""
    found = run(lambda: control_client(ctx).get("/v1/events", params={"all": str(include_all).lower()}))
    emit(found, as_json, print_events)


@click.command(context_settings=CONTEXT)
@click.argument("event_id")
@JSON_OPTION
@click.pass_context
def show(ctx, event_id, as_json):
    """Show one event and its journal (what happened to it, when, and why). EVENT_ID may be an unambiguous prefix
    (at least 4 characters)."""
    client = control_client(ctx)
    event = run(lambda: client.get(f"/v1/events/{event_id}"))
    journal = run(lambda: client.get(f"/v1/events/{event_id}/journal"))

    def render(data):
        event = data["event"]
        for key, value in event.items():
            click.echo(f"{key:>22}: {_readable(value)}")
        click.echo("journal:")
        for entry in data["journal"]:
            click.echo(f"  {entry['at']}  {entry['what']:<10} {entry.get('reason', '')}")

    emit({"event": event, "journal": journal}, as_json, render)


def _readable(value: object) -> str:
    """A field of an event as a person reads it: lists comma-separated, nothing as "-", records as JSON."""
    if value is None or value == []:
        return "-"
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ", ".join(value)
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


@click.command(context_settings=CONTEXT)
@click.argument("event_ids", nargs=-1, required=True)
@JSON_OPTION
@click.pass_context
def approve(ctx, event_ids, as_json):
    """Approve events (as an IMDS POST StartRequests would), by EventId or an unambiguous prefix of it (at least 4
    characters). On shared hardware an event starts only when every tenant on its host has approved its own event,
    or at NotBefore."""
    client = control_client(ctx)
    found = run(lambda: client.post("/v1/approvals", {"event_ids": list(event_ids)}))

    def render(events):
        print_events(events)
        waiting = [event for event in events if event["status"] == "Scheduled"]
        if waiting:
            live = run(lambda: client.get("/v1/events"))
            for event in waiting:
                click.echo(_approval_outlook(event, live))

    emit(found, as_json, render)


def _approval_outlook(event: dict, live: list[dict]) -> str:
    """Why an approved event is still Scheduled: the other tenants on its host have not all approved theirs."""
    operation = [
        other for other in live if other["operation_id"] == event["operation_id"] and other["status"] == "Scheduled"
    ]
    outstanding = [other for other in operation if not other["approvals"]]
    deadline = f"at its NotBefore ({short_time(event['not_before'])} UTC)"
    if not outstanding:
        return f"{event['event_id']}: approved; still Scheduled, it starts {deadline}"
    names = "; ".join(f"{other['event_id']} ({','.join(other['resources'])})" for other in outstanding[:5])
    more = f"; and {len(outstanding) - 5} more" if len(outstanding) > 5 else ""
    count = f"{len(outstanding)} approval{'s' if len(outstanding) != 1 else ''}"
    return (
        f"{event['event_id']}: approved; it starts when every tenant on its host has approved its own event, "
        f"or {deadline}. {count} still outstanding of {len(operation)}: {names}{more}"
    )


@click.command(context_settings=CONTEXT)
@click.argument("event_id")
@JSON_OPTION
@click.pass_context
def cancel(ctx, event_id, as_json):
    """Cancel a Scheduled event (EventId or an unambiguous prefix): it leaves the document with no impact. Started
    events cannot be canceled."""
    found = run(lambda: control_client(ctx).post(f"/v1/events/{event_id}/cancel"))
    emit([found], as_json, print_events)


@click.command(context_settings=CONTEXT)
@click.argument("vm")
@click.option("--api-version", default="2020-07-01", show_default=True)
@click.option("--pretty", is_flag=True, help="Indent the JSON for reading (no longer the served bytes).")
@click.option("--raw", is_flag=True, help="The served bytes only, without the newline after them.")
@click.pass_context
def document(ctx, vm, api_version, pretty, raw):
    """Print the scheduled-events document VM sees right now: the exact bytes its IMDS serves, then a newline (none
    with --raw, to compare or hash the bytes), or indented with --pretty."""
    if pretty and raw:
        raise click.UsageError("--pretty and --raw exclude each other: --raw prints the served bytes as they are")
    response = run(
        lambda: control_client(ctx).send("GET", f"/v1/vms/{vm}/scheduledevents", params={"api-version": api_version})
    )
    if pretty:
        click.echo(json.dumps(response.json(), indent=2))
        return
    out = sys.stdout.buffer
    out.write(response.content if raw else response.content + b"\n")
    out.flush()
