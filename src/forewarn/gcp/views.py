"""How forewarn's own API and its dashboard show a Compute Engine maintenance event (a JSON model)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from forewarn.core.times import formatted_times
from forewarn.gcp.model import GceMaintenance


class GceEventOut(BaseModel):
    event_id: str
    instance: str
    kind: str
    type: str
    state: str
    announced: bool
    can_reschedule: bool
    window_start: str
    window_end: str
    latest_window_start: str = Field(description="the latest time the user may move the start to")
    created_at: str
    notice_at: str | None
    started_at: str | None
    ended_at: str | None
    reason: str

    @classmethod
    def of(cls, event: GceMaintenance) -> GceEventOut:
        return cls(
            event_id=event.event_id,
            instance=event.instance,
            kind=event.kind.value,
            type=event.maintenance_type.value,
            state=event.state.value,
            announced=event.announced,
            can_reschedule=event.can_reschedule,
            reason=event.reason,
            **formatted_times(event, "window_start", "window_end", "latest_window_start", "created_at"),
            **formatted_times(event, "notice_at", "started_at", "ended_at"),
        )
