"""The ``forewarn`` command: run the server, and drive it (schedule, approve, cancel, move time)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import sys
from dataclasses import replace
from datetime import datetime, timedelta

import click

from forewarn import __version__
from forewarn.azure.model import EventType, parse_enum
from forewarn.cli.client import ClientError, ControlClient
from forewarn.core.clock import MODES
from forewarn.core.durations import parse_duration
from forewarn.core.errors import CoreError

DEFAULT_SERVER = "http://127.0.0.1:8170"

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _client(ctx: click.Context) -> ControlClient:
    root = ctx.find_root().params
    token = root.get("control_token")
    return ControlClient(root["server"], headers={"Authorization": f"Bearer {token}"} if token else None)


def _fail(message: str) -> None:
    click.echo(f"forewarn: {message}", err=True)
    sys.exit(1)


def _run(action):
    try:
        return action()
    except (ClientError, CoreError) as error:
        _fail(str(error))


def _emit(data, as_json: bool, render) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        render(data)


@click.group(
    context_settings=CONTEXT,
    epilog="""\b
Start a server with the demo fleet on a hand-moved clock, then drive it from another shell:
  forewarn serve --fleet demo --db demo.db --clock manual
  forewarn schedule --type Freeze --vm WestNO_0,WestNO_1
  curl -s -H Metadata:true 'http://127.0.0.10:8169/metadata/scheduledevents?api-version=2020-07-01'
  forewarn clock next          # NotBefore passes: the event is Started
  forewarn clock next          # the impact window ends: the event leaves the document
  forewarn events --all
