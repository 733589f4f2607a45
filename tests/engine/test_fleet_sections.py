"""Each cloud's section of the fleet file comes from the cloud (``Cloud.fleet_section``): a cloud the fleet reader
never heard of adds its key, its checks and its machines, and the fleet, its records and the metadata callers
treat them like any other cloud's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pytest
from pydantic import Field

from forewarn.azure.fleet import azure_fleet
from forewarn.fleet import section
from forewarn.fleet.file import FleetFileError, Imds, Strict, parse_fleet
from forewarn.fleet.model import Fleet, Host
from forewarn.fleet.section import BuildContext
from forewarn.net.callers import CallerResolver
from forewarn.registry import clouds


@dataclass(frozen=True)
class RackMachine:
    name: str
    host: str
    imds_address: str | None = None
    imds_port: int | None = None
    interruptible: bool = False

    @property
    def fleet_name(self) -> str:
        return self.name


class RackFleet:
    machine_kind = "instance"

    def __init__(self, machines: Iterable[RackMachine] = ()):
        self.by_name = {machine.name: machine for machine in machines}

    @property
    def machines(self) -> Mapping[str, RackMachine]:
        return self.by_name

    def also_named(self, name: str) -> RackMachine | None:
        return None

    def to_records(self) -> dict[str, Any]:
        return {"racks": [asdict(machine) for machine in self.by_name.values()]}

    def summary(self) -> dict[str, int]:
        return {"rack_machines": len(self.by_name)}

    def described(self, counted) -> str:
        return counted(len(self.by_name), "rack machine")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RackFleet) and list(self.by_name.values()) == list(other.by_name.values())


class RackSpec(Strict):
    name: str = Field(min_length=1)
    host: str
    imds: Imds | None = None


@dataclass(frozen=True)
class RackSection:
    def spec_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {"rack_machines": (list[RackSpec], Field(default_factory=list))}

    def default_fields(self) -> Mapping[str, tuple[Any, Any]]:
        return {"rack_room": (str | None, None)}

    def build(self, spec: Any, context: BuildContext) -> RackFleet:
        found = []
        for index, item in enumerate(spec.rack_machines):
            path = ("rack_machines", index)
            if item.name in context.names:
                context.fail(path + ("name",), f"duplicate name {item.name!r}")
            context.names[item.name] = 1
            context.check_host(item.host, path + ("host",))
            imds = item.imds or Imds()
            context.claim_imds(path, imds.address, imds.port, item.name)
            found.append(RackMachine(item.name, item.host, imds.address, imds.port))
        return RackFleet(found)

    def from_records(self, records: Mapping[str, Any]) -> RackFleet:
        return RackFleet(RackMachine(**machine) for machine in records.get("racks", []))


@dataclass(frozen=True)
class RackCloud:
    name: str = "racks"

    def fleet_section(self) -> RackSection:
        return RackSection()


@pytest.fixture
def with_racks(monkeypatch):
    monkeypatch.setattr(section, "clouds", lambda: (*clouds(), RackCloud()))


def test_a_clouds_own_section_is_read_into_its_part_of_the_fleet(with_racks):
    fleet = parse_fleet(
        "vms: [{name: solo, imds: {port: 9100}}]\nrack_machines: [{name: r1, host: rack-a, imds: {port: 9101}}]\n"
    )
    racks = fleet.part("racks", RackFleet)
    assert list(racks.machines) == ["r1"] and "rack-a" in fleet.hosts
    assert list(fleet.names()) == ["solo", "r1"] and fleet.machine_called("r1") is racks.machines["r1"]
    assert list(azure_fleet(fleet).vms) == ["solo"]
    assert section.stored_fleet(fleet.to_records()) == fleet
    assert CallerResolver(fleet, set()).resolve(("127.0.0.1", 9101), ("127.0.0.1", 50000)) is racks.machines["r1"]


def test_a_clouds_section_is_checked_with_the_files_lines(with_racks):
    text = "vms: [{name: solo, imds: {port: 9100}}]\nrack_machines:\n  - {name: r1, host: rack-a, imds: {port: 9100}}\n"
    with pytest.raises(FleetFileError, match=r"<fleet>:3: rack_machines\[0\]\.imds\.port: imds port 9100 is already"):
        parse_fleet(text)
    with pytest.raises(
        FleetFileError, match=r"<fleet>:1: rack_machine: unknown key 'rack_machine'; did you mean 'rack_machines'\?"
    ):
        parse_fleet("rack_machine: []\nvms: [{name: solo}]\n")
    with pytest.raises(
        FleetFileError, match=r"<fleet>:1: defaults\.rack_rooms: unknown key 'rack_rooms'; did you mean 'rack_room'\?"
    ):
        parse_fleet("defaults: {rack_rooms: a}\nvms: [{name: solo}]\n")
    assert parse_fleet("defaults: {rack_room: a}\nvms: [{name: solo}]\n").default_vm == "solo"


def test_names_are_unique_across_every_clouds_part():
    with pytest.raises(ValueError, match="duplicate instance 'solo'"):
        Fleet(
            [Host("h")],
            {"azure": azure_fleet(parse_fleet("vms: [{name: solo}]")), "racks": RackFleet([RackMachine("solo", "h")])},
        )
