"""Azure as a plugin of the server (``forewarn/clouds/protocol.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forewarn.azure.component import AzureComponent, StoredAzure
from forewarn.azure.records import AZURE_RECORDS
from forewarn.clouds.protocol import Cloud, Footing
from forewarn.store.records import Records


@dataclass(frozen=True)
class AzureCloud:
    name: str = "azure"
    title: str = "Azure"
    records: Records = AZURE_RECORDS

    def component(self, footing: Footing, stored: Any | None) -> AzureComponent:
        return AzureComponent(
            footing.fleet,
            footing.seed,
            footing.rules,
            footing.scheduler,
            footing.sequence,
            stored or StoredAzure(),
            footing.created_at,
        )


AZURE: Cloud = AzureCloud()
