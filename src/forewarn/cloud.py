"""What a cloud gives the server: the one object each cloud package exports (its ``cloud.py``).

A cloud holds everything of its own: its model, its engine component and rules, its records in the store, its
surfaces. The corridors (the engine, the store, the control API) know a cloud only through this protocol, and find
the clouds through the registry (``registry.py``; :func:`registered` gives them with this whole protocol); none of
them names a cloud.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from forewarn.core.component import ComponentSource
from forewarn.registry import clouds

if TYPE_CHECKING:
    import click
    from fastapi import APIRouter

    from forewarn.app.runtime import Maintenance
    from forewarn.store.records import Records


class Cloud(ComponentSource, Protocol):
    @property
    def title(self) -> str:
        """As its users read it, in logs and messages: "Azure", "Amazon EC2", "Compute Engine"."""
        ...

    @property
    def records(self) -> Records:
        """What the cloud writes to the store, and how its stored state is read back."""
        ...

    def control_router(self, service: Maintenance, metadata: Mapping[str, object]) -> APIRouter:
        """The cloud's routes in forewarn's control API (``metadata``: each cloud's metadata surface, by cloud
        name, where the server runs one)."""
        ...

    def cli_commands(self) -> Sequence[click.Command]:
        """The cloud's commands of the ``forewarn`` CLI, added to its root group (light to import: click and
        ``cli/common.py``, as the CLI's start-up budget asks)."""
        ...


def registered() -> tuple[Cloud, ...]:
    """Every registered cloud, in the registry's order. Each cloud's module declares its object a ``Cloud`` (the
    type checker holds it to this protocol there); the registry itself loads them by name and cannot."""
    return cast("tuple[Cloud, ...]", clouds())