Docs: docs/ in the source tree (control.md lists every command and endpoint).""",
)
@click.option(
    "--server",
    envvar="FOREWARN_SERVER",
    default=DEFAULT_SERVER,
    show_default=True,
    help="Control API of the server to drive (env FOREWARN_SERVER).",
)
@click.option(
    "--control-token",
    envvar="FOREWARN_CONTROL_TOKEN",
    metavar="TOKEN",
    help="The server's control token, when it has one (env FOREWARN_CONTROL_TOKEN).",
)
@click.version_option(__version__, prog_name="forewarn")
def cli(server: str, control_token: str | None) -> None:
    """forewarn: cloud maintenance notifications (Azure Scheduled Events), self-hosted, on a clock you control."""


# ------------------------------------------------------------------------------------------------------ serve
def _key_pairs(values: tuple[str, ...]) -> dict[str, str] | None:
    pairs = {}
    for value in values:
        key, sep, secret = value.partition(":")
        if not sep or not key or not secret:
            raise click.BadParameter(f"expected KEY_ID:SECRET, got {value!r}", param_hint="--ec2-credential")
        pairs[key] = secret
    return pairs or None


def _seconds(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value).total_seconds()
    except CoreError as error:
        raise click.BadParameter(str(error), param_hint=option) from None


def _positive_seconds(value: str, option: str) -> float:
    seconds = _seconds(value, option)
    if not seconds or seconds <= 0:
        raise click.BadParameter("must be longer than 0s", param_hint=option)
    return seconds


def _per_type(values: tuple[str, ...], option: str) -> dict:
    result = {}
    for value in values:
        name, sep, duration = value.partition("=")
        if not sep:
            raise click.BadParameter(f"expected TYPE=DURATION, e.g. Freeze=5m; got {value!r}", param_hint=option)
        try:
            result[parse_enum(EventType, name, "event type")] = parse_duration(duration)
        except CoreError as error:
            raise click.BadParameter(str(error), param_hint=option) from None
    return result


@cli.command(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn serve --fleet demo                          # demo fleet, real clock, forewarn.db
  forewarn serve --fleet fleet.yaml --clock manual --start 2026-04-20T22:00:00Z --db :memory:
  forewarn serve --fleet fleet.yaml --speed 60          # a wall second is a simulated minute
  forewarn serve --db postgresql://127.0.0.1/test       # PostgreSQL; the fleet is already stored there
A database remembers its fleet, events, incarnations and clock; restart with the same --db to continue.""",
)
@click.option(
    "--fleet",
    "fleet_source",
    metavar="FILE|demo",
    help="Fleet file (YAML), or 'demo' for the built-in demo fleet. Needed the first time a database is used.",
)
@click.option("--db", default="forewarn.db", show_default=True, help="SQLite file, ':memory:', or a postgresql:// URL.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Control API address.")
@click.option("--port", default=8170, type=click.IntRange(0, 65535), show_default=True, help="Control API port.")
@click.option(
    "--arm-port",
    default=8171,
    type=click.IntRange(0, 65535),
    show_default=True,
    help="Azure Resource Manager–shaped management API port, on --host (0: off).",
)
@click.option(
    "--ec2-port",
    default=8172,
    type=click.IntRange(0, 65535),
    show_default=True,
    help="EC2 Query API port, on --host, for boto3 and the aws CLI (--endpoint-url; 0: off).",
)
@click.option("--imds-host", default="127.0.0.1", show_default=True, help="Metadata endpoint address.")
@click.option(
    "--imds-port",
    default=8169,
    type=click.IntRange(0, 65535),
    show_default=True,
    help="Metadata endpoint port (real IMDS: 169.254.169.254:80).",
)
@click.option(
    "--clock",
    "clock_mode",
    type=click.Choice(MODES),
    help="real: follows the wall clock (see --speed); manual: moves only with `forewarn clock`. "
    "Default: the database's stored setting; real for a new database.",
)
@click.option(
    "--speed",
    type=float,
    help="Real clock rate: 60 makes a wall second a simulated minute. Default: stored; 1 for a new database.",
)
@click.option("--start", metavar="TIME", help="Simulated start time of a new database (ISO 8601); default: now.")
@click.option("--seed", help="Seed of the EventIds of a new database; the same seed and commands give the same ids.")
@click.option(
    "--notice", multiple=True, metavar="TYPE=DURATION", help="Default notice per event type, e.g. Freeze=15m."
)
@click.option(
    "--impact-window",
    multiple=True,
    metavar="TYPE=DURATION",
    help="How long events of a type stay Started, e.g. Reboot=10m.",
)
@click.option(
    "--imds-profile",
    type=click.Choice(["strict", "lenient", "realistic"]),
    default="strict",
    show_default=True,
    help="strict: every request rule of real IMDS; lenient: what Microsoft's mock "
    "accepts; realistic: strict plus rate limit, enabling by first request, first-call delay, down VMs "
    "unreachable. The options below override single settings.",
)
@click.option(
    "--unknown-event-ids",
    type=click.Choice(["reject", "accept"]),
    help="What an IMDS POST naming an EventId the VM cannot see gets: 400, or 200 and ignored.",
)
@click.option("--rate-limit", type=float, metavar="N", help="Requests per second per VM before 429 (0: none).")
@click.option("--first-call-delay", metavar="DURATION", help="Wall time the enabling request waits (real: up to 2m).")
@click.option(
    "--require-enabling/--no-require-enabling",
    default=None,
    help="Scopes get notice only after their first request, and lose it after --disable-after idle.",
)
@click.option("--disable-after", metavar="DURATION", help="Idle time after which a scope is disabled (24h).")
@click.option(
    "--while-down",
    type=click.Choice(["answer", "drop"]),
    help="Requests of VMs that are down (rebooting, redeploying, deleted): answered, or dropped.",
)
@click.option(
    "--hardware-failure-type",
    type=click.Choice(["Redeploy", "Reboot"]),
    help="EventType of hardware-failure events; Microsoft's pages disagree (default Redeploy, as the overview says).",
)
@click.option(
    "--ec2-imds-tokens",
    type=click.Choice(["optional", "required"]),
    default="optional",
    show_default=True,
    help="EC2 IMDSv2: required rejects IMDSv1 requests with 401 (HttpTokens=required).",
)
@click.option(
    "--ec2-credential",
    multiple=True,
    metavar="KEY_ID:SECRET",
    help="Verify SigV4 signatures on the EC2 API with these key pairs (repeatable); default: any "
    "credentials are accepted.",
)
@click.option(
    "--health-webhook",
    multiple=True,
    metavar="URL",
    help="Deliver AWS Health events (EventBridge format) for EC2 events to this URL; repeatable.",
)
@click.option(
    "--health-entity",
    type=click.Choice(["arn", "instance-id"]),
    default="arn",
    show_default=True,
    help="What affectedEntities and resources carry: the instance ARN (current docs) or its id (older).",
)
@click.option(
    "--access",
    "access_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Bearer tokens and role assignments for the ARM port (docs/azure-central.md); without it, no token is needed.",
)
@click.option(
    "--resource-graph-retention",
    metavar="DURATION",
    default="30d",
    show_default=True,
    help="How long Resource Graph keeps a scheduled event's row after its last change (live ones stay).",
)
@click.option(
    "--resource-graph-delay",
    metavar="DURATION",
    default="0s",
    show_default=True,
    help="How long a change takes to show in Resource Graph (Azure: 'within 5 minutes in general').",
)
@click.option(
    "--resource-graph-query-timeout",
    metavar="DURATION",
    default="30s",
    show_default=True,
    help="Wall time a Resource Graph query may run before it is stopped and answered QueryTimeout.",
)
@click.option(
    "--event-grid",
    "event_grid_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Event Grid settings, system topics and event subscriptions to serve from the start "
    "(docs/azure-eventgrid.md); ARM PUTs add more either way.",
)
@click.option(
    "--event-grid-dead-letters",
    metavar="DIR",
    help="Where Event Grid dead letters are written, as {container}/{SUBSCRIPTION}/{Y}/{M}/{D}/{H}/{guid}.json "
    "(default: the file's dead_letter_dir, else ./eventgrid-deadletters).",
)
@click.option(
    "--event-grid-duplicates",
    type=click.FloatRange(0, 1),
    metavar="RATE",
    help="Share of Event Grid publications delivered twice with the same id "
    "(Event Grid's double notifications), e.g. 0.01.",
)
@click.option(
    "--event-grid-no-retry",
    metavar="CODES",
    help="HTTP codes Event Grid does not retry but dead-letters at once (default 400,401,403,413).",
)
@click.option(
    "--imds-limit",
    "imds_limits",
    multiple=True,
    metavar="NAME=VALUE",
    help="A bound of the metadata port's HTTP server, e.g. connections_per_source=256 for a load generator "
    "or many simulated VMs on one address (names and defaults: docs/azure-imds.md, HTTP server limits).",
)
@click.option(
    "--api-limit",
    "api_limits",
    multiple=True,
    metavar="NAME=VALUE",
    help="The same bounds for the control, ARM and EC2 API ports.",
)
@click.option(
    "--control-token",
    envvar="FOREWARN_CONTROL_TOKEN",
    metavar="TOKEN",
    help="Require 'Authorization: Bearer TOKEN' on the control API (env FOREWARN_CONTROL_TOKEN, which keeps "
    "it out of the process list); needed when --host is beyond loopback.",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Let the control API listen beyond loopback without --control-token (warned about loudly).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="Another Host name the control, ARM and EC2 ports answer to (repeatable; .example.com: a domain "
    "and its subdomains; *: any). Loopback names and IP addresses are always answered.",
)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning"]), default="info", show_default=True)
def serve(
    fleet_source,
    db,
    host,
    port,
    arm_port,
    ec2_port,
    imds_host,
    imds_port,
    clock_mode,
    speed,
    start,
    seed,
    notice,
    impact_window,
    imds_profile,
    unknown_event_ids,
    rate_limit,
    first_call_delay,
    require_enabling,
    disable_after,
    while_down,
    hardware_failure_type,
    ec2_imds_tokens,
    ec2_credential,
    health_webhook,
    health_entity,
    access_file,
    resource_graph_retention,
    resource_graph_delay,
    resource_graph_query_timeout,
    event_grid_file,
    event_grid_dead_letters,
    event_grid_duplicates,
    event_grid_no_retry,
    imds_limits,
    api_limits,
    control_token,
    insecure,
    allowed_hosts,
    log_level,
) -> None:
    """Run the server: control API and Azure IMDS, on one store and one clock."""
    from forewarn.app.runtime import FleetMismatch, Maintenance
    from forewarn.aws.health.events import HealthSettings, health_outbox
    from forewarn.aws.imds.metadata import Ec2ImdsSettings
    from forewarn.azure.arm.access import AccessFileError, load_access
    from forewarn.azure.eventgrid.config import EventGridFileError
    from forewarn.azure.imds.scheduled_events import PROFILES
    from forewarn.azure.resource_graph.api import ResourceGraphSettings
    from forewarn.control.access import exposure
    from forewarn.core.times import parse_time
    from forewarn.engine.rules import Rules
    from forewarn.fleet.file import FleetFileError, load_fleet_document
    from forewarn.server.bootstrap import AzureManagementSettings, ListenError, Listeners, PortAccess
    from forewarn.server.bootstrap import serve as run_server
    from forewarn.server.http1 import Limits
    from forewarn.server.stores import open_fleet_store
    from forewarn.server.uvicorn_guard import MANAGEMENT_LIMITS
    from forewarn.store import StoreError

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if control_token is not None and (not control_token.strip() or control_token != control_token.strip()):
        raise click.BadParameter(
            "expected a non-empty token without leading or trailing spaces", param_hint="--control-token"
        )
    refusal, warnings = exposure(
        host,
        control_token,
        insecure,
        open_arm=bool(arm_port) and not access_file,
        open_ec2=bool(ec2_port) and not ec2_credential,
    )
    if refusal is not None:
        _fail(f"refusing to start: {refusal}")
    for warning in warnings:
        logging.getLogger("forewarn.server").warning(warning)
    settings = PROFILES[imds_profile]
    overrides = {
        "unknown_event_ids": unknown_event_ids,
        "rate_limit": rate_limit,
        "while_down": while_down,
        "first_call_delay": _seconds(first_call_delay, "--first-call-delay"),
    }
    settings = replace(settings, **{key: value for key, value in overrides.items() if value is not None})
    enabling = imds_profile == "realistic" if require_enabling is None else require_enabling
    extra_rules = {"enabling_required": enabling}
    if disable_after is not None:
        extra_rules["disable_after"] = timedelta(seconds=_seconds(disable_after, "--disable-after"))
    if hardware_failure_type is not None:
        extra_rules["hardware_failure_type"] = EventType(hardware_failure_type)
    rules = Rules().with_overrides(
        _per_type(notice, "--notice"), _per_type(impact_window, "--impact-window"), **extra_rules
    )
    try:
        document = load_fleet_document(fleet_source) if fleet_source else None
        fleet = document.fleet if document else None
        declared = None
        if document is not None and document.event_grid is not None:
            if event_grid_file:
                _fail("Event Grid is declared in the fleet file (event_grid:) and in --event-grid; keep one")
            declared = (f"{fleet_source}: event_grid", document.event_grid)
        start_time = parse_time(start) if start else None
        store = open_fleet_store(db)
        event_grid = _event_grid(
            store, event_grid_file, declared, event_grid_dead_letters, event_grid_duplicates, event_grid_no_retry
        )
        azure = AzureManagementSettings(
            event_grid=event_grid,
            access=load_access(access_file) if access_file else None,
            resource_graph=ResourceGraphSettings(
                retention=parse_duration(resource_graph_retention),
                delay=parse_duration(resource_graph_delay),
                query_timeout=_positive_seconds(resource_graph_query_timeout, "--resource-graph-query-timeout"),
            ),
        )
        health = HealthSettings(targets=tuple(health_webhook), entity=health_entity)
        outboxes = [health_outbox(health)] if health.targets else []
        outboxes.append(event_grid.outbox)
        service = Maintenance.open(store, fleet, clock_mode, speed, start_time, seed, rules, outboxes=outboxes)
        event_grid.attach(service)
    except (FleetFileError, StoreError, FleetMismatch, CoreError, AccessFileError, EventGridFileError) as error:
        _fail(str(error))
    try:
        metadata_limits = Limits().updated(imds_limits)
        management_limits = MANAGEMENT_LIMITS.updated(api_limits)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--imds-limit/--api-limit") from None
    listeners = Listeners(
        control=(host, port),
        imds=(imds_host, imds_port),
        arm=(host, arm_port) if arm_port else None,
        ec2_api=(host, ec2_port) if ec2_port else None,
    )
    try:
        ec2_settings = Ec2ImdsSettings(tokens=ec2_imds_tokens, while_down=settings.while_down)
        _event_loop_runner()(
            run_server(
                service,
                listeners,
                settings,
                ec2_settings,
                _key_pairs(ec2_credential),
                azure=azure,
                metadata_limits=metadata_limits,
                management_limits=management_limits,
                access=PortAccess(tuple(allowed_hosts), control_token),
            )
        )
    except ListenError as error:
        _fail(_listen_failure(error))
    except OSError as error:
        _fail(f"cannot listen: {error.strerror or error}")
    except KeyboardInterrupt:
        pass
    finally:
        store.close()


