"""The metadata listener's one handler: each request to the surface of the cloud whose path it is."""

from __future__ import annotations

from collections.abc import Sequence

from forewarn.cloud import MetadataSurface
from forewarn.net.browser_guard import MetadataGuard
from forewarn.net.http import Request

# Distinct paths whose surface is remembered; a scan of more paths is routed afresh each time.
KNOWN_PATHS = 1024


class MetadataRouter:
    """One metadata address for every cloud, as on a real VM: each registered cloud's surface claims its own paths
    (forewarn/cloud.py: Azure's /metadata, EC2's /latest, a dated version or /1.0, Compute Engine's
    /computeMetadata), and a path no cloud claims is answered by the first registered cloud's surface (Azure's 404).
    What a web page could send (and a rebound name) is refused first, by ``guard``, in the style of the surface the
    path names."""

    def __init__(self, surfaces: Sequence[MetadataSurface], guard: MetadataGuard):
        self.surfaces = tuple(surfaces)
        self.fallback = self.surfaces[0]
        self.guard = guard
        self._routes: dict[str, MetadataSurface] = {}  # a path's surface: agents ask the same few paths all day

    def handle(self, request: Request):
        path = request.path
        surface = self._routes.get(path)
        if surface is None:
            surface = self.route(path)
        refused = self.guard.check(request.headers)
        return surface.serve(request) if refused is None else surface.refuse(path, refused)

    def route(self, path: str) -> MetadataSurface:
        """The surface that claims ``path``, or the fallback."""
        surface = self.fallback
        for candidate in self.surfaces:
            if candidate.claims(path):
                surface = candidate
                break
        if len(self._routes) < KNOWN_PATHS:
            self._routes[path] = surface
        return surface
