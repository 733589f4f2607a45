"""How forewarn's own API and its dashboard show an EC2 instance event (a JSON model)."""

from __future__ import annotations

from pydantic import BaseModel

from forewarn.aws.model import Ec2Event
from forewarn.core.times import formatted_times


class Ec2EventOut(BaseModel):
    event_id: str
    instance_id: str
    code: str
    state: str
    description: str
    not_before: str
    not_after: str | None
    not_before_deadline: str | None
    created_at: str
    started_at: str | None
    ended_at: str | None

    @classmethod
    def of(cls, event: Ec2Event) -> Ec2EventOut:
        return cls(
            event_id=event.event_id,
            instance_id=event.instance_id,
            code=event.code.value,
            state=event.state.value,
            description=event.shown_description,
            **formatted_times(
                event, "not_before", "not_after", "not_before_deadline", "created_at", "started_at", "ended_at"
            ),
        )
