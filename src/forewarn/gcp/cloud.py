"""Google Compute Engine as a plugin of the server (``forewarn/cloud.py``).

Light to import: each part is imported when it is first asked for (see azure/cloud.py).
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
    from forewarn.conformance_cases import CloudCases
    from forewarn.gcp.component import GcpComponent
    from forewarn.gcp.fleet import GceFleetSection
    from forewarn.gcp.metadata.server import GceMetadata
    from forewarn.gcp.model import GceRules
    from forewarn.gcp.scenario.observer import GceObserver
    from forewarn.net.callers import CallerResolver
    from forewarn.scenario_steps import ScenarioSteps
    from forewarn.store.records import Records
    from forewarn.waves.units import WaveUnits


@dataclass(frozen=True)
class GcpCloud:
    name: str = "gcp"
    title: str = "Compute Engine"

    @property
    def records(self) -> Records:
        from forewarn.gcp.records import GCP_RECORDS

        return GCP_RECORDS

    def default_rules(self) -> GceRules:
        from forewarn.gcp.model import GceRules

        return GceRules()

    def component(self, footing: Footing, stored: Any | None) -> GcpComponent:
        from forewarn.gcp.component import GcpComponent, StoredGcp
        from forewarn.gcp.records import ended_gce_events

        history = None if footing.stored is None else ended_gce_events(footing.stored)
        return GcpComponent(footing, stored or StoredGcp(), history)

    def fleet_section(self) -> GceFleetSection:
        from forewarn.gcp.fleet import GceFleetSection

        return GceFleetSection()

    def control_router(self, metadata: Mapping[str, object]) -> APIRouter:
        from forewarn.gcp.control import routes

        return routes.router

    def metadata_surface(
        self, service: Maintenance, resolver: CallerResolver, settings: Mapping[str, object]
    ) -> GceMetadata:
        from forewarn.gcp.metadata.server import GceMetadata

        return GceMetadata(service, resolver)

    def change_reports(self) -> Mapping[type, Callable[[Any], Any]]:
        from forewarn.gcp.control.routes import CHANGE_REPORTS

        return CHANGE_REPORTS

    def machine_name_and_kind(self, machine: object) -> tuple[str, str] | None:
        from forewarn.gcp.model import GceInstance

        return (machine.name, "gce_instance") if isinstance(machine, GceInstance) else None

    def dashboard_panel(self) -> DashboardPanel:
        from forewarn.gcp.control.dashboard import PANEL

        return PANEL

    def replay_handler(
        self, replay: Replaying, speed: float, on_approval: Callable[[dict], None] | None
    ) -> RecordingServer | None:
        from forewarn.gcp.metadata.replay import GceReplayHandler
        from forewarn.recording.model import GCE

        if replay.recording.source != GCE:
            return None
        return GceReplayHandler(replay, speed=speed)  # the metadata server takes no approvals

    def serving(self, options: Any) -> Serving:
        from forewarn.gcp.serving.wiring import GcpServing

        return GcpServing(options)

    def fleet_listing(self) -> FleetListing:
        from forewarn.gcp.cli.listing import LISTING

        return LISTING

    def cli_commands(self) -> Sequence[click.Command]:
        from forewarn.gcp.cli import gce

        return (gce.gce,)

    def wave_units(self) -> WaveUnits:
        from forewarn.gcp.waves import GceWaveUnits

        return GceWaveUnits()

    def scenario_observer(self) -> GceObserver:
        from forewarn.gcp.scenario.observer import GceObserver

        return GceObserver()

    def scenario_steps(self) -> ScenarioSteps:
        from forewarn.gcp.scenario.steps import STEPS

        return STEPS

    def conformance(self) -> CloudCases | None:
        from forewarn.gcp.conformance import cases

        return cases()


GCP: Cloud = GcpCloud()