# Which serve options choose the address of each of the server's listeners (ListenError.role).
_LISTEN_OPTIONS = {
    "control": ("control API", "--host/--port"),
    "imds": ("metadata endpoint", "--imds-host/--imds-port"),
    "arm": ("ARM API", "--host/--arm-port, 0 turns it off"),
    "ec2_api": ("EC2 API", "--host/--ec2-port, 0 turns it off"),
}


def _listen_failure(error) -> str:
    host, port = error.address
    what, options = _LISTEN_OPTIONS[error.role]
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    hint = "; is another forewarn serve running?" if error.errno == errno.EADDRINUSE else ""
    return f"cannot listen on {where} for the {what} (set by {options}): {error.strerror}{hint}"


def _event_grid(store, path, section, dead_letters, duplicates, no_retry):
    """The Event Grid emulation: the settings and resources of the --event-grid file or of the fleet file's
    event_grid section (``(where, data)``), with the flags over its settings."""
    from pathlib import Path

    from forewarn.azure.eventgrid.config import EventGridFileError, load_event_grid_file, parse_event_grid
    from forewarn.azure.eventgrid.settings import EventGridSettings
    from forewarn.azure.eventgrid.topics import EventGrid

    declared = load_event_grid_file(path) if path else parse_event_grid(section[1], section[0]) if section else None
    overrides: dict = {}
    if dead_letters:
        overrides["dead_letter_dir"] = Path(dead_letters)
    if duplicates is not None:
        overrides["duplicate_rate"] = duplicates
    if no_retry is not None:
        try:
            overrides["non_retried_codes"] = frozenset(int(code) for code in no_retry.split(",") if code.strip())
        except ValueError:
            raise click.BadParameter(
                f"expected HTTP codes such as 400,401,403,413; got {no_retry!r}", param_hint="--event-grid-no-retry"
            ) from None
    try:
        settings = replace(declared.settings if declared else EventGridSettings(), **overrides)
    except ValueError as error:
        raise EventGridFileError(f"Event Grid settings: {error}") from None
    if declared is None:  # no file: the stored topics and subscriptions stay as they are
        return EventGrid(store, settings)
    return EventGrid(store, declared=replace(declared, settings=settings))


