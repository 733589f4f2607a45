"""Azure as a plugin of the server (``forewarn/cloud.py``).

Light to import: each part is imported when it is first asked for, so that the registry costs a command that needs
none of them (``forewarn --help``) nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forewarn.cloud import Cloud, DashboardPanel, FleetListing, RecordingServer, Replaying, Serving
from forewarn.core.component import Footing

if TYPE_CHECKING:
    import click
    from fastapi import APIRouter

    from forewarn.app.runtime import Maintenance
    from forewarn.azure.component import AzureComponent
    from forewarn.azure.fleet import AzureFleetSection
    from forewarn.azure.imds.scheduled_events import AzureImds
    from forewarn.azure.rules import AzureRules
    from forewarn.azure.scenario.observer import AzureObserver
    from forewarn.conformance_cases import CloudCases
    from forewarn.net.callers import CallerResolver
    from forewarn.scenario_steps import ScenarioSteps
    from forewarn.store.records import Records
    from forewarn.waves.units import WaveUnits


@dataclass(frozen=True)
class AzureCloud:
    name: str = "azure"
    title: str = "Azure"

    @property
    def records(self) -> Records:
        from forewarn.azure.records import AZURE_RECORDS

        return AZURE_RECORDS

    def default_rules(self) -> AzureRules:
        from forewarn.azure.rules import AzureRules

        return AzureRules()

    def component(self, footing: Footing, stored: Any | None) -> AzureComponent:
        from forewarn.azure.component import AzureComponent, StoredAzure, event_numbering
        from forewarn.azure.records import StoredEvents

        history = None if footing.stored is None else StoredEvents(footing.stored, event_numbering(footing.seed))
        return AzureComponent(footing, stored or StoredAzure(), history)

    def fleet_section(self) -> AzureFleetSection:
        from forewarn.azure.fleet import AzureFleetSection

        return AzureFleetSection()

    def control_router(self, metadata: Mapping[str, object]) -> APIRouter:
        from fastapi import APIRouter

        from forewarn.azure.control import events, imds, platform

        served = metadata.get(self.name) is not None  # the server runs Azure's IMDS
        router = APIRouter()
        router.include_router(events.router)
        if served:
            router.include_router(events.document_router)
        router.include_router(platform.router)
        if served:
            router.include_router(imds.router)
        return router

    def metadata_surface(
        self, service: Maintenance, resolver: CallerResolver, settings: Mapping[str, object]
    ) -> AzureImds:
        from forewarn.azure.imds.scheduled_events import AzureImds, ImdsSettings

        given = settings.get(self.name)
        return AzureImds(service, resolver, given if isinstance(given, ImdsSettings) else ImdsSettings())

    def change_reports(self) -> Mapping[type, Callable[[Any], Any]]:
        from forewarn.azure.control.events import CHANGE_REPORTS

        return CHANGE_REPORTS

    def machine_name_and_kind(self, machine: object) -> tuple[str, str] | None:
        from forewarn.azure.vms import VM

        return (machine.name, "vm") if isinstance(machine, VM) else None

    def dashboard_panel(self) -> DashboardPanel:
        from forewarn.azure.control.dashboard import PANEL

        return PANEL

    def replay_handler(
        self, replay: Replaying, speed: float, on_approval: Callable[[dict], None] | None
    ) -> RecordingServer | None:
        from forewarn.azure.imds.replay import ReplayHandler
        from forewarn.recording.model import AZURE

        if replay.recording.source != AZURE:
            return None
        return ReplayHandler(replay, speed=speed, on_approval=on_approval)

    def serving(self, options: Any) -> Serving:
        from forewarn.azure.serving.wiring import AzureServing

        return AzureServing(options)

    def fleet_listing(self) -> FleetListing:
        from forewarn.azure.cli.listing import LISTING

        return LISTING

    def cli_commands(self) -> Sequence[click.Command]:
        from forewarn.azure.cli import central, events, vm

        return (
            events.schedule,
            events.events,
            events.show,
            events.approve,
            events.cancel,
            events.document,
            vm.vm,
            vm.vmss,
            vm.policy,
            vm.platform,
            central.graph,
            central.acknowledge,
        )

    def wave_units(self) -> WaveUnits:
        from forewarn.azure.waves import AzureWaveUnits

        return AzureWaveUnits()

    def scenario_observer(self) -> AzureObserver:
        from forewarn.azure.scenario.observer import AzureObserver

        return AzureObserver()

    def scenario_steps(self) -> ScenarioSteps:
        from forewarn.azure.scenario.steps import STEPS

        return STEPS

    def conformance(self) -> CloudCases | None:
        from forewarn.azure.conformance import cases

        return cases()


AZURE: Cloud = AzureCloud()
