"""``forewarn serve``: the server's options, parsed into a :class:`ServeConfig`; ``server.composition`` runs it.

The server's modules (FastAPI, uvicorn, the engine, the stores) are imported only when ``serve`` runs, so that every
other command starts fast.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from forewarn.cli.common import CONTEXT, fail
from forewarn.core.clock import MODES
from forewarn.core.durations import parse_duration
from forewarn.core.errors import CoreError

F = TypeVar("F", bound=Callable[..., Any])


def port_option(flag: str, default: int, help_text: str) -> Callable[[F], F]:
    """An option naming a port (0 to 65535), its default shown in the help."""
    return click.option(flag, default=default, type=click.IntRange(0, 65535), show_default=True, help=help_text)


def measure_option(flag: str, metavar: str, default: str, help_text: str) -> Callable[[F], F]:
    """An option giving a duration or a size as text, its default shown in the help."""
    return click.option(flag, metavar=metavar, default=default, show_default=True, help=help_text)


def key_pairs(values: tuple[str, ...]) -> dict[str, str] | None:
    pairs = {}
    for value in values:
        key, sep, secret = value.partition(":")
        if not sep or not key or not secret:
            raise click.BadParameter(f"expected KEY_ID:SECRET, got {value!r}", param_hint="--ec2-credential")
        pairs[key] = secret
    return pairs or None


def seconds(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value).total_seconds()
    except CoreError as error:
        raise click.BadParameter(str(error), param_hint=option) from None


def positive_seconds(value: str, option: str) -> float:
    parsed = seconds(value, option)
    if not parsed or parsed <= 0:
        raise click.BadParameter("must be longer than 0s", param_hint=option)
    return parsed


#: Units --resource-graph-memory takes, in bytes (binary multiples, as DuckDB and `free -h` print them).
_SIZE_UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
#: Below this DuckDB cannot hold a few thousand rows and run the documented queries over them.
_LEAST_MEMORY = 64 * 1024**2
_LEAST_CACHE = 1024**2


def memory_size(value: str, option: str, least: int = _LEAST_MEMORY) -> int:
    """A size such as ``2GiB`` or ``512MiB``, in bytes, of at least ``least`` (64 MiB unless told)."""
    number, unit = value.strip()[:-3], value.strip()[-3:]
    if unit not in _SIZE_UNITS or not number.strip().isdigit():
        raise click.BadParameter(
            f"expected a whole number of KiB, MiB or GiB (e.g. 2GiB), not {value!r}", param_hint=option
        )
    size = int(number) * _SIZE_UNITS[unit]
    if size < least:
        raise click.BadParameter(f"must be at least {least // 1024**2}MiB", param_hint=option)
    return size


#: ``--gce-timing`` keys: the Compute Engine rules (gcp/model.py ``GceRules``) a user may set, by their option name.
GCE_TIMINGS = {
    "notice": "notice",
    "gpu-notice": "gpu_notice",
    "preemption-notice": "preemption_notice",
    "window": "window",
    "migration": "migration",
    "termination": "termination",
    "host-error-restart": "host_error_restart",
}


def gce_timings(values: tuple[str, ...]) -> dict[str, timedelta]:
    from forewarn.core.errors import did_you_mean

    result = {}
    for value in values:
        key, sep, duration = value.partition("=")
        if not sep:
            raise click.BadParameter(f"expected KEY=DURATION, e.g. notice=2m; got {value!r}", param_hint="--gce-timing")
        if key not in GCE_TIMINGS:
            raise click.BadParameter(
                f"no Compute Engine timing {key!r}{did_you_mean(key, GCE_TIMINGS)} (the timings: {', '.join(GCE_TIMINGS)})",
                param_hint="--gce-timing",
            )
        try:
            result[GCE_TIMINGS[key]] = parse_duration(duration)
        except CoreError as error:
            raise click.BadParameter(str(error), param_hint="--gce-timing") from None
    return result


def http_codes(value: str | None) -> frozenset[int] | None:
    if value is None:
        return None
    try:
        return frozenset(int(code) for code in value.split(",") if code.strip())
    except ValueError:
        raise click.BadParameter(
            f"expected HTTP codes such as 400,401,403,413; got {value!r}", param_hint="--event-grid-no-retry"
        ) from None


def stated_duration(value: str) -> timedelta:
    """A duration whose error is a plain ``forewarn: ...`` line (exit status 1), as these options always had."""
    try:
        return parse_duration(value)
    except CoreError as error:
        fail(str(error))


@click.command(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn serve --fleet demo                          # demo fleet, real clock, forewarn.db
  forewarn serve --fleet fleet.yaml --clock manual --start 2026-04-20T22:00:00Z --db :memory:
  forewarn serve --fleet fleet.yaml --speed 60          # a wall second is a simulated minute
  forewarn serve --db postgresql://127.0.0.1/test       # PostgreSQL; the fleet is already stored there
  forewarn serve --db postgresql://127.0.0.1/test --role shared --port 8270 --imds-port 8269
                                                        # one of several processes on one database (docs/replicas.md)
A database remembers its fleet, events, incarnations and clock; restart with the same --db to continue.""",
)
@click.option(
    "--fleet",
    "fleet_source",
    metavar="FILE|demo|scenario:NAME",
    help="Fleet file (YAML), 'demo' for the built-in demo fleet, or scenario:NAME for a shipped scenario's own fleet "
    "(its dashboard then runs that scenario). Needed the first time a database is used.",
)
@click.option("--db", default="forewarn.db", show_default=True, help="SQLite file, ':memory:', or a postgresql:// URL.")
@measure_option(
    "--sqlite-cache",
    "SIZE",
    "64MiB",
    "A SQLite database's page cache (SQLite's own default: 2MiB). The index pages a wave over a large fleet reaches "
    "all over stay in it instead of being read from the file again; PostgreSQL keeps its own (shared_buffers).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Control API address.")
