"""How forewarn's own API and its dashboard show an Azure scheduled event (a JSON model)."""

from __future__ import annotations

from pydantic import BaseModel

from forewarn.azure.model import Event
from forewarn.core.times import format_time, formatted_times


class EventOut(BaseModel):
    event_id: str
    status: str
    type: str
    source: str
    resources: list[str]
    scope: str
    not_before: str
    description: str
    duration_seconds: int
    impact_window_seconds: float
    created_at: str
    started_at: str | None
    ends_at: str | None
    ended_at: str | None
    approvals: list[str]
    operation_id: str

    @classmethod
    def of(cls, event: Event) -> EventOut:
        return cls(
            event_id=event.event_id,
            status=event.status.value,
            type=event.event_type.value,
            source=event.source.value,
            resources=list(event.resources),
            scope=event.scope,
            not_before=format_time(event.not_before),
            description=event.description,
            duration_seconds=event.duration_seconds,
            impact_window_seconds=event.impact_window.total_seconds(),
            **formatted_times(event, "created_at", "started_at", "ends_at", "ended_at"),
            approvals=list(event.approvals),
            operation_id=event.operation_id,
        )
