"""The example cloud's routes in the control API: ``POST /v1/example/maintenance`` announces a reboot; ``GET`` lists
each machine's latest (what a scenario run waits for)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from example_cloud.component import ExampleComponent
from example_cloud.model import Reboot, RebootChanged
from forewarn.control.models import ERRORS
from forewarn.control.service import ControlService
from forewarn.core.durations import parse_optional_duration

if TYPE_CHECKING:
    from forewarn.engine.engine import Engine


class MaintainIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    machine: str
    notice: str | None = None  # e.g. 30m; default: the rules' (15m)


class RebootOut(BaseModel):
    event_id: str
    machine: str
    at: str
    created_at: str
    state: str

    @classmethod
    def of(cls, reboot: Reboot) -> RebootOut:
        return cls(
            event_id=reboot.event_id,
            machine=reboot.machine,
            at=reboot.at.isoformat(),
            created_at=reboot.created_at.isoformat(),
            state=reboot.state,
        )


router = APIRouter()


@router.get("/v1/example/maintenance", tags=["example"])
async def reboots(service: ControlService) -> list[RebootOut]:
    service.catch_up()
    return [RebootOut.of(r) for r in service.settled_engine().component(ExampleComponent).reboots.values()]


@router.post("/v1/example/maintenance", tags=["example"], status_code=201, responses=ERRORS)
async def maintain(service: ControlService, body: MaintainIn) -> list[RebootOut]:
    """Announce a reboot of the machine: its maintenance key says REBOOT from now until the reboot."""
    notice = parse_optional_duration(body.notice)

    def command(engine: Engine) -> list:
        return engine.component(ExampleComponent).maintain(body.machine, notice)

    changes = await service.perform_soon(command)
    return [RebootOut.of(change.reboot) for change in changes if isinstance(change, RebootChanged)]
