"""What a cloud gives the server: the one object each cloud package exports (its ``cloud.py``).

Some parts every cloud has (its name, records, rules, component, fleet-file section, metadata surface, serving,
the name and kind of its machines); the others a small cloud may not have (control routes, CLI commands, its
table in ``forewarn fleet``, scenario steps, reports of ``clock next``, a dashboard panel, a recording served back,
waves, conformance cases). A cloud's object may declare its class a subclass of :class:`Cloud` (as of
:class:`Serving`): it then takes the defaults below, each meaning "this cloud has none", and the type checker
refuses to build one that lacks a required part (those whose body is ``...``). The corridors take "none" plainly:
nothing added, or a refusal that says which cloud has none where a user asks for it.

A cloud holds everything of its own: its model, its engine component and rules, its records in the store, its
surfaces. The engine, the store, the control app, the CLI's root group and the metadata listener know a cloud only
through this protocol, and find the clouds through the registry (``registry.py``; :func:`registered` gives them with
this whole protocol): no module outside a cloud's package imports it (tests/test_dependencies.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from forewarn.core.component import ComponentSource
from forewarn.registry import clouds
from forewarn.scenario_steps import NO_STEPS

if TYPE_CHECKING:
    import click
    from fastapi import APIRouter

    from forewarn.app.runtime import Maintenance
    from forewarn.conformance_cases import CloudCases
    from forewarn.engine.engine import Engine
    from forewarn.fleet.section import FleetSection
    from forewarn.net.browser_guard import Refusal
    from forewarn.net.callers import CallerResolver
    from forewarn.net.http import Request
    from forewarn.net.own_listeners import OwnListeners
    from forewarn.scenario_steps import ScenarioObserver, ScenarioSteps
    from forewarn.store.base import SQLStore
    from forewarn.store.records import Records
    from forewarn.waves.units import WaveUnits


class MetadataSurface(Protocol):
    """A cloud's metadata server, as the metadata listener routes to it (server/metadata_router.py):
    one address for every cloud, as on a real VM."""

    def claims(self, path: str) -> bool:
        """Whether ``path`` is this cloud's (Azure: /metadata; EC2: /latest, a dated version, /1.0, the root;
        Compute Engine: /computeMetadata). The paths of two clouds never overlap."""
        ...

    def serve(self, request: Request) -> Any:
        """The answer (a response, or a later or deferred one: net/http.py)."""
        ...

    def refuse(self, path: str, refusal: Refusal) -> Any:
        """What the listener's guard refused (a web page's request, a rebound name), in this surface's style."""
        ...


class RecordedAnswer(Protocol):
    """One distinct answer in a recording of a metadata surface (``recording.model.Entry``)."""

    @property
    def status(self) -> int:
        """The HTTP status (0: no answer, the connection failed)."""
        ...

    @property
    def body(self) -> str:
        """The exact bytes, as text."""
        ...

    @property
    def etag(self) -> str | None:
        """The answer's ETag header, where the surface sends one."""
        ...

    def events(self) -> list | None:
        """A scheduled-events document's Events (None: no such document)."""
        ...


class RecordedSurface(Protocol):
    """What a recording is of (``recording.model.Recording``)."""

    @property
    def url(self) -> str: ...

    @property
    def source(self) -> str:
        """Which surface's answers it holds ("azure-scheduled-events", "gce-maintenance-event")."""
        ...


class Replaying(Protocol):
    """A recording being replayed (``recording.replay.Replay``): which answer is current when, in seconds of
    recording time since it started."""

    @property
    def recording(self) -> RecordedSurface: ...

    @property
    def entries(self) -> Sequence[RecordedAnswer]: ...

    def entry_at(self, offset_seconds: float) -> RecordedAnswer: ...

    def next_change(self, offset_seconds: float) -> float | None:
        """When another answer becomes current (None: the last one stays)."""
        ...


class RecordingServer(Protocol):
    """A recording of a cloud's metadata surface, served back as that surface answered (``forewarn replay``)."""

    @property
    def path(self) -> str:
        """The path it serves: the one that was recorded."""
        ...

    def handle(self, request: Request) -> Any:
        """The answer (a response, or a deferred one: net/http.py)."""
        ...


