"""A cloud's section of the fleet file: its keys, their specs, and how they become its part of the fleet.

The fleet reader (``fleet/file.py``) and :func:`stored_fleet` (the fleet from the store's records) ask every
registered cloud for its section (``Cloud.fleet_section``), in the registry's order, and name no cloud.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol, cast

from forewarn.fleet.model import Fleet, FleetPart, Host
from forewarn.registry import clouds


class FleetSection(Protocol):
    def spec_fields(self) -> Mapping[str, tuple[Any, Any]]:
        """The section's top-level keys of the fleet file: for each, its annotation and its pydantic field (a
        default), as ``pydantic.create_model`` takes them."""
        ...

    def default_fields(self) -> Mapping[str, tuple[Any, Any]]:
        """The section's keys under the file's ``defaults``, the same way."""
        ...

    def build(self, spec: Any, context: BuildContext) -> FleetPart:
        """The cloud's machines from the validated file (``spec``: every section's keys, and ``defaults``),
        checked: a problem is ``context.fail(path, message)``."""
        ...

    def from_records(self, records: Mapping[str, Any]) -> FleetPart:
        """The cloud's machines from the fleet's records (its keys there, as its part's ``to_records`` wrote them;
        a key missing from older records is an empty list)."""
        ...


class FleetCloud(Protocol):
    """What the fleet needs of a registered cloud (``forewarn.cloud.Cloud`` has it all)."""

    @property
    def name(self) -> str: ...

    def fleet_section(self) -> FleetSection: ...


def sections() -> tuple[tuple[str, FleetSection], ...]:
    """Every registered cloud's fleet section, by cloud name, in the registry's order."""
    return tuple((cloud.name, cloud.fleet_section()) for cloud in cast("tuple[FleetCloud, ...]", clouds()))


def stored_fleet(records: Mapping[str, Any]) -> Fleet:
    """The fleet from the records ``Fleet.to_records`` wrote: its hosts, its default VM and each cloud's part."""
    return Fleet(
        hosts=[Host(name) for name in records["hosts"]],
        parts={cloud: section.from_records(records) for cloud, section in sections()},
        default_vm=records.get("default_vm"),
    )


class FleetFileError(Exception):
    """A fleet file was refused; the message names the file, the line and the problem."""


@dataclass
class BuildContext:
    """What every section's build shares: where problems are reported, the declared hosts, and the names, metadata
    addresses and ports taken so far (unique across the fleet)."""

    filename: str
    lines: dict[tuple, int]
    declared_hosts: Mapping[str, object]
    names: dict[str, int] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    ports: dict[int, str] = field(default_factory=dict)

    def fail(self, path: tuple, message: str) -> NoReturn:
        from forewarn.yamlfile import line_of, where

        raise FleetFileError(f"{self.filename}:{line_of(path, self.lines)}: {where(path)}: {message}")

    def refuse(self, message: str) -> NoReturn:
        """A problem of the whole file, with no line of its own."""
        raise FleetFileError(f"{self.filename}: {message}")

    def check_host(self, name: str, path: tuple) -> None:
        if self.declared_hosts and name not in self.declared_hosts:
            self.fail(path, f"host {name!r} is not declared under hosts")

    def claim_imds(self, path: tuple, address: str | None, port: int | None, owner: str) -> None:
        """Take a machine's metadata address and port, refused when another machine has one of them."""
        for what, key, seen in (("address", address, self.addresses), ("port", port, self.ports)):
            if key is not None and key in seen:
                self.fail(path + ("imds", what), f"imds {what} {key} is already {seen[key]!r}'s")  # type: ignore[index]
            if key is not None:
                seen[key] = owner  # type: ignore[index]
