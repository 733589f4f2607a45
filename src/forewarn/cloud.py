"""What a cloud gives the server: the one object each cloud package exports (its ``cloud.py``).

A cloud holds everything of its own: its model, its engine component and rules, its records in the store, its
surfaces. The engine, the store, the control app, the CLI's root group and the metadata listener know a cloud only
through this protocol, and find the clouds through the registry (``registry.py``; :func:`registered` gives them with
this whole protocol). The corridors that still name a cloud are listed in tests/test_dependencies.py
(``NAMING_A_CLOUD``), a list that only shrinks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from forewarn.core.component import ComponentSource
from forewarn.registry import clouds

if TYPE_CHECKING:
    import click
    from fastapi import APIRouter

    from forewarn.app.runtime import Maintenance
    from forewarn.fleet.section import FleetSection
    from forewarn.net.browser_guard import Refusal
    from forewarn.net.callers import CallerResolver
    from forewarn.net.http import Request
    from forewarn.store.records import Records


class MetadataSurface(Protocol):
    """A cloud's metadata server, as the metadata listener routes to it (server/bootstrap.py's MetadataRouter):
    one address for every cloud, as on a real VM."""

    def claims(self, path: str) -> bool:
        """Whether ``path`` is this cloud's (Azure: /metadata; EC2: /latest, a dated version, /1.0, the root;
        Compute Engine: /computeMetadata). The paths of two clouds never overlap."""
        ...

    def serve(self, request: Request) -> Any:
        """The answer (a response, or a later or deferred one: net/http.py)."""
        ...

    def refuse(self, path: str, refusal: Refusal) -> Any:
        """What the listener's guard refused (a web page's request, a rebound name), in this surface's style."""
        ...


class Cloud(ComponentSource, Protocol):
    @property
    def title(self) -> str:
        """As its users read it, in logs and messages: "Azure", "Amazon EC2", "Compute Engine"."""
        ...

    @property
    def records(self) -> Records:
        """What the cloud writes to the store, and how its stored state is read back."""
        ...

    def fleet_section(self) -> FleetSection:
        """The cloud's section of the fleet file (its keys, their checks, its machines) and of the fleet's records;
        its machines are its part of the :class:`~forewarn.fleet.model.Fleet`, by the cloud's name."""
        ...

    def control_router(self, service: Maintenance, metadata: Mapping[str, object]) -> APIRouter:
        """The cloud's routes in forewarn's control API (``metadata``: each cloud's metadata surface, by cloud
        name, where the server runs one)."""
        ...

    def metadata_surface(
        self, service: Maintenance, resolver: CallerResolver, settings: Mapping[str, object]
    ) -> MetadataSurface:
        """The cloud's metadata server (``settings``: each cloud's settings of its metadata surface, by cloud name;
        a cloud not named there runs with its defaults)."""
        ...

    def change_reports(self) -> Mapping[type, Callable[[Any], Any]]:
        """Each kind of the cloud's changes worth a line when time moves (``clock next``), and its report: a
        ``control.models.ChangeOut``, or None for a change of that kind that is bookkeeping."""
        ...

    def cli_commands(self) -> Sequence[click.Command]:
        """The cloud's commands of the ``forewarn`` CLI, added to its root group (light to import: click and
        ``cli/common.py``, as the CLI's start-up budget asks)."""
        ...


def registered() -> tuple[Cloud, ...]:
    """Every registered cloud, in the registry's order. Each cloud's module declares its object a ``Cloud`` (the
    type checker holds it to this protocol there); the registry itself loads them by name and cannot."""
    return cast("tuple[Cloud, ...]", clouds())