class MachineState:
    """What a machine is going through, as the dashboard's fleet view colours it: codes, the most serious highest
    (plain ints, not an enum: the fleet read looks them up for every machine). The page has the same list."""

    OK = 0
    SCHEDULED = 1
    STARTED = 2
    IMPACTED = 3
    STOPPED = 4
    DELETED = 5
    EVICTED = 6
    NAMES = ("ok", "scheduled", "started", "impacted", "stopped", "deleted", "evicted")


@dataclass(frozen=True)
class MachineRow:
    """A machine's columns in the dashboard's fleet view that stay while the server runs."""

    name: str
    group: str  # the set it belongs to, as the page shows it: "scale set web", "EC2", "Compute Engine us-east1-b"
    zone: str
    update_domain: int  # 0 for a cloud without update domains
    label: str = ""  # the name people know it by when that is not its id (an EC2 instance's Name tag)


@dataclass
class Touched:
    """What one committed batch changed of a cloud, in the order its changes named them: its events (by id) and its
    machines."""

    events: dict[str, Any] = field(default_factory=dict)
    machines: dict[str, None] = field(default_factory=dict)


class DashboardPanel(Protocol):
    """A cloud's part of the dashboard (control/dashboard.py): its machines in the fleet view, and its events and
    machines in each message of the live stream."""

    @property
    def events_key(self) -> str:
        """The live stream's key for the cloud's events ("events", "ec2_events", "gce_events")."""
        ...

    def machines(self, engine: Engine) -> Iterable[MachineRow]:
        """Every machine of the cloud, in the fleet view's order."""
        ...

    def machine_count(self, engine: Engine) -> int:
        """How many machines the cloud has: the fleet view's fixed columns are read again when it changes."""
        ...

    def states(self, engine: Engine, names: Iterable[str] | None = None) -> dict[str, int]:
        """What each machine (all, or those of ``names`` the cloud has) is going through now."""
        ...

    def host_of(self, engine: Engine) -> Callable[[str], str]:
        """The host a machine runs on now (a redeploy moves it)."""
        ...

    def noting(self) -> Mapping[type, Callable[[Any, Touched], None]]:
        """Each kind of the cloud's changes the live stream tells of, and how it marks what the change touched."""
        ...

    def event_json(self, event: Any) -> dict[str, Any]:
        """One of the cloud's events as the live stream sends it (the control API's JSON of it)."""
        ...

    def unseen(self, engine: Engine, machines: Iterable[str]) -> bool:
        """Whether a machine of ``machines`` is one the fleet file does not have (an Auto Scaling replacement): the
        page then reads the fleet again."""
        ...

    def views_router(self, service: Maintenance, views: Any) -> APIRouter:
        """The page's routes that show what the cloud's other surfaces answer now (``views``: their renderings, the
        server's ``control.dashboard.SurfaceViews``)."""


@dataclass(frozen=True)
class FleetListing:
    """A cloud's machines as ``forewarn fleet`` lists them: one control-API route read, one table shown."""

    key: str  # the key of the route's answer in ``forewarn fleet --json`` ("azure", "ec2", "gce")
    title: str  # the table's title, before its count: "Azure VMs"
    path: str  # the control API's route that lists the machines: "/v1/fleet"
    header: tuple[str, ...]
    rows: Callable[[Any], Sequence[tuple[str, ...]]]  # the route's answer, one row a machine


class CloudSetupError(Exception):
    """A cloud's file or setting the server cannot start with: the message says which and why; ``option``, where
    one option's value is refused, names it as the command line spells it (``--notice``)."""

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class ApiPort:
    """One of a cloud's APIs, on a port of its own on ``--host`` (served by uvicorn, beside the control API)."""

    role: str  # names the listener: in start-up errors (cli/serve.py), a replica's request counts, a leader's addresses
    port: int  # 0: off
    title: str  # how a refused outgoing request names it: "the ARM port"


