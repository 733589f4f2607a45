"""The knobs of the Event Grid emulation, with the documented defaults (docs/azure-eventgrid.md lists each source)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

SUBJECT_STYLES = ("scheduled-event", "vm")


@dataclass(frozen=True)
class EventGridSettings:
    # ---- what is published (the samples of "Scheduled Events in Event Grid" and Azure Resource Notifications
    # disagree, so these are settings)
    data_version: str = "3.0"  # doc sample; the ARN "mock" sample has "1"
    api_version: str = "2024-07-01"  # data.apiVersion; the mock sample has "2020-03-01"
    subject_style: str = "scheduled-event"  # the scheduled event's ARM id (doc); "vm": the VM's id (mock sample)
    resource_type: str = "microsoft.maintenance/scheduledEvents"  # data.resourceInfo.type as the doc sample spells it
    arn_extras: bool = False  # resourceInfo.tags {} and data.operationalInfo.resourceEventTime (mock sample)
    # share of publications broadcast twice with the same id ("Scheduled Events in Event Grid")
    duplicate_rate: float = 0.0
    duplicate_delay: timedelta = timedelta(0)  # engine time between a publication and its duplicate
    # ---- delivery ("Event Grid message delivery and retry")
    delivery_timeout: float = 30.0  # seconds of wall time Event Grid waits for a webhook's answer
    # Requests in flight at once to one event subscription, and outcomes recorded per store transaction (ours: Event
    # Grid documents neither; one request at a time and a commit per event capped delivery at ~700 events/s).
    concurrent_requests: int = 16
    outcomes_per_commit: int = 64
    non_retried_codes: frozenset[int] = field(default_factory=lambda: frozenset({400, 401, 403, 413}))
    dead_letter_dir: Path = Path("eventgrid-deadletters")
    dead_letter_delay: timedelta = timedelta(minutes=5)  # engine time between the last attempt and the write
    ttl_dead_letter_reason: str = "TimeToLiveExceeded"  # undocumented by Microsoft
    # ---- validation handshake ("Webhook event delivery")
    handshake_timeout: float = 30.0  # seconds of wall time for the subscriber's answer
    validation_window: timedelta = timedelta(minutes=5)  # engine time to GET the validationUrl

    def __post_init__(self) -> None:
        if self.subject_style not in SUBJECT_STYLES:
            raise ValueError(f"subject style must be one of {', '.join(SUBJECT_STYLES)}, not {self.subject_style!r}")
        if not 0.0 <= self.duplicate_rate <= 1.0:
            raise ValueError(f"duplicate rate must be between 0 and 1, not {self.duplicate_rate}")
        if any(not 400 <= code <= 599 for code in self.non_retried_codes):
            raise ValueError("non-retried codes must be HTTP error codes (400-599)")
        for name in ("concurrent_requests", "outcomes_per_commit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("delivery_timeout", "handshake_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("duplicate_delay", "dead_letter_delay", "validation_window"):
            if getattr(self, name) < timedelta(0):
                raise ValueError(f"{name} cannot be negative")
