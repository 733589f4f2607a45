"""Reading fleet files (YAML) into a :class:`~forewarn.fleet.model.Fleet`.

Every problem is reported with the file, the line and what is wrong, e.g.
``fleet.yaml:12: vms[3].host: host 'host-9' is not declared under hosts``.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from forewarn import yamlfile
from forewarn.core.errors import did_you_mean
from forewarn.fleet.model import Fleet, FleetPart, Host
from forewarn.fleet.section import BuildContext, FleetFileError, FleetSection, sections
from forewarn.yamlfile import YamlFileError, line_of, where

DEMO_FLEET = "demo"


class Strict(BaseModel):
    """A mapping of the fleet file: an unknown key is refused (with a "did you mean")."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Imds(Strict):
    address: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            ipaddress.ip_address(value)
        return value


class HostSpec(Strict):
    name: str = Field(min_length=1)


def fleet_spec_model(of: tuple[tuple[str, FleetSection], ...]) -> type[Strict]:
    """The fleet file's model: the keys every fleet has, and each cloud's section's (``of``: :func:`sections`)."""
    found = _SPEC_MODELS.get(of)
    if found is None:
        default_fields = {key: value for _, section in of for key, value in section.default_fields().items()}
        defaults = create_model("Defaults", __base__=Strict, **default_fields)  # type: ignore[call-overload]
        section_fields = {key: value for _, section in of for key, value in section.spec_fields().items()}
        found = _SPEC_MODELS[of] = create_model(  # type: ignore[call-overload]
            "FleetSpec",
            __base__=Strict,
            defaults=(defaults, Field(default_factory=defaults)),
            default_vm=(str | None, None),
            hosts=(list[HostSpec], Field(default_factory=list)),
            **section_fields,
            # Event Grid topics and subscriptions (docs/azure-eventgrid.md): not the fleet, so not in the Fleet;
            # checked by the Event Grid surface, which owns their format.
            event_grid=(dict[str, Any] | None, None),
        )
    return found


_SPEC_MODELS: dict[tuple[tuple[str, FleetSection], ...], type[Strict]] = {}


@dataclass(frozen=True)
class FleetDocument:
    """A fleet file: the fleet, and the sections other parts of forewarn read from it."""

    fleet: Fleet
    event_grid: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------------------- loading
def load_fleet(source: str | Path) -> Fleet:
    """Load a fleet file, or the built-in demo fleet when ``source`` is ``demo``."""
    return load_fleet_document(source).fleet


def load_fleet_document(source: str | Path) -> FleetDocument:
    return read_fleet_file(source).parse()


@dataclass(frozen=True)
class FleetFile:
    """A fleet file's text, read but not parsed yet: its ``digest`` is enough to recognize a file already stored."""

    text: str
    filename: str

    @property
    def digest(self) -> str:
        """The SHA-256 of the file's text: the same bytes, the same fleet (parsing a million VMs takes 20 s, hashing
        their file a fraction of a second)."""
        return hashlib.sha256(self.text.encode()).hexdigest()

    def parse(self) -> FleetDocument:
        return parse_fleet_document(self.text, self.filename)


def read_fleet_file(source: str | Path) -> FleetFile:
    """Read a fleet file (or the built-in demo fleet when ``source`` is ``demo``) without parsing it."""
    if str(source) == DEMO_FLEET:
        return FleetFile(resources.files("forewarn.data").joinpath("demo-fleet.yaml").read_text(), "demo-fleet.yaml")
    try:
        return FleetFile(yamlfile.read_text(source, "fleet file"), str(source))
    except YamlFileError as error:
        raise FleetFileError(str(error)) from None


def parse_fleet(text: str, filename: str = "<fleet>") -> Fleet:
    return parse_fleet_document(text, filename).fleet


