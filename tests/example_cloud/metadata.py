"""The example cloud's metadata key: ``GET /example/v1/maintenance`` at a machine's metadata address, ``NONE`` or
``REBOOT`` (plain text), as the machine behind the connection sees it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from example_cloud.component import ExampleComponent
from example_cloud.model import ExampleMachine
from forewarn.app.errors import Unavailable
from forewarn.net.callers import CallerResolver, UnknownCaller
from forewarn.net.http import TEXT, Request, Response

if TYPE_CHECKING:
    from forewarn.app.runtime import Maintenance
    from forewarn.net.browser_guard import Refusal

PREFIX = "/example/"
KEY_PATH = "/example/v1/maintenance"


def _text(status: int, text: str) -> Response:
    return status, f"{text}\n".encode(), TEXT, ()


class ExampleMetadata:
    """A ``cloud.MetadataSurface``."""

    def __init__(self, service: Maintenance, resolver: CallerResolver):
        self.service = service
        self.resolver = resolver

    def claims(self, path: str) -> bool:
        return path.startswith(PREFIX)

    def refuse(self, path: str, refusal: Refusal) -> Response:
        return _text(refusal.status, refusal.message)

    def serve(self, request: Request) -> Response:
        if request.path != KEY_PATH:
            return _text(404, f"no key {request.path}")
        if request.method not in ("GET", "HEAD"):
            return _text(405, "GET only")
        try:
            machine = self.resolver.resolve(request.local, request.peer)
        except UnknownCaller as error:
            return _text(404, str(error))
        if not isinstance(machine, ExampleMachine):
            return _text(404, f"{machine.name} is not an example machine")
        try:
            value = self.service.settled_engine().component(ExampleComponent).value_of(machine.name)
        except Unavailable as error:
            return _text(503, str(error))
        return 200, value.encode(), TEXT, ()
