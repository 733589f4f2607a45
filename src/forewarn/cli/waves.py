"""``forewarn wave``: roll maintenance across a fleet (registered on the main CLI)."""

from __future__ import annotations

import time

import click

from forewarn.cli.common import CONTEXT, JSON_OPTION, control_client, emit, fail, run, split_names
from forewarn.core.words import counted


def _print_wave(wave: dict, outcome: str | None = None) -> None:
    """A wave's state; ``outcome``: a line on what the command just did, printed after it."""
    flight = ", ".join(unit["unit"] for unit in wave["in_flight"]) or "-"
    what = f"Compute Engine {wave['type']} maintenance" if wave["cloud"] == "gce" else wave["type"]
    click.echo(
        f"{wave['wave_id']}  {wave['status']}  {what} by {wave['by']}, {wave['concurrency']} at a time"
        f"{'  (' + wave['name'] + ')' if wave['name'] else ''}"
    )
    click.echo(
        f"  units: {wave['done']} done, {len(wave['in_flight'])} in flight, {len(wave['skipped'])} skipped, "
        f"{wave['units']} in all"
    )
    click.echo(f"  in flight: {flight}")
    if wave["skipped"]:
        click.echo(f"  skipped (nothing left to maintain): {', '.join(wave['skipped'])}")
    click.echo(f"  over: {', '.join(wave['groups']) or 'the whole fleet'}")
    click.echo(f"  created {wave['created_at']}" + (f", finished {wave['finished_at']}" if wave["finished_at"] else ""))
    if outcome is not None:
        click.echo(outcome)


