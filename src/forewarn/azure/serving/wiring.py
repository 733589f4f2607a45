"""How Azure runs in a forewarn server (``forewarn/cloud.py``'s ``Serving``), from ``forewarn serve``'s options.

The ARM port carries Microsoft.Compute, the Maintenance acknowledge API, Resource Graph and Event Grid's system
topics; the IMDS settings come from ``--imds-profile`` with the single options over it; Event Grid publishes through
the outbox, from the ``--event-grid`` file or the fleet file's ``event_grid`` section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from forewarn.azure.arm.access import AccessControl, AccessFileError, load_access
from forewarn.azure.arm.compute import ArmApi
from forewarn.azure.arm.router import ManagementApi, ManagementCall, create_management_app
from forewarn.azure.arm.wire import ArmError
from forewarn.azure.component import AzureComponent
from forewarn.azure.eventgrid.config import EventGridFileError, load_event_grid_file, parse_event_grid
from forewarn.azure.eventgrid.settings import EventGridSettings
from forewarn.azure.eventgrid.topics import EventGrid
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.imds.scheduled_events import PROFILES, ImdsSettings
from forewarn.azure.maintenance.acknowledge import MaintenanceApi
from forewarn.azure.model import EventType
from forewarn.azure.resource_graph.api import ResourceGraphApi, ResourceGraphSettings
from forewarn.azure.rules import AzureRules
from forewarn.azure.vms import VM
from forewarn.cloud import ApiPort, Banner, CloudSetupError, Listening, Serving
from forewarn.core.durations import parse_duration
from forewarn.core.enums import parse_enum
from forewarn.core.errors import CoreError
from forewarn.core.words import counted
from forewarn.extras import RESOURCE_GRAPH
from forewarn.net.browser_guard import BrowserGuard, HostNames

if TYPE_CHECKING:
    from forewarn.app.runtime import Maintenance
    from forewarn.net.own_listeners import OwnListeners
    from forewarn.store.base import SQLStore

ARM = "arm"


class AzureServing(Serving):
    """``options``: a ``ServeConfig`` (read for Azure's settings only)."""

    machine_kind = "Azure VM"

    def __init__(self, options: Any):
        self.options = options
        self.event_grid: EventGrid | None = None
        self.resource_graph: ResourceGraphApi | None = None
        self.access: AccessControl | None = None  # None: no token needed (azure/arm/access.py)

    def apis(self) -> Sequence[ApiPort]:
        return (ApiPort(ARM, self.options.arm_port, "the ARM port"),)

    def exposure(self, host: str) -> Sequence[str]:
        if not self.options.arm_port or self.options.access_file:
            return ()
        return (
            f"the ARM port listens on {host} without --access: anyone who can reach it can restart VMs "
            "and change policies and Event Grid subscriptions",
        )

    def rules(self, rules: Any) -> Any:
        options = self.options
        enabling = options.imds_profile == "realistic" if options.require_enabling is None else options.require_enabling
        extra: dict[str, Any] = {"enabling_required": enabling}
        if options.disable_after is not None:
            extra["disable_after"] = timedelta(seconds=options.disable_after)
        if options.hardware_failure_type is not None:
            extra["hardware_failure_type"] = EventType(options.hardware_failure_type)
        notice = per_type(options.notice, "--notice")
        impact_window = per_type(options.impact_window, "--impact-window")
        azure = rules.of(AzureRules).with_overrides(notice, impact_window, **extra)
        return rules.with_part(azure)

    def metadata_settings(self) -> ImdsSettings:
        """The --imds-profile, with the single settings given over it."""
        options = self.options
        overrides: dict[str, Any] = {
            "unknown_event_ids": options.unknown_event_ids,
            "rate_limit": options.rate_limit,
            "while_down": options.while_down,
            "first_call_delay": options.first_call_delay,
        }
        given = {key: value for key, value in overrides.items() if value is not None}
        return replace(PROFILES[options.imds_profile], **given)

    def opened(self, store: SQLStore, fleet_sections: Mapping[str, tuple[str, Any]]) -> Sequence[Any]:
        declared = fleet_sections.get("event_grid")
        if declared is not None and self.options.event_grid_file:
            raise CloudSetupError(
                "Event Grid is declared in the fleet file (event_grid:) and in --event-grid; keep one"
            )
        try:
            self.event_grid = event_grid_of(store, self.options, declared)
            self.access = load_access(self.options.access_file) if self.options.access_file else None
        except (EventGridFileError, AccessFileError) as error:
            raise CloudSetupError(str(error)) from None
        return (self.event_grid.outbox,)

    def attach(self, service: Maintenance, leads: bool) -> None:
        assert self.event_grid is not None, "outboxes() makes Event Grid before the service opens"
        if not leads:
            self.event_grid.declared = None  # the leader applies the file; a replica only reads what it stored
        self.event_grid.attach(service)
        if self.options.arm_port and RESOURCE_GRAPH.installed():
            self.resource_graph = ResourceGraphApi(service, resource_graph_settings(self.options))

    def app(self, role: str, service: Maintenance, surface: Any, listening: Listening) -> Any:
        assert self.event_grid is not None
        guard = BrowserGuard(HostNames.for_server(listening.control[0], listening.allowed_hosts), json_api=True)
        arm = ManagementApi(ArmApi(service), self.access, guard=guard)
        arm.add_provider("microsoft.maintenance", MaintenanceApi(service).handle)
        queries = self.resource_graph.handle if self.resource_graph is not None else resource_graph_not_installed
        arm.add_provider("microsoft.resourcegraph", queries)
        self.event_grid.register(arm)
        return create_management_app(arm)

    def views(self, service: Maintenance, surface: Any, listening: Listening) -> Mapping[str, Any]:
        if self.resource_graph is None or ARM not in listening.apis:
            return {}
        return {"central_row": self.resource_graph.row_of}

    def delivery_policies(self) -> Sequence[Any]:
        delivery = self.event_grid.delivery if self.event_grid is not None else None
        return () if delivery is None else (delivery,)

    def started(self, own: OwnListeners, listening: Listening) -> None:
        if self.event_grid is None:
            return
        self.event_grid.keep_away_from(own)
        # the handshakes of the --event-grid file's subscriptions (the ARM port serves validationUrl)
        arm = listening.apis.get(ARM)
        self.event_grid.start_validating(f"http://{arm[0]}:{arm[1]}" if arm else None)

    def machines(self, service: Maintenance) -> Sequence[VM]:
        return list(azure_fleet(service.settled_engine().fleet).vms.values())

    def current_host(self, service: Maintenance, machine: Any) -> str | None:
        if not isinstance(machine, VM):
            return None
        state = service.settled_engine().component(AzureComponent).vm_states.get(machine.name)
        return machine.host if state is None else state.host

    def banner(self, service: Maintenance, listening: Listening) -> Banner:
        fleet = service.settled_engine().fleet
        imds = f"http://{listening.metadata[0]}:{listening.metadata[1]}"
        surfaces = []
        arm = listening.apis.get(ARM)
        if arm:
            surfaces.append(
                f"  Azure ARM     http://{arm[0]}:{arm[1]}   (management.azure.com paths: Compute, "
                "Resource Graph, Maintenance acknowledge, Event Grid; docs/azure-arm.md, docs/azure-central.md)"
            )
        surfaces.append(
            f"  Azure IMDS    {imds}/metadata/scheduledevents"
            + (f"   (answers as {fleet.default_vm})" if fleet.default_vm else "")
        )
        return Banner(
            fleet=f"{counted(len(azure_fleet(fleet).vms), 'Azure VM')} ({counted(len(azure_fleet(fleet).scopes), 'scope')})",
            surfaces=surfaces,
            closing=[f"  try: curl -s -H Metadata:true '{imds}/metadata/scheduledevents?api-version=2020-07-01'"],
        )


def per_type(values: Sequence[str], option: str) -> dict[EventType, timedelta]:
    """``TYPE=DURATION`` values (``Freeze=5m``), by event type."""
    result = {}
    for value in values:
        name, sep, duration = value.partition("=")
        if not sep:
            raise CloudSetupError(f"expected TYPE=DURATION, e.g. Freeze=5m; got {value!r}", option)
        try:
            result[parse_enum(EventType, name, "event type")] = parse_duration(duration)
        except CoreError as error:
            raise CloudSetupError(str(error), option) from None
    return result


async def resource_graph_not_installed(call: ManagementCall) -> Response:
    """Resource Graph's answer where its query engine (DuckDB) is not installed: the rest of the ARM port works."""
    raise ArmError(501, "NotImplemented", RESOURCE_GRAPH.message)


def resource_graph_settings(options: Any) -> ResourceGraphSettings:
    return ResourceGraphSettings(
        retention=options.resource_graph_retention,
        delay=options.resource_graph_delay,
        query_timeout=options.resource_graph_query_timeout,
        memory_limit=options.resource_graph_memory,
    )


def event_grid_of(store: SQLStore, options: Any, section: tuple[str, Any] | None) -> EventGrid:
    """The Event Grid emulation: the settings and resources of the --event-grid file or of the fleet file's
    event_grid section (``(where, data)``), with the flags over its settings."""
    path = options.event_grid_file
    declared = load_event_grid_file(path) if path else parse_event_grid(section[1], section[0]) if section else None
    overrides: dict[str, Any] = {}
    if options.event_grid_dead_letters:
        overrides["dead_letter_dir"] = Path(options.event_grid_dead_letters)
    if options.event_grid_duplicates is not None:
        overrides["duplicate_rate"] = options.event_grid_duplicates
    if options.event_grid_no_retry is not None:
        overrides["non_retried_codes"] = options.event_grid_no_retry
    try:
        settings = replace(declared.settings if declared else EventGridSettings(), **overrides)
    except ValueError as error:
        raise EventGridFileError(f"Event Grid settings: {error}") from None
    if declared is None:  # no file: the stored topics and subscriptions stay as they are
        return EventGrid(store, settings)
    return EventGrid(store, declared=replace(declared, settings=settings))
