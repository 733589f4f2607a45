"""The example cloud as a plugin of the server: the object ``FOREWARN_CLOUDS=example_cloud.cloud:EXAMPLE`` names.

Its class subclasses ``forewarn.cloud.Cloud`` to take the defaults of the parts it does not have (no dashboard
panel, no waves, no recording served back, no conformance cases, no ``clock next`` reports). Each part is imported
when first asked for, as the built-in clouds do, so that ``forewarn --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forewarn.cloud import Cloud, FleetListing, Serving
from forewarn.core.component import Footing

if TYPE_CHECKING:
    import click
    from fastapi import APIRouter

    from example_cloud.component import ExampleComponent
    from example_cloud.fleet import ExampleFleetSection
    from example_cloud.metadata import ExampleMetadata
    from example_cloud.model import ExampleRules
    from example_cloud.observer import ExampleObserver
    from forewarn.app.runtime import Maintenance
    from forewarn.net.callers import CallerResolver
    from forewarn.scenario_steps import ScenarioSteps
    from forewarn.store.records import Records


@dataclass(frozen=True)
class ExampleCloud(Cloud):
    name: str = "example"
    title: str = "Example"

    @property
    def records(self) -> Records:
        from example_cloud.records import EXAMPLE_RECORDS

        return EXAMPLE_RECORDS

    def default_rules(self) -> ExampleRules:
        from example_cloud.model import ExampleRules

        return ExampleRules()

    def component(self, footing: Footing, stored: Any | None) -> ExampleComponent:
        from example_cloud.component import ExampleComponent, StoredExample

        return ExampleComponent(footing, stored or StoredExample())

    def fleet_section(self) -> ExampleFleetSection:
        from example_cloud.fleet import ExampleFleetSection

        return ExampleFleetSection()

    def metadata_surface(
        self, service: Maintenance, resolver: CallerResolver, settings: Mapping[str, object]
    ) -> ExampleMetadata:
        from example_cloud.metadata import ExampleMetadata

        return ExampleMetadata(service, resolver)

    def machine_name_and_kind(self, machine: object) -> tuple[str, str] | None:
        from example_cloud.model import ExampleMachine

        return (machine.name, "example_machine") if isinstance(machine, ExampleMachine) else None

    def serving(self, options: Any) -> Serving:
        from example_cloud.serving import ExampleServing

        return ExampleServing()

    def control_router(self, metadata: Mapping[str, object]) -> APIRouter:
        from example_cloud.control import router

        return router

    def scenario_observer(self) -> ExampleObserver:
        from example_cloud.observer import ExampleObserver

        return ExampleObserver()

    def fleet_listing(self) -> FleetListing:
        from example_cloud.cli import LISTING

        return LISTING

    def cli_commands(self) -> Sequence[click.Command]:
        from example_cloud.cli import example

        return (example,)

    def scenario_steps(self) -> ScenarioSteps:
        from example_cloud.steps import STEPS

        return STEPS


EXAMPLE: Cloud = ExampleCloud()