def _event_loop_runner():
    """uvloop when installed (uvicorn[standard] brings it): the IMDS hot path is much faster on it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


# --------------------------------------------------------------------------------------------------- events
def _short_time(text: str | None) -> str:
    if not text:
        return "-"
    return datetime.fromisoformat(text.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S")


def _print_table(rows: list[tuple[str, ...]], cell_limit: int | None = None) -> None:
    """Rows of text as aligned columns (the first row is the header); cells longer than ``cell_limit`` are cut."""
    if cell_limit is not None:
        rows = [tuple(cell[:cell_limit] for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _print_events(events: list[dict]) -> None:
    if not events:
        click.echo("no events")
        return
    rows = [("EVENT ID", "STATUS", "TYPE", "SOURCE", "NOT BEFORE (UTC)", "RESOURCES")]
    for e in events:
        rows.append(
            (e["event_id"], e["status"], e["type"], e["source"], _short_time(e["not_before"]), ",".join(e["resources"]))
        )
    _print_table(rows)


def _split(values: tuple[str, ...]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


@cli.command(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn schedule --type Freeze --vm WestNO_0,WestNO_1           # one event, both VMs (same host and scope)
  forewarn schedule --type Reboot --host host-02 --notice 5m       # one event per scope on host-02
  forewarn schedule --type Redeploy --vm standalone-01 --source User --notice PT10M
  forewarn schedule --type Reboot --set myvmss --update-domain 1    # one update domain of a scale set
  forewarn schedule --code system-reboot --instance i-0aaaaaaaaaaaaaaa1 --notice 1h   # EC2
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
        body = {"code": code, "instances": _split(instances)}
        for key, value in (("notice", notice), ("not_before", not_before), ("description", description)):
            if value is not None:
                body[key] = value
        _emit(_run(lambda: _client(ctx).post("/v1/ec2/events", body)), as_json, _print_ec2_events)
        return
    body = {"type": event_type, "vms": _split(vms), "hosts": _split(hosts), "source": source}
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
    events = _run(lambda: _client(ctx).post("/v1/events", body))
    _emit(events, as_json, _print_events)


@cli.command(context_settings=CONTEXT)
@click.option("--all", "include_all", is_flag=True, help="Include Completed and Canceled events (history).")
@JSON_OPTION
@click.pass_context
def events(ctx, include_all, as_json):
    """List events: the live ones (Scheduled, Started), or all of them with --all."""
    found = _run(lambda: _client(ctx).get("/v1/events", params={"all": str(include_all).lower()}))
    _emit(found, as_json, _print_events)


@cli.command(context_settings=CONTEXT)
@click.argument("event_id")
@JSON_OPTION
@click.pass_context
def show(ctx, event_id, as_json):
    """Show one event and its journal (what happened to it, when, and why). EVENT_ID may be an unambiguous prefix
    (at least 4 characters)."""
    client = _client(ctx)
    event = _run(lambda: client.get(f"/v1/events/{event_id}"))
    journal = _run(lambda: client.get(f"/v1/events/{event_id}/journal"))

    def render(data):
        event = data["event"]
        for key, value in event.items():
            click.echo(f"{key:>22}: {value}")
        click.echo("journal:")
        for entry in data["journal"]:
            click.echo(f"  {entry['at']}  {entry['what']:<10} {entry.get('reason', '')}")

    _emit({"event": event, "journal": journal}, as_json, render)


@cli.command(context_settings=CONTEXT)
@click.argument("event_ids", nargs=-1, required=True)
@JSON_OPTION
@click.pass_context
def approve(ctx, event_ids, as_json):
    """Approve events (as an IMDS POST StartRequests would), by EventId or an unambiguous prefix of it (at least 4
    characters). On shared hardware an event starts only when every tenant on its host has approved its own event,
    or at NotBefore."""
    client = _client(ctx)
    found = _run(lambda: client.post("/v1/approvals", {"event_ids": list(event_ids)}))

    def render(events):
        _print_events(events)
        waiting = [event for event in events if event["status"] == "Scheduled"]
        if waiting:
            live = _run(lambda: client.get("/v1/events"))
            for event in waiting:
                click.echo(_approval_outlook(event, live))

    _emit(found, as_json, render)


def _approval_outlook(event: dict, live: list[dict]) -> str:
    """Why an approved event is still Scheduled: the other tenants on its host have not all approved theirs."""
    operation = [
        other for other in live if other["operation_id"] == event["operation_id"] and other["status"] == "Scheduled"
    ]
    outstanding = [other for other in operation if not other["approvals"]]
    deadline = f"at its NotBefore ({_short_time(event['not_before'])} UTC)"
    if not outstanding:
        return f"{event['event_id']}: approved; still Scheduled, it starts {deadline}"
    names = "; ".join(f"{other['event_id']} ({','.join(other['resources'])})" for other in outstanding[:5])
    more = f"; and {len(outstanding) - 5} more" if len(outstanding) > 5 else ""
    count = f"{len(outstanding)} approval{'s' if len(outstanding) != 1 else ''}"
    return (
        f"{event['event_id']}: approved; it starts when every tenant on its host has approved its own event, "
        f"or {deadline}. {count} still outstanding of {len(operation)}: {names}{more}"
    )


@cli.command(context_settings=CONTEXT)
@click.argument("event_id")
@JSON_OPTION
@click.pass_context
def cancel(ctx, event_id, as_json):
    """Cancel a Scheduled event (EventId or an unambiguous prefix): it leaves the document with no impact. Started
    events cannot be canceled."""
    found = _run(lambda: _client(ctx).post(f"/v1/events/{event_id}/cancel"))
    _emit([found], as_json, _print_events)


# ---------------------------------------------------------------------------------------------------- clock
def _print_clock(clock: dict) -> None:
    speed = f" x{clock['speed']:g}" if clock["mode"] == "real" and clock["speed"] != 1 else ""
    click.echo(f"{clock['now']}  ({clock['mode']}{speed} clock; next deadline: {clock['next_deadline'] or 'none'})")


@cli.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn clock show
  forewarn clock advance 10m        # also 30s, 1h30m, PT15M
  forewarn clock set 2026-04-20T22:30:00Z
  forewarn clock next               # jump to the next NotBefore or end of an impact window""",
)
def clock():
    """Show or move simulated time (moving needs a server started with --clock manual)."""