@click.group(
    name="wave",
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn wave start --type Freeze --by update-domain              # the whole fleet, one domain at a time
  forewarn wave start --by host --concurrency 50 --follow           # 50 hosts at a time, show progress
  forewarn wave start --type Reboot --set westno --by fault-domain --notice 5m
  forewarn wave start --cloud gce --by zone --notice 7d --follow    # Compute Engine, zone by zone
  forewarn wave start --cloud gce --by host --set us-central1-a     # one zone's instances, host by host
  forewarn wave list
  forewarn wave cancel wave-12
Waves: docs/waves.md.""",
)
def wave() -> None:
    """Roll maintenance across a fleet, domain by domain, zone by zone or host by host, like a region rolls a host
    update."""


@wave.command(name="start", context_settings=CONTEXT)
@click.option(
    "--cloud",
    type=click.Choice(["azure", "gce"]),
    default="azure",
    show_default=True,
    help="Azure VMs (Scheduled Events) or Compute Engine instances (host maintenance).",
)
@click.option(
    "--type",
    "event_type",
    help="Azure: Freeze (default), Reboot or Redeploy. Compute Engine: SCHEDULED (default) or UNSCHEDULED.",
)
@click.option(
    "--by",
    "order",
    type=click.Choice(["update-domain", "fault-domain", "zone", "host"]),
    help="What one unit of the rollout is. Azure: update-domain (default), fault-domain or host; Compute Engine: "
    "zone (default) or host.",
)
@click.option("--concurrency", type=int, default=1, show_default=True, help="Units in flight at once.")
@click.option(
    "--set",
    "groups",
    multiple=True,
    metavar="NAME",
    help="What to cover (repeat, or comma-separated); default: the cloud's whole fleet. Azure: a scale set, "
    "availability set or VM; Compute Engine: a zone or an instance.",
)
@click.option(
    "--notice",
    help="Time from a unit's scheduling to its start (Azure: NotBefore; default the type's notice. Compute Engine: "
    "the maintenance start; default each instance's notice, 60s or 1h with GPUs; longer is announced as upcoming "
    "maintenance).",
)
@click.option("--impact-window", help="Azure: how long each event stays Started.")
@click.option("--duration", "duration_seconds", type=int, help="Azure: DurationInSeconds of the events.")
@click.option("--description", help="Azure: Description of the events.")
@click.option("--source", help="Azure: EventSource, Platform (default) or User.")
@click.option("--window", help="Compute Engine: the window upcoming maintenance shows.  [default: 1h]")
@click.option(
    "--no-reschedule", is_flag=True, help="Compute Engine: canReschedule false (the user may not start or move it)."
)
@click.option("--latest", help="Compute Engine: how much later than its start the user may reschedule it.")
@click.option("--name", default="", help="A label for the wave.")
@click.option(
    "--follow",
    is_flag=True,
    help="Show progress until the wave ends; on a manual clock, move the clock (deadline by deadline).",
)
@JSON_OPTION
@click.pass_context
def wave_start(
    ctx,
    cloud,
    event_type,
    order,
    concurrency,
    groups,
    notice,
    impact_window,
    duration_seconds,
    description,
    source,
    window,
    no_reschedule,
    latest,
    name,
    follow,
    as_json,
):
    """Start a wave. Its units (update domains, fault domains, zones or hosts) go in order, at most CONCURRENCY at
    a time; a unit's events are scheduled as soon as the previous unit's events have all completed."""
    body = {"cloud": cloud, "concurrency": concurrency, "groups": split_names(groups), "name": name}
    if no_reschedule:
        body["can_reschedule"] = False
    for key, value in (
        ("type", event_type),
        ("by", order),
        ("source", source),
        ("notice", notice),
        ("impact_window", impact_window),
        ("duration_seconds", duration_seconds),
        ("description", description),
        ("window", window),
        ("latest", latest),
    ):
        if value is not None:
            body[key] = value
    started = run(lambda: control_client(ctx).post("/v1/waves", body))
    if not follow:
        emit(
            started,
            as_json,
            lambda data: _print_wave(data["wave"], f"  {counted(data['scheduled'], 'event')} scheduled"),
        )
        return
    _follow(ctx, started["wave"]["wave_id"], as_json)


def _follow(ctx, wave_id: str, as_json: bool) -> None:
    """Poll the wave until it ends; move a manual clock to its next deadline each round (a real clock moves by
    itself). One progress line per change, on stderr when the result goes to stdout as JSON."""
    client = control_client(ctx)
    manual = run(lambda: client.get("/v1/clock"))["mode"] == "manual"
    last = None
    while True:
        current = run(lambda: client.get(f"/v1/waves/{wave_id}"))
        clock = run(lambda: client.get("/v1/clock"))
        line = (
            f"{clock['now']}  {wave_id}: {current['done'] + len(current['skipped'])}/{counted(current['units'], 'unit')}, "
            f"{len(current['in_flight'])} in flight"
        )
        if line != last:
            click.echo(line, err=as_json)
            last = line
        if current["status"] != "running":
            break
        if manual:
            if clock["next_deadline"] is None:
                fail(f"{wave_id} is running but the clock has no deadline left")
            run(lambda: client.post("/v1/clock/next"))
        else:
            time.sleep(0.5)
    emit(current, as_json, _print_wave)


@wave.command(name="list", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def wave_list(ctx, as_json):
    """Every wave, oldest first."""

    def render(waves):
        if not waves:
            click.echo("no waves")
        for item in waves:
            click.echo(
                f"{item['wave_id']:<12} {item['status']:<10} {item['cloud']:<5} {item['type']:<11} by {item['by']:<14} "
                f"{item['done'] + len(item['skipped'])}/{counted(item['units'], 'unit')}  {item['name']}".rstrip()
            )

    emit(run(lambda: control_client(ctx).get("/v1/waves")), as_json, render)


@wave.command(name="show", context_settings=CONTEXT)
@click.argument("wave_id")
@JSON_OPTION
@click.pass_context
def wave_show(ctx, wave_id, as_json):
    """A wave's progress: units done, in flight (with their operations) and skipped."""
    emit(run(lambda: control_client(ctx).get(f"/v1/waves/{wave_id}")), as_json, _print_wave)


@wave.command(name="cancel", context_settings=CONTEXT)
@click.argument("wave_id")
@JSON_OPTION
@click.pass_context
def wave_cancel(ctx, wave_id, as_json):
    """Stop a wave: nothing more is scheduled; its Scheduled events are canceled, Started ones finish."""
    emit(
        run(lambda: control_client(ctx).post(f"/v1/waves/{wave_id}/cancel")),
        as_json,
        lambda data: _print_wave(data["wave"], f"  {counted(data['canceled'], 'event')} canceled"),
    )
