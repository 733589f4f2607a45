"""Amazon EC2 (with AWS Health) as a plugin of the server (``forewarn/cloud.py``).

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
    from forewarn.aws.component import Ec2Component
    from forewarn.aws.fleet import Ec2FleetSection
    from forewarn.aws.imds.metadata import Ec2Imds
    from forewarn.aws.model import Ec2Rules
    from forewarn.aws.scenario.observer import Ec2Observer
    from forewarn.conformance_cases import CloudCases
    from forewarn.net.callers import CallerResolver
    from forewarn.scenario_steps import ScenarioSteps
    from forewarn.store.records import Records
    from forewarn.waves.units import WaveUnits


@dataclass(frozen=True)
class AwsCloud:
    name: str = "aws"
    title: str = "Amazon EC2"

    @property
    def records(self) -> Records:
        from forewarn.aws.records import EC2_RECORDS

        return EC2_RECORDS

    def default_rules(self) -> Ec2Rules:
        from forewarn.aws.model import Ec2Rules

        return Ec2Rules()

    def component(self, footing: Footing, stored: Any | None) -> Ec2Component:
        from forewarn.aws.component import Ec2Component, StoredEc2
        from forewarn.aws.records import EndedEc2Events

        history = None if footing.stored is None else EndedEc2Events(footing.stored)
        return Ec2Component(footing, stored or StoredEc2(), history)

    def fleet_section(self) -> Ec2FleetSection:
        from forewarn.aws.fleet import Ec2FleetSection

        return Ec2FleetSection()

    def control_router(self, metadata: Mapping[str, object]) -> APIRouter:
        from fastapi import APIRouter

        from forewarn.aws.control import queues, routes

        router = APIRouter()
        router.include_router(routes.router)
        router.include_router(queues.router)
        return router

    def metadata_surface(
        self, service: Maintenance, resolver: CallerResolver, settings: Mapping[str, object]
    ) -> Ec2Imds:
        from forewarn.aws.imds.metadata import Ec2Imds, Ec2ImdsSettings

        given = settings.get(self.name)
        return Ec2Imds(service, resolver, given if isinstance(given, Ec2ImdsSettings) else Ec2ImdsSettings())

    def change_reports(self) -> Mapping[type, Callable[[Any], Any]]:
        from forewarn.aws.control.routes import CHANGE_REPORTS

        return CHANGE_REPORTS

    def machine_name_and_kind(self, machine: object) -> tuple[str, str] | None:
        from forewarn.aws.model import Ec2Instance

        return (machine.instance_id, "ec2_instance") if isinstance(machine, Ec2Instance) else None

    def dashboard_panel(self) -> DashboardPanel:
        from forewarn.aws.control.dashboard import PANEL

        return PANEL

    def replay_handler(
        self, replay: Replaying, speed: float, on_approval: Callable[[dict], None] | None
    ) -> RecordingServer | None:
        return None  # forewarn records no EC2 metadata

    def serving(self, options: Any) -> Serving:
        from forewarn.aws.serving.wiring import AwsServing

        return AwsServing(options)

    def fleet_listing(self) -> FleetListing:
        from forewarn.aws.cli.listing import LISTING

        return LISTING

    def cli_commands(self) -> Sequence[click.Command]:
        from forewarn.aws.cli import ec2, queues

        return (ec2.ec2, queues.queues)

    def wave_units(self) -> WaveUnits | None:
        """No waves over EC2 instances."""
        return None

    def scenario_observer(self) -> Ec2Observer:
        from forewarn.aws.scenario.observer import Ec2Observer

        return Ec2Observer()

    def scenario_steps(self) -> ScenarioSteps:
        from forewarn.aws.scenario.steps import STEPS

        return STEPS

    def conformance(self) -> CloudCases | None:
        from forewarn.aws.conformance import cases

        return cases()


AWS: Cloud = AwsCloud()