@dataclass(frozen=True)
class Listening:
    """Where the server listens, once every socket is bound: what a cloud's serving needs to wire its parts."""

    control: tuple[str, int]
    metadata: tuple[str, int]
    apis: Mapping[str, tuple[str, int]]  # each API that is on, by its role
    allowed_hosts: tuple[str, ...] = ()  # Host names the API ports answer beyond the default ones (--allowed-host)


@dataclass
class Banner:
    """A cloud's part of what ``serve`` prints: its machines in the first line (``3 Azure VMs (2 scopes)``), its
    surfaces' lines, and the lines that end the banner (a command to try)."""

    fleet: str
    surfaces: list[str] = field(default_factory=list)
    closing: list[str] = field(default_factory=list)


class Serving(Protocol):
    """A cloud in a running server, made by :meth:`Cloud.serving` from the server's settings (``ServeConfig``): its
    APIs and their apps, its outboxes, its rules and metadata settings as the options set them, its banner. A cloud's
    serving may subclass this protocol for the defaults: no API of its own, no outbox, rules and metadata settings as
    they are, nothing to warn of, to show on the dashboard or to start."""

    def apis(self) -> Sequence[ApiPort]:
        """Its APIs on ports of their own, in the order they are bound (the ones whose port is 0 too: they are off);
        none by default."""
        return ()

    def exposure(self, host: str) -> Sequence[str]:
        """What to warn about when its APIs listen on ``host`` (beyond loopback) without their own credentials."""
        return ()

    def rules(self, rules: Any) -> Any:
        """The engine's rules (``engine.rules.Rules``) with this cloud's part set as the options say. An option
        value it cannot use raises :class:`CloudSetupError` naming the option."""
        return rules

    def metadata_settings(self) -> object:
        """The settings of its metadata surface (``Cloud.metadata_surface``'s ``settings``), or None: its defaults."""
        return None

    def opened(self, store: SQLStore, fleet_sections: Mapping[str, tuple[str, Any]]) -> Sequence[Any]:
        """The store is open: read the files its options name, and give the outbox functions its changes feed
        (``Maintenance.open(outboxes=...)``). ``fleet_sections``: the fleet file's sections beyond the fleet, by
        key, each with where it was read. A file or setting it cannot use raises :class:`CloudSetupError`."""
        return ()

    def attach(self, service: Maintenance, leads: bool) -> None:
        """The service is open (``leads``: this process writes, alone or as the leader of a shared database)."""
        return None

    def app(self, role: str, service: Maintenance, surface: MetadataSurface, listening: Listening) -> Any:
        """The ASGI app of its API ``role`` (one of :meth:`apis`: a serving with none is never asked)."""
        raise LookupError(f"this cloud has no API {role!r}")

    def views(self, service: Maintenance, surface: MetadataSurface, listening: Listening) -> Mapping[str, Any]:
        """What the dashboard shows of its surfaces: fields of ``control.dashboard.SurfaceViews``."""
        return {}

    def client_urls(self, listening: Listening) -> Mapping[str, str]:
        """Where the server's own scenario runs reach its APIs: keyword arguments of ``ScenarioRuns``."""
        return {}

    def delivery_policies(self) -> Sequence[Any]:
        """The outbox sender's policies for its deliveries (``app.outbox.SendingPolicy``)."""
        return ()

    def started(self, own: OwnListeners, listening: Listening) -> None:
        """Every listener is bound and the server about to serve: start what needs them."""
        return None

    def machines(self, service: Maintenance) -> Sequence[Any]:
        """Its machines of the fleet (each with ``name``, ``imds_port``, ``imds_address``), as the listeners need."""
        ...

    machine_kind: str  # how the banner names one of its machines: "Azure VM"

    def current_host(self, service: Maintenance, machine: Any) -> str | None:
        """The host ``machine`` runs on now, or None when it is not one of this cloud's machines."""
        ...

    def banner(self, service: Maintenance, listening: Listening) -> Banner:
        """Its part of the banner."""
        ...


