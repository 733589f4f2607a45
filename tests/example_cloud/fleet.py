"""The example cloud's section of the fleet file (``example_machines: [{name, host, imds: {address}}]``) and its part
of the fleet."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from example_cloud.model import ExampleMachine
from forewarn.fleet.file import Imds, Strict
from forewarn.fleet.model import Fleet
from forewarn.fleet.section import BuildContext

CLOUD = "example"
KEY = "example_machines"


def example_fleet(fleet: Fleet) -> ExampleFleet:
    return fleet.part(CLOUD, ExampleFleet)


class ExampleFleet:
    """The fleet's example machines, by name (a ``fleet.model.FleetPart``)."""

    machine_kind = "instance"

    def __init__(self, machines: Iterable[ExampleMachine] = ()):
        self._machines = {machine.name: machine for machine in machines}

    @property
    def machines(self) -> Mapping[str, ExampleMachine]:
        return self._machines

    def also_named(self, name: str) -> ExampleMachine | None:
        return None

    def summary(self) -> dict[str, int]:
        return {KEY: len(self._machines)}

    def described(self, counted: Callable[[int, str], str]) -> str:
        return counted(len(self._machines), "example machine")

    def to_records(self) -> dict[str, Any]:
        return {KEY: [[m.name, m.host, m.imds_address, m.imds_port] for m in self._machines.values()]}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExampleFleet) and other._machines == self._machines


class MachineSpec(Strict):
    name: str = Field(min_length=1, max_length=63)
    host: str | None = None
    imds: Imds | None = None


@dataclass(frozen=True)
class ExampleFleetSection:
    def spec_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {KEY: (list[MachineSpec], Field(default_factory=list))}

    def default_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {}

    def build(self, spec: Any, context: BuildContext) -> ExampleFleet:
        machines = []
        for index, item in enumerate(getattr(spec, KEY)):
            path = (KEY, index)
            if item.name in context.names:
                context.fail(path + ("name",), f"duplicate name {item.name!r}")
            context.names[item.name] = 1
            if item.host is not None:
                context.check_host(item.host, path + ("host",))
            address, port = (item.imds.address, item.imds.port) if item.imds else (None, None)
            context.claim_imds(path, address, port, item.name)
            machines.append(ExampleMachine(item.name, item.host or f"{item.name}-host", address, port))
        return ExampleFleet(machines)

    def from_records(self, records: Mapping[str, Any]) -> ExampleFleet:
        return ExampleFleet(ExampleMachine(*row) for row in records.get(KEY, []))