def _print_clock_move(moved: dict) -> None:
    """The new time, then what the move did: one line per change, ``what  id  type  targets``."""
    _print_clock(moved)
    changes = moved.get("changes", [])
    if not changes:
        click.echo("  nothing happened")
        return
    kinds = {"vm": "VM", "instance": "instance", "wave": "wave"}
    rows = [
        (
            "",
            change["what"],
            change["id"],
            change["type"] or kinds.get(change["kind"], ""),
            "" if change["targets"] == [change["id"]] else ",".join(change["targets"]),
        )
        for change in changes
    ]
    _print_table(rows, cell_limit=80)
    if moved["changes_total"] > len(changes):
        click.echo(
            f"  ... and {moved['changes_total'] - len(changes)} more changes (forewarn events --all, or GET "
            "/v1/journal)"
        )


def _clock_call(ctx: click.Context, as_json: bool, path: str, body: dict | None = None) -> None:
    client = _client(ctx)
    result = _run(lambda: client.get(path) if body is None else client.post(path, body))
    _emit(result, as_json, _print_clock if body is None else _print_clock_move)


@clock.command(name="show", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def clock_show(ctx, as_json):
    """Show simulated time and the next deadline."""
    _clock_call(ctx, as_json, "/v1/clock")


@clock.command(name="advance", context_settings=CONTEXT)
@click.argument("duration")
@JSON_OPTION
@click.pass_context
def clock_advance(ctx, duration, as_json):
    """Move time forward by DURATION (30s, 10m, 1h30m, PT15M), applying every deadline on the way in order; prints
    what started, completed, recovered or changed (--json: the same as data)."""
    try:
        parse_duration(duration)
    except CoreError as error:
        raise click.BadParameter(str(error), param_hint="DURATION") from None
    _clock_call(ctx, as_json, "/v1/clock/advance", {"by": duration})


@clock.command(name="set", context_settings=CONTEXT)
@click.argument("time")
@JSON_OPTION
@click.pass_context
def clock_set(ctx, time, as_json):
    """Move time forward to TIME (ISO 8601, e.g. 2026-04-20T22:30:00Z)."""
    _clock_call(ctx, as_json, "/v1/clock/set", {"to": time})


@clock.command(name="next", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def clock_next(ctx, as_json):
    """Jump to the next deadline (a NotBefore or the end of an impact window) and apply it; prints what changed."""
    _clock_call(ctx, as_json, "/v1/clock/next", {})


# ---------------------------------------------------------------------------------------------------- fleet
@cli.group(
    context_settings=CONTEXT,
    invoke_without_command=True,
    epilog="""\b
Examples:
  forewarn fleet                                   # the served fleet's VMs
  forewarn fleet generate --vms 100000 --out big.yaml
  forewarn serve --fleet big.yaml --db big.db --clock manual""",
)
@JSON_OPTION
@click.pass_context
def fleet(ctx, as_json):
    """List the fleet's VMs: host, broadcast scope and where their metadata endpoint answers (or generate one)."""
    if ctx.invoked_subcommand is not None:
        return
    found = _run(lambda: _client(ctx).get("/v1/fleet"))

    def render(data):
        rows = [("VM", "HOST", "SCOPE", "FD", "UD", "IMDS ADDRESS", "IMDS PORT")]
        for vm in data["vms"]:
            rows.append(
                (
                    vm["name"],
                    vm["host"],
                    vm["scope"],
                    str(vm["fault_domain"]),
                    str(vm["update_domain"]),
                    vm["imds_address"] or "-",
                    str(vm["imds_port"] or "-"),
                )
            )
        _print_table(rows)

    _emit(found, as_json, render)


@fleet.command(name="generate", context_settings=CONTEXT)
@click.option("--vms", type=int, required=True, help="How many Azure VMs.")
@click.option("--vms-per-host", type=int, default=10, show_default=True)
@click.option("--subscriptions", type=int, default=0, help="How many subscriptions (default: one per 10,000 VMs).")
@click.option("--scale-set-share", type=float, default=0.6, show_default=True, help="Share of VMs in scale sets.")
@click.option(
    "--availability-set-share",
    type=float,
    default=0.3,
    show_default=True,
    help="Share of VMs in availability sets; the rest are standalone.",
)
@click.option("--spot-share", type=float, default=0.05, show_default=True, help="Share of standalone VMs on Spot.")
@click.option("--seed", default="forewarn", show_default=True, help="The same seed writes the same file.")
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, writable=True),
    default="-",
    show_default=True,
    help="File to write ('-': stdout).",
)
def fleet_generate(vms, vms_per_host, subscriptions, scale_set_share, availability_set_share, spot_share, seed, out):
    """Write a large fleet file (scale sets, availability sets, standalone and Spot VMs over shared hosts), for
    waves and benchmarks. Reproducible from its seed."""
    from forewarn.fleet.generate import FleetShape, fleet_yaml

    shape = FleetShape(vms, vms_per_host, subscriptions, scale_set_share, availability_set_share, spot_share, seed)
    try:
        text = fleet_yaml(shape)
    except ValueError as error:
        _fail(str(error))
    if out == "-":
        click.echo(text, nl=False)
        return
    with open(out, "w") as handle:
        handle.write(text)
    click.echo(f"wrote {out}: {text.splitlines()[0].split(': ', 1)[1]}", err=True)