class Cloud(ComponentSource, Protocol):
    @property
    def title(self) -> str:
        """As its users read it, in logs and messages: "Azure", "Amazon EC2", "Compute Engine"."""
        ...

    @property
    def records(self) -> Records:
        """What the cloud writes to the store, and how its stored state is read back."""
        ...

    def fleet_section(self) -> FleetSection:
        """The cloud's section of the fleet file (its keys, their checks, its machines) and of the fleet's records;
        its machines are its part of the :class:`~forewarn.fleet.model.Fleet`, by the cloud's name."""
        ...

    def control_router(self, metadata: Mapping[str, object]) -> APIRouter | None:
        """The cloud's routes in forewarn's control API (``metadata``: each cloud's metadata surface, by cloud
        name, where the server runs one); None: it has none. Routes declared once, at module level, reach the
        service and the surfaces of the app that answers through the dependencies of ``forewarn.control.service``."""
        return None

    def metadata_surface(
        self, service: Maintenance, resolver: CallerResolver, settings: Mapping[str, object]
    ) -> MetadataSurface:
        """The cloud's metadata server (``settings``: each cloud's settings of its metadata surface, by cloud name;
        a cloud not named there runs with its defaults)."""
        ...

    def change_reports(self) -> Mapping[type, Callable[[Any], Any]]:
        """Each kind of the cloud's changes worth a line when time moves (``clock next``), and its report: a
        ``control.models.ChangeOut``, or None for a change of that kind that is bookkeeping. None by default: time
        moving reports none of the cloud's changes."""
        return {}

    def machine_name_and_kind(self, machine: object) -> tuple[str, str] | None:
        """The name and kind ("vm", "ec2_instance", "gce_instance") of one of the cloud's machines, as the control
        API lists the metadata listener's callers; None for a machine of another cloud."""
        ...

    def dashboard_panel(self) -> DashboardPanel | None:
        """The cloud's part of the dashboard's fleet view and live stream; None: the dashboard shows none of it."""
        return None

    def replay_handler(
        self, replay: Replaying, speed: float, on_approval: Callable[[dict], None] | None
    ) -> RecordingServer | None:
        """A server of ``replay`` (at ``speed`` recorded seconds per wall second) with
        the request rules of the cloud's metadata surface, when the recording is of that surface
        (``Recording.source``); None for any other recording. ``on_approval``: told of each approval a client
        sends, where the surface takes approvals. None by default: ``forewarn record`` records none of its
        surfaces."""
        return None

    def serving(self, options: Any) -> Serving:
        """The cloud in a server started with ``options`` (a ``server.config.ServeConfig``: the cloud reads the
        settings that are its own)."""
        ...

    def cli_commands(self) -> Sequence[click.Command]:
        """The cloud's commands of the ``forewarn`` CLI, added to its root group (light to import: click and
        ``cli/common.py``, as the CLI's start-up budget asks); none by default."""
        return ()

    def fleet_listing(self) -> FleetListing | None:
        """How ``forewarn fleet`` lists the cloud's machines (light to import, as ``cli_commands``); None: it lists
        none of them (the default)."""
        return None

    def wave_units(self) -> WaveUnits | None:
        """What a wave rolled over the cloud's machines needs of it (``waves/units.py``); None: the cloud has no
        waves, and a wave request that names it is refused, saying so (the default)."""
        return None

    def scenario_steps(self) -> ScenarioSteps:
        """The cloud's steps of a scenario file (``do:``), their checks and how they run: a client of the server
        (forewarn/scenario_steps.py), loaded when a scenario is read or run; none by default."""
        return NO_STEPS

    def scenario_observer(self) -> ScenarioObserver | None:
        """What a scenario run records of the cloud's machines (forewarn/scenario_steps.py): a new observer for each
        run; None: a run records none of them (the default)."""
        return None

    def conformance(self) -> CloudCases | None:
        """The cloud's conformance cases (YAML files in its package) and the observer that reads its metadata calls
        (docs/conformance.md); None for a cloud that ships none (the default)."""
        return None


def registered() -> tuple[Cloud, ...]:
    """Every registered cloud, in the registry's order. Each cloud's module declares its object a ``Cloud`` (the
    type checker holds it to this protocol there); the registry itself loads them by name and cannot."""
    return cast("tuple[Cloud, ...]", clouds())
