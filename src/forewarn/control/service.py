"""What the control API's routes work on, reached through FastAPI dependencies: the routes are declared once, at
module level, and each request finds the service and the metadata surfaces of the app that answers it (one process
may hold several apps, each over its own service, as the tests do)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, FastAPI, Request

from forewarn.app.runtime import Maintenance


def attach(app: FastAPI, service: Maintenance, metadata: Mapping[str, object]) -> None:
    """Give ``app``'s routes their service and each cloud's metadata surface (by cloud name, where the server runs
    one)."""
    app.state.service = service
    app.state.metadata = dict(metadata)


# Coroutines, so that FastAPI calls them on the event loop rather than in its thread pool.
async def control_service(request: Request) -> Maintenance:
    return request.app.state.service


def metadata_surface(request: Request, cloud: str) -> object:
    """The metadata surface of ``cloud`` in the app answering ``request`` (its routes are included only where the
    server runs one)."""
    return request.app.state.metadata[cloud]


#: A route's parameter that receives the service: ``service: ControlService``.
ControlService = Annotated[Maintenance, Depends(control_service)]