@cli.command(context_settings=CONTEXT)
@click.argument("vm")
@click.option("--api-version", default="2020-07-01", show_default=True)
@click.option("--pretty", is_flag=True, help="Indent the JSON for reading (no longer the served bytes).")
@click.pass_context
def document(ctx, vm, api_version, pretty):
    """Print the scheduled-events document VM sees right now: the exact bytes its IMDS serves (no newline added
    when the output is a file or a pipe), or indented with --pretty."""
    response = _run(
        lambda: _client(ctx).send("GET", f"/v1/vms/{vm}/scheduledevents", params={"api-version": api_version})
    )
    if pretty:
        click.echo(json.dumps(response.json(), indent=2))
        return
    out = click.get_binary_stream("stdout")
    out.write(response.content)
    if sys.stdout.isatty():  # a terminal's prompt would otherwise follow the JSON on the same line
        out.write(b"\n")
    out.flush()


# ------------------------------------------------------------------------------------- VMs and the platform
def _print_vms(vms: list[dict]) -> None:
    rows = [("VM", "POWER", "HOST", "BOOTED (UTC)", "IMPACTED BY", "MODEL")]
    for vm in vms:
        model = f"{vm['model_version']}" + ("" if vm["latest_model"] else " (not latest)")
        rows.append(
            (vm["name"], vm["power"], vm["host"], _short_time(vm["booted_at"]), vm["impacted_by"] or "-", model)
        )
    _print_table(rows)


def _print_outcome(outcome: dict) -> None:
    if outcome["events"]:
        _print_events(outcome["events"])
    if outcome["vms"]:
        _print_vms(outcome["vms"])
    if not outcome["events"] and not outcome["vms"]:
        click.echo("nothing changed")


@cli.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn vm list
  forewarn vm restart standalone-01          # a User Reboot; Started at once under automaticallyApprove
  forewarn vm redeploy WestNO_0 --notice 2m
  forewarn vm delete myvmss_2                # a Terminate event if the instance's model enables it
  forewarn vm reimage myvmss_0               # announced as a Reboot with OS image notifications""",
)
def vm():
    """VMs: their running state, and the operations a user starts on them."""