def parse_fleet_document(text: str, filename: str = "<fleet>") -> FleetDocument:
    try:
        return _parse_fleet_document(text, filename, all_lines=False)
    except FleetFileError:
        # Parsed without the line of every value (a million-VM file has millions of them): parse again with them,
        # to report the problem at its line.
        return _parse_fleet_document(text, filename, all_lines=True)


def _parse_fleet_document(text: str, filename: str, all_lines: bool) -> FleetDocument:
    try:
        document = yamlfile.parse(text, filename, lines=all_lines)
    except YamlFileError as error:
        raise FleetFileError(str(error)) from None
    data, lines = document.data, document.lines
    if data is None:
        raise FleetFileError(
            f"{filename}:1: the fleet file is empty; a fleet file is a mapping with keys hosts, "
            "vms, scale_sets, ... (docs/fleet.md)"
        )
    if not isinstance(data, dict):
        raise FleetFileError(
            f"{filename}:1: a fleet file is a mapping with keys hosts, vms, scale_sets, ...; "
            f"this one is a {_kind(data)}"
        )
    of = sections()
    try:
        spec: Any = fleet_spec_model(of).model_validate(data)
    except ValidationError as error:
        problems = []
        for problem in error.errors():
            path = tuple(problem["loc"])
            message = problem["msg"]
            if problem["type"] == "extra_forbidden":
                message = f"unknown key {path[-1]!r}{did_you_mean(str(path[-1]), keys_at(path[:-1]))}"
            problems.append(f"{filename}:{line_of(path, lines)}: {where(path)}: {message}")
        raise FleetFileError("\n".join(problems)) from None
    document.data = data = None  # validated into spec: let it go before the VMs are built (hundreds of MB at 1M VMs)
    return FleetDocument(_build(spec, of, BuildContext(filename, lines, {})), spec.event_grid)


def keys_at(path: tuple) -> list[str]:
    """The keys a fleet file's mapping at ``path`` (as pydantic locates it: keys and list indexes) may have; empty
    for a path that is not one of the file's mappings of known keys."""
    annotation: Any = fleet_spec_model(sections())
    for step in path:
        annotation = _optional_inner(annotation)
        if isinstance(step, str) and _is_spec(annotation) and step in annotation.model_fields:
            annotation = annotation.model_fields[step].annotation
        elif isinstance(step, int) and get_origin(annotation) is list:
            [annotation] = get_args(annotation)
        else:
            return []
    annotation = _optional_inner(annotation)
    return list(annotation.model_fields) if _is_spec(annotation) else []


def _optional_inner(annotation: Any) -> Any:
    """``X`` of ``X | None``; any other annotation as it is."""
    if get_origin(annotation) in (Union, UnionType):
        others = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(others) == 1:
            return others[0]
    return annotation


def _is_spec(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _kind(data) -> str:
    return "list" if isinstance(data, list) else "single value"


def _build(spec: Any, of: tuple[tuple[str, FleetSection], ...], context: BuildContext) -> Fleet:
    declared_hosts: dict[str, Host] = {}
    for index, host_spec in enumerate(spec.hosts):
        if host_spec.name in declared_hosts:
            context.fail(("hosts", index, "name"), f"duplicate host {host_spec.name!r}")
        declared_hosts[host_spec.name] = Host(host_spec.name)
    context.declared_hosts = declared_hosts
    parts: dict[str, FleetPart] = {cloud: section.build(spec, context) for cloud, section in of}
    if spec.default_vm is not None and spec.default_vm not in context.names:
        context.fail(("default_vm",), f"{spec.default_vm!r} is not a VM, EC2 or Compute Engine instance of this fleet")
    if not context.names:
        raise FleetFileError(
            f"{context.filename}:1: the fleet has no VM and no instance; declare vms, scale_sets "
            "(with instances), ec2_instances or gce_instances"
        )
    default_vm = spec.default_vm or (next(iter(context.names)) if len(context.names) == 1 else None)
    return Fleet(hosts=declared_hosts.values(), parts=parts, default_vm=default_vm)