@port_option("--port", 8170, "Control API port.")
@port_option("--arm-port", 8171, "Azure Resource Manager–shaped management API port, on --host (0: off).")
@port_option("--ec2-port", 8172, "EC2 Query API port, on --host, for boto3 and the aws CLI (--endpoint-url; 0: off).")
@port_option("--gce-port", 8173, "Compute Engine API port, on --host, for google-cloud-compute (api_endpoint; 0: off).")
@click.option("--imds-host", default="127.0.0.1", show_default=True, help="Metadata endpoint address.")
@port_option("--imds-port", 8169, "Metadata endpoint port (real IMDS: 169.254.169.254:80).")
@click.option(
    "--vm-ports/--no-vm-ports",
    default=True,
    help="Listen on each VM's own metadata port (imds.port in the fleet file), on --imds-host. Off: the VMs still "
    "answer at their own addresses (imds.address) on --imds-port; a second server on a fleet with fixed ports needs it.",
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
    "--gce-timing",
    multiple=True,
    metavar="KEY=DURATION",
    help="A Compute Engine timing, e.g. notice=2m: notice (60s before maintenance-event changes), gpu-notice (1h, "
    "instances with GPUs), preemption-notice (30s), window (1h, upcoming maintenance), "
    "migration (30s), termination (5m), host-error-restart (2m). Defaults: docs/gcp.md.",
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
@measure_option(
    "--resource-graph-retention",
    "DURATION",
    "30d",
    "How long Resource Graph keeps a scheduled event's row after its last change (live ones stay).",
)
@measure_option(
    "--resource-graph-delay",
    "DURATION",
    "0s",
    "How long a change takes to show in Resource Graph (Azure: 'within 5 minutes in general').",
)
@measure_option(
    "--resource-graph-query-timeout",
    "DURATION",
    "30s",
    "Wall time a Resource Graph query may run before it is stopped and answered QueryTimeout.",
)
@measure_option(
    "--resource-graph-memory",
    "SIZE",
    "2GiB",
    "Memory Resource Graph's DuckDB may use for its rows and all queries together; a query needing more is "
    "refused (QueryMemoryLimitExceeded).",
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
    help="The same bounds for the control, ARM, EC2 API and Compute Engine API ports, and send_timeout (seconds a "
    "client may take nothing of an answer, such as a dashboard stream, before it is cut; default 10).",
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
@click.option(
    "--role",
    type=click.Choice(["single", "shared", "replica"]),
    default="single",
    show_default=True,
    help="single: this process alone on its database. shared: one of several processes on one PostgreSQL database; "
    "it leads if no other does, else serves metadata as a replica and takes over when the leader dies. replica: "
    "follows, never leads. shared and replica need PostgreSQL (docs/replicas.md).",
)
@click.option(
    "--failover-poll",
    default="2s",
    show_default=True,
    metavar="DURATION",
    help="How often a shared replica tries the leader's lock (and a leader checks it still holds it): a leader's "
    "death is noticed within this time.",
)
@click.option(
    "--catch-up-interval",
    default="1s",
    show_default=True,
    metavar="DURATION",
    help="How often a replica reads the journal of the leader's commits without a notification (a lost NOTIFY "
    "delays it by at most this).",
)
@click.option(
    "--advertise-host",
    metavar="HOST",
    help="The address other forewarn processes reach this one's ports at, when it leads. Default: --host and "
    "--imds-host.",
)
@click.option(
    "--hosts",
    metavar="GLOB",
    help="Serve the metadata of the machines on the hosts this glob matches only (host-0[1-4], rack-7-*), as each "
    "host's own metadata service does; a machine on another host gets the answer to a caller the metadata service "
    "does not know (docs/replicas.md). Default: every host.",
)
@click.option(
    "--exit-with-parent",
    is_flag=True,
    help="Stop (as on SIGTERM) once the process that started this one has exited, even by kill -9: what a scenario "
    "run's private server and the test fixtures' servers are started with, so none outlives its user.",
)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning"]), default="info", show_default=True)
def serve(**options: Any) -> None:
    """Run the server: the control API and dashboard, the metadata endpoint (Azure IMDS, EC2 instance metadata,
    the Compute Engine metadata server) and the cloud APIs (ARM, EC2, Compute Engine), on one store and one clock."""
    check_control_token(options["control_token"])
    # The server's modules only when it runs: every other command imports this module too.
    from forewarn.server.config import ServeConfig, ServeError, SettingError

    config = ServeConfig(**config_fields(options))
    from forewarn.server.composition import ListenError, run_server

    try:
        run_server(config)
    except ServeError as error:
        fail(str(error))
    except SettingError as error:
        raise click.BadParameter(str(error), param_hint=error.option) from None
    except ListenError as error:
        fail(listen_failure(error.role, error.address, error.errno, error.strerror, error.machine))


def check_control_token(control_token: str | None) -> None:
    if control_token is not None and (not control_token.strip() or control_token != control_token.strip()):
        raise click.BadParameter(
            "expected a non-empty token without leading or trailing spaces", param_hint="--control-token"
        )


#: The options of ``serve`` whose ServeConfig field has another name (each is parsed by ``config_fields``).
RENAMED_OPTIONS = frozenset({"gce_timing", "ec2_credential", "health_webhook"})


def config_fields(options: dict[str, Any]) -> dict[str, Any]:
    """ServeConfig's fields from ``serve``'s options: most as given, the others parsed here, in this order (of two
    wrong options, the first below is the one reported)."""
    parsed = {
        "notice": tuple(options["notice"]),
        "impact_window": tuple(options["impact_window"]),
        "gce_timings": gce_timings(options["gce_timing"]),
        "first_call_delay": seconds(options["first_call_delay"], "--first-call-delay"),
        "disable_after": seconds(options["disable_after"], "--disable-after"),
        "ec2_credentials": key_pairs(options["ec2_credential"]),
        "health_webhooks": tuple(options["health_webhook"]),
        "resource_graph_retention": stated_duration(options["resource_graph_retention"]),
        "resource_graph_delay": stated_duration(options["resource_graph_delay"]),
        "resource_graph_query_timeout": positive_seconds(
            options["resource_graph_query_timeout"], "--resource-graph-query-timeout"
        ),
        "resource_graph_memory": memory_size(options["resource_graph_memory"], "--resource-graph-memory"),
        "sqlite_cache": memory_size(options["sqlite_cache"], "--sqlite-cache", least=_LEAST_CACHE),
        "event_grid_no_retry": http_codes(options["event_grid_no_retry"]),
        "imds_limits": tuple(options["imds_limits"]),
        "api_limits": tuple(options["api_limits"]),
        "allowed_hosts": tuple(options["allowed_hosts"]),
        "failover_poll": positive_seconds(options["failover_poll"], "--failover-poll"),
        "catch_up_interval": positive_seconds(options["catch_up_interval"], "--catch-up-interval"),
    }
    given = {name: value for name, value in options.items() if name not in RENAMED_OPTIONS and name not in parsed}
    return given | parsed


# Which serve options choose the address of each of the server's listeners (ListenError.role).
LISTEN_OPTIONS = {
    "control": ("control API", "--host/--port"),
    "imds": ("metadata endpoint", "--imds-host/--imds-port"),
    "arm": ("ARM API", "--host/--arm-port, 0 turns it off"),
    "ec2_api": ("EC2 API", "--host/--ec2-port, 0 turns it off"),
    "vm_port": (
        "metadata endpoint of {machine}",
        "its imds.port in the fleet; --no-vm-ports serves the fleet without its VMs' own ports",
    ),
    "vm_address": (
        "metadata endpoint of {machine}",
        "its imds.address in the fleet, on --imds-port",
    ),
    "gce_api": ("Compute Engine API", "--host/--gce-port, 0 turns it off"),
}


def listen_failure(
    role: str, address: tuple[str, int], code: int | None, reason: str | None, machine: str | None = None
) -> str:
    host, port = address
    what, options = LISTEN_OPTIONS[role]
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    hint = "; is another forewarn serve running?" if code == errno.EADDRINUSE else ""
    return f"cannot listen on {where} for the {what.format(machine=machine)} (set by {options}): {reason}{hint}"