@vm.command(name="list", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def vm_list(ctx, as_json):
    """Every VM's power state, host, boot time and model version."""
    _emit(_run(lambda: _client(ctx).get("/v1/vms")), as_json, _print_vms)


@vm.command(name="show", context_settings=CONTEXT)
@click.argument("name")
@JSON_OPTION
@click.pass_context
def vm_show(ctx, name, as_json):
    """One VM's running state."""
    _emit(_run(lambda: _client(ctx).get(f"/v1/vms/{name}")), as_json, lambda data: _print_vms([data]))


def _vm_operation(action: str, help_text: str, with_notice: bool):
    params = [
        click.Argument(["names"], nargs=-1, required=True),
        click.Option(["--json", "as_json"], is_flag=True, help="Print JSON."),
    ]
    if with_notice:
        params.append(click.Option(["--notice"], help="Time until NotBefore (default per type)."))

    @click.pass_context
    def command(ctx, names, as_json, notice=None):
        body = {"vms": _split(names)}
        if notice is not None:
            body["notice"] = notice
        _emit(_run(lambda: _client(ctx).post(f"/v1/vms/{action}", body)), as_json, _print_outcome)

    vm.add_command(click.Command(action, callback=command, params=params, help=help_text, context_settings=CONTEXT))


_vm_operation("restart", "Restart VMs: a User Reboot event.", True)
_vm_operation("redeploy", "Redeploy VMs to other hosts: a User Redeploy event.", True)
_vm_operation("reimage", "Reimage VMs (announced only with OS image notifications).", False)
_vm_operation("delete", "Delete VMs (announced by Terminate only with terminate notifications).", False)


@cli.group(context_settings=CONTEXT)
def vmss():
    """Scale sets: scale in, and update instances to the latest model."""


@vmss.command(name="scale-in", context_settings=CONTEXT)
@click.argument("name")
@click.option("--count", type=int, default=1, show_default=True, help="How many instances to remove.")
@JSON_OPTION
@click.pass_context
def vmss_scale_in(ctx, name, count, as_json):
    """Remove instances, highest instance ids first (Terminate events if the profile is on)."""
    _emit(_run(lambda: _client(ctx).post(f"/v1/scale-sets/{name}/scale-in", {"count": count})), as_json, _print_outcome)


@vmss.command(name="update-instances", context_settings=CONTEXT)
@click.argument("name")
@click.argument("instances", nargs=-1)
@JSON_OPTION
@click.pass_context
def vmss_update_instances(ctx, name, instances, as_json):
    """Bring instances (all when none are named) to the latest model, so that profile changes apply to them."""
    _emit(
        _run(lambda: _client(ctx).post(f"/v1/scale-sets/{name}/update-instances", {"vms": list(instances)})),
        as_json,
        _print_outcome,
    )


def _print_policy(policy: dict) -> None:
    for key, value in policy.items():
        click.echo(f"{key:>24}: {value}")


@cli.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn policy show westno
  forewarn policy set westno --auto-approve-reboot
  forewarn policy set myvmss --terminate-notification PT10M
  forewarn vmss update-instances myvmss        # instances follow the new profile from now on
  forewarn policy set myvmss --terminate-notification off""",
)
def policy():
    """scheduledEventsPolicy and scale-set notification profiles."""


@policy.command(name="show", context_settings=CONTEXT)
@click.argument("owner")
@JSON_OPTION
@click.pass_context
def policy_show(ctx, owner, as_json):
    """The policy of a scale set, an availability set or a standalone VM."""
    _emit(_run(lambda: _client(ctx).get(f"/v1/policies/{owner}")), as_json, _print_policy)


def _profile_option(value: str | None) -> dict | None:
    if value is None:
        return None
    if value.lower() == "off":
        return {"enable": False}
    return {"enable": True, "not_before_timeout": value}


@policy.command(name="set", context_settings=CONTEXT)
@click.argument("owner")
@click.option(
    "--auto-approve-reboot/--no-auto-approve-reboot", default=None, help="userInitiatedReboot.automaticallyApprove"
)
@click.option(
    "--auto-approve-redeploy/--no-auto-approve-redeploy",
    default=None,
    help="userInitiatedRedeploy.automaticallyApprove",
)
@click.option("--terminate-notification", metavar="PT5M..PT15M|off", help="Scale sets: terminate notifications.")
@click.option("--os-image-notification", metavar="PT15M|off", help="Scale sets: OS image notifications.")
@click.option(
    "--central/--no-central",
    "publish_central",
    default=None,
    help="Publish this owner's new events to Event Grid and Resource Graph "
    "(scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph).",
)
@JSON_OPTION
@click.pass_context
def policy_set(
    ctx,
    owner,
    auto_approve_reboot,
    auto_approve_redeploy,
    terminate_notification,
    os_image_notification,
    publish_central,
    as_json,
):
    """Change a policy or a notification profile."""
    body = {}
    if auto_approve_reboot is not None:
        body["auto_approve_reboot"] = auto_approve_reboot
    if auto_approve_redeploy is not None:
        body["auto_approve_redeploy"] = auto_approve_redeploy
    if publish_central is not None:
        body["publish_central"] = publish_central
    for key, value in (
        ("terminate_notification", terminate_notification),
        ("os_image_notification", os_image_notification),
    ):
        if value is not None:
            body[key] = _profile_option(value)
    if not body:
        raise click.UsageError("nothing to change; see forewarn policy set --help")
    _emit(_run(lambda: _client(ctx).request("PATCH", f"/v1/policies/{owner}", json=body)), as_json, _print_policy)


@cli.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn platform hardware-failure host-02                  # events appear as Started, no notice
  forewarn platform hardware-failure host-02 --type Reboot
  forewarn platform predicted-failure host-01 --notice 3d     # a Redeploy days ahead
  forewarn platform evict spot-worker-01                      # Preempt, 30 s""",
)
def platform():
    """The platform's exceptional cases: hardware failures, predicted failures, Spot evictions."""


@platform.command(name="hardware-failure", context_settings=CONTEXT)
@click.argument("hosts", nargs=-1, required=True)
@click.option("--type", "event_type", help="Redeploy (default) or Reboot: the docs disagree.")
@JSON_OPTION
@click.pass_context
def platform_hardware_failure(ctx, hosts, event_type, as_json):
    """Hosts fail: the notice is bypassed and their VMs' events appear as Started."""
    body = {"hosts": _split(hosts)}
    if event_type:
        body["type"] = event_type
    _emit(_run(lambda: _client(ctx).post("/v1/platform/hardware-failure", body)), as_json, _print_outcome)


@platform.command(name="predicted-failure", context_settings=CONTEXT)
@click.argument("hosts", nargs=-1, required=True)
@click.option("--notice", help="Time until NotBefore (default 7d).")
@JSON_OPTION
@click.pass_context
def platform_predicted_failure(ctx, hosts, notice, as_json):
    """Degraded hosts: a Redeploy with NotBefore days ahead; approving brings it forward."""
    body = {"hosts": _split(hosts)}
    if notice:
        body["notice"] = notice
    _emit(_run(lambda: _client(ctx).post("/v1/platform/predicted-failure", body)), as_json, _print_outcome)


