"""Every setting of a forewarn server, as one value: ``forewarn serve`` fills a :class:`ServeConfig` from its
options, and ``server.composition.run_server`` turns it into a running server.

Light on purpose (standard library only): the CLI imports it, and the CLI must start fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta


class ServeError(Exception):
    """The server cannot start: the message says why, for one ``forewarn: ...`` line."""


class SettingError(ValueError):
    """A setting has a value the server cannot use; ``option`` names the setting (as the command line spells it)."""

    def __init__(self, message: str, option: str):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class ServeConfig:
    """Values are parsed (durations, codes, key pairs); defaults are those of ``forewarn serve``. None means "the
    stored setting, or the built-in default" where the option's help says so."""

    # The store and the fleet.
    db: str = "forewarn.db"
    sqlite_cache: int = 64 * 1024**2  # bytes: a SQLite writer's page cache (store/sqlite.py DEFAULT_CACHE)
    fleet_source: str | None = None  # a fleet file, or "demo"
    # Listeners: the control, ARM, EC2 and Compute Engine APIs on ``host``; the metadata endpoint on ``imds_host``. Port 0: off.
    host: str = "127.0.0.1"
    port: int = 8170
    arm_port: int = 8171
    ec2_port: int = 8172
    gce_port: int = 8173
    imds_host: str = "127.0.0.1"
    imds_port: int = 8169
    vm_ports: bool = True  # listen on each VM's own imds.port of the fleet
    # The clock and the engine's rules.
    clock_mode: str | None = None
    speed: float | None = None
    start: str | None = None  # ISO 8601
    seed: str | None = None
    notice: tuple[str, ...] = ()  # TYPE=DURATION, as given (Azure's serving reads them: azure/serving/wiring.py)
    impact_window: tuple[str, ...] = ()
    gce_timings: dict[str, timedelta] = field(default_factory=dict)  # GceRules fields over their defaults
    hardware_failure_type: str | None = None
    # Azure IMDS: a profile, and single settings over it.
    imds_profile: str = "strict"
    unknown_event_ids: str | None = None
    rate_limit: float | None = None
    first_call_delay: float | None = None  # seconds
    require_enabling: bool | None = None
    disable_after: float | None = None  # seconds
    while_down: str | None = None
    # AWS.
    ec2_imds_tokens: str = "optional"
    ec2_credentials: dict[str, str] | None = None  # key id -> secret; None: any credentials are accepted
    health_webhooks: tuple[str, ...] = ()
    health_entity: str = "arn"
    # Azure management: access, Resource Graph, Event Grid.
    access_file: str | None = None
    resource_graph_retention: timedelta = timedelta(days=30)
    resource_graph_delay: timedelta = timedelta(0)
    resource_graph_query_timeout: float = 30.0  # seconds
    resource_graph_memory: int = 2 * 1024**3  # bytes: DuckDB's bound for the rows and every query together
    event_grid_file: str | None = None
    event_grid_dead_letters: str | None = None
    event_grid_duplicates: float | None = None
    event_grid_no_retry: frozenset[int] | None = None
    # HTTP server bounds (NAME=VALUE), and who the ports answer.
    imds_limits: tuple[str, ...] = ()
    api_limits: tuple[str, ...] = ()
    control_token: str | None = None
    insecure: bool = False
    allowed_hosts: tuple[str, ...] = ()
    log_level: str = "info"
    exit_with_parent: bool = False  # stop once the starting process has gone (scenario runs, test fixtures)
    # Several processes on one PostgreSQL database (replication/): "single" (this process alone), "shared" (leads
    # if no other does, else a replica that takes over when the leader dies), "replica" (never leads).
    role: str = "single"
    failover_poll: float = 2.0  # seconds between a replica's attempts at the leader's lock
    catch_up_interval: float = 1.0  # seconds between a replica's reads of the journal without a NOTIFY
    advertise_host: str | None = None  # the host other processes reach this one's ports at; None: --host
    hosts: str | None = None  # the metadata port serves the machines on hosts matching this glob only; None: all
