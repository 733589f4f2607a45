"""The metadata listener's one handler: each request to the surface of the cloud whose path it is."""

from __future__ import annotations

from collections.abc import Sequence

from forewarn.cloud import MetadataSurface
from forewarn.net.browser_guard import MetadataGuard
from forewarn.net.http import Request


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

    def handle(self, request: Request):
        path = request.path
        surface = self.fallback
        for candidate in self.surfaces:
            if candidate.claims(path):
                surface = candidate
                break
        refused = self.guard.check(request.headers)
        return surface.serve(request) if refused is None else surface.refuse(path, refused)
