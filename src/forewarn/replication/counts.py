"""What a shared process counts for its metrics, in plain ints on the paths that serve requests (a
prometheus_client Counter would take a lock per increment)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Counts:
    """What the metrics report, counted in plain ints on the paths that serve requests."""

    requests: dict[tuple[str, int], int] = field(default_factory=dict)
    failovers: int = 0
    refreshes: int = 0  # incremental and full
    full_reloads: int = 0
    refresh_seconds: float = 0.0
