"""Google Compute Engine as a plugin of the server (``forewarn/clouds/protocol.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forewarn.clouds.protocol import Cloud, Footing
from forewarn.gcp.component import GcpComponent, StoredGcp
from forewarn.gcp.records import GCP_RECORDS
from forewarn.store.records import Records


@dataclass(frozen=True)
class GcpCloud:
    name: str = "gcp"
    title: str = "Compute Engine"
    records: Records = GCP_RECORDS

    def component(self, footing: Footing, stored: Any | None) -> GcpComponent:
        return GcpComponent(
            footing.fleet,
            footing.seed,
            footing.rules.gce,
            footing.scheduler,
            footing.sequence,
            stored or StoredGcp(),
            footing.created_at,
        )


GCP: Cloud = GcpCloud()
