"""Shapes shared by the control API's routers: events, errors, times."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel

from forewarn.core.errors import Invalid
from forewarn.core.model import Event


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """ISO 8601 (``2026-04-20T22:26:58Z``); a time without an offset is UTC."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise Invalid(f"invalid time {text!r}; use ISO 8601, e.g. 2026-04-20T22:26:58Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


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
            not_before=iso(event.not_before),
            description=event.description,
            duration_seconds=event.duration_seconds,
            impact_window_seconds=event.impact_window.total_seconds(),
            created_at=iso(event.created_at),
            started_at=iso(event.started_at),
            ends_at=iso(event.ends_at),
            ended_at=iso(event.ended_at),
            approvals=list(event.approvals),
            operation_id=event.operation_id,
        )


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorBody


ERRORS = {400: {"model": ErrorOut}, 404: {"model": ErrorOut}, 409: {"model": ErrorOut}}