@platform.command(name="evict", context_settings=CONTEXT)
@click.argument("vms", nargs=-1, required=True)
@JSON_OPTION
@click.pass_context
def platform_evict(ctx, vms, as_json):
    """Evict Spot VMs: Preempt with 30 s notice, then deleted."""
    _emit(_run(lambda: _client(ctx).post("/v1/platform/evict", {"vms": _split(vms)})), as_json, _print_outcome)


# ---------------------------------------------------------------------------------------------------- EC2
def _print_ec2_events(events: list[dict]) -> None:
    if not events:
        click.echo("no events")
        return
    rows = [("EVENT ID", "INSTANCE", "CODE", "STATE", "NOT BEFORE (UTC)", "NOT AFTER", "DEADLINE")]
    for e in events:
        rows.append(
            (
                e["event_id"],
                e["instance_id"],
                e["code"],
                e["state"],
                _short_time(e["not_before"]),
                _short_time(e["not_after"]),
                _short_time(e["not_before_deadline"]),
            )
        )
    _print_table(rows)


def _print_instances(instances: list[dict]) -> None:
    rows = [("INSTANCE", "NAME", "STATE", "HOST", "TYPE", "ZONE", "IMPACTED BY", "LIFECYCLE")]
    for i in instances:
        rows.append(
            (
                i["instance_id"],
                i["name"],
                i["state"],
                i["host"],
                i["instance_type"],
                i["availability_zone"],
                i["impacted_by"] or "-",
                i["lifecycle_state"],
            )
        )
    _print_table(rows)


def _print_ec2_outcome(outcome: dict) -> None:
    if outcome["events"]:
        _print_ec2_events(outcome["events"])
    if outcome["instances"]:
        _print_instances(outcome["instances"])


@cli.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn schedule --code system-reboot --instance i-0aaaaaaaaaaaaaaa1 --notice 1h
  forewarn ec2 events --all
  forewarn ec2 reschedule instance-event-0123456789abcdef0 2026-05-01T10:00:00Z
  forewarn ec2 interrupt i-0ddddddddddddddd4 --action stop     # Spot: two-minute warning, then stopped
  forewarn ec2 start i-0aaaaaaaaaaaaaaa1                      # after instance-stop: a new host""",
)
def ec2():
    """EC2 instances and their scheduled events."""


@ec2.command(name="instances", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def ec2_instances(ctx, as_json):
    """Every instance's state, host and lifecycle (Auto Scaling replacements included)."""
    _emit(_run(lambda: _client(ctx).get("/v1/ec2/instances")), as_json, _print_instances)


@ec2.command(name="events", context_settings=CONTEXT)
@click.option("--all", "include_all", is_flag=True, help="Include completed and canceled events.")
@JSON_OPTION
@click.pass_context
def ec2_events(ctx, include_all, as_json):
    """Active EC2 events, or all with --all."""
    _emit(
        _run(lambda: _client(ctx).get("/v1/ec2/events", params={"all": str(include_all).lower()})),
        as_json,
        _print_ec2_events,
    )


@ec2.command(name="cancel", context_settings=CONTEXT)
@click.argument("event_id")
@JSON_OPTION
@click.pass_context
def ec2_cancel(ctx, event_id, as_json):
    """Cancel an event that has not started ([Canceled] in the history)."""
    _emit([_run(lambda: _client(ctx).post(f"/v1/ec2/events/{event_id}/cancel"))], as_json, _print_ec2_events)


@ec2.command(name="reschedule", context_settings=CONTEXT)
@click.argument("event_id")
@click.argument("not_before")
@JSON_OPTION
@click.pass_context
def ec2_reschedule(ctx, event_id, not_before, as_json):
    """Move an event's start, with ModifyInstanceEventStartTime's rules."""
    _emit(
        [_run(lambda: _client(ctx).post(f"/v1/ec2/events/{event_id}/reschedule", {"not_before": not_before}))],
        as_json,
        _print_ec2_events,
    )


@ec2.command(name="start", context_settings=CONTEXT)
@click.argument("instance_id")
@JSON_OPTION
@click.pass_context
def ec2_start(ctx, instance_id, as_json):
    """Start a stopped instance."""
    _emit(_run(lambda: _client(ctx).post(f"/v1/ec2/instances/{instance_id}/start")), as_json, _print_ec2_outcome)


@ec2.command(name="interrupt", context_settings=CONTEXT)
@click.argument("instances", nargs=-1, required=True)
@click.option("--action", type=click.Choice(["terminate", "stop", "hibernate"]), default="terminate", show_default=True)
@JSON_OPTION
@click.pass_context
def ec2_interrupt(ctx, instances, action, as_json):
    """Spot interruption notice: spot/instance-action now, the action two minutes later."""
    body = {"instances": _split(instances), "action": action}
    _emit(_run(lambda: _client(ctx).post("/v1/ec2/spot/interrupt", body)), as_json, _print_ec2_outcome)


@ec2.command(name="rebalance", context_settings=CONTEXT)
@click.argument("instances", nargs=-1, required=True)
@JSON_OPTION
@click.pass_context
def ec2_rebalance(ctx, instances, as_json):
    """Rebalance recommendation for Spot instances."""
    _emit(
        _run(lambda: _client(ctx).post("/v1/ec2/spot/rebalance", {"instances": _split(instances)})),
        as_json,
        _print_ec2_outcome,
    )


def main() -> None:
    cli(prog_name="forewarn")


# Commands defined in their own packages; they use this module's helpers, so they are imported last.
from forewarn.cli.central import acknowledge as acknowledge_command  # noqa: E402
from forewarn.cli.central import graph as graph_command  # noqa: E402
from forewarn.cli.waves import wave as wave_group  # noqa: E402
from forewarn.recording.cli import COMMANDS as recording_commands  # noqa: E402
from forewarn.scenarios.cli import scenario as scenario_group  # noqa: E402

for _command in (scenario_group, wave_group, graph_command, acknowledge_command, *recording_commands):
    cli.add_command(_command)
