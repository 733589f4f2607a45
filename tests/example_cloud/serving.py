"""The example cloud in a running server: its machines (for their metadata addresses) and its banner lines. No API
port of its own, no outbox, no settings: the ``Serving`` defaults."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from example_cloud.fleet import example_fleet
from example_cloud.metadata import KEY_PATH
from example_cloud.model import ExampleMachine
from forewarn.cloud import Banner, Listening, Serving

if TYPE_CHECKING:
    from forewarn.app.runtime import Maintenance


class ExampleServing(Serving):
    machine_kind = "example"

    def machines(self, service: Maintenance) -> Sequence[ExampleMachine]:
        return list(example_fleet(service.settled_engine().fleet).machines.values())

    def current_host(self, service: Maintenance, machine: Any) -> str | None:
        return machine.host if isinstance(machine, ExampleMachine) else None

    def banner(self, service: Maintenance, listening: Listening) -> Banner:
        count = len(self.machines(service))
        imds = f"http://{listening.metadata[0]}:{listening.metadata[1]}"
        return Banner(
            fleet=f"{count} example machine{'' if count == 1 else 's'}",
            surfaces=[f"  example key   {imds}{KEY_PATH}   (at each machine's own address)"] if count else [],
        )
