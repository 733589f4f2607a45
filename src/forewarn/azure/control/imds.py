"""The control API's routes for Azure's metadata endpoint: its settings, and faults injected to test clients' retry
logic."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, cast

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from forewarn.azure.imds.scheduled_events import AzureImds, Fault
from forewarn.azure.rules import AzureRules
from forewarn.control.models import ERRORS
from forewarn.control.service import metadata_surface
from forewarn.core.durations import parse_duration
from forewarn.core.errors import Invalid
from forewarn.core.times import format_optional_time


class FaultIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: int = Field(default=0, strict=True, description="410, 429 or 500; 0 with a delay for slowness only")
    vms: list[str] = Field(default_factory=list, description="VMs affected; all when empty")
    requests: int | None = Field(default=None, strict=True, description="how many requests fail; unlimited when absent")
    duration: str | None = Field(default=None, description="how long, in simulated time (30s, 5m, PT70S)")
    delay: str | None = Field(default=None, description="added latency per answer, wall time (e.g. 2s)")


class FaultOut(BaseModel):
    fault_id: int
    status: int
    vms: list[str]
    requests_left: int | None
    until: str | None
    delay_seconds: float

    @classmethod
    def of(cls, fault: Fault) -> FaultOut:
        return cls(
            fault_id=fault.fault_id,
            status=fault.status,
            vms=sorted(fault.vms),
            requests_left=fault.requests,
            until=format_optional_time(fault.until),
            delay_seconds=fault.delay,
        )


async def azure_imds(request: Request) -> AzureImds:
    """The server's Azure IMDS: the routes that take it are included only where the server runs one."""
    return cast(AzureImds, metadata_surface(request, "azure"))  # by AzureCloud's name


#: A route's parameter that receives the server's Azure IMDS: ``imds: ServedImds``.
ServedImds = Annotated[AzureImds, Depends(azure_imds)]

router = APIRouter()


@router.get("/v1/imds/settings", tags=["imds"])
async def settings(imds: ServedImds):
    """The endpoint's behaviour: the profile's settings after the command line's overrides."""
    rules = imds.service.settled_engine().rules.of(AzureRules)
    return {
        **asdict(imds.settings),
        "enabling_required": rules.enabling_required,
        "disable_after_seconds": rules.disable_after.total_seconds(),
    }


@router.get("/v1/imds/faults", tags=["imds"], response_model=list[FaultOut])
async def faults(imds: ServedImds):
    return [FaultOut.of(fault) for fault in imds.faults]


@router.post("/v1/imds/faults", tags=["imds"], status_code=201, response_model=FaultOut, responses=ERRORS)
async def inject(imds: ServedImds, body: FaultIn):
    """Make the metadata endpoint fail (410, 429, 500) or slow down for some VMs, for a number of requests or a
    period of simulated time. Faults live in memory: a restart clears them."""
    if body.requests is None and body.duration is None and body.status:
        raise Invalid("say how long the fault lasts: requests, duration, or both")
    until = None if body.duration is None else imds.service.now() + parse_duration(body.duration)
    delay = 0.0 if body.delay is None else parse_duration(body.delay).total_seconds()
    return FaultOut.of(imds.inject(body.status, body.vms, body.requests, until, delay))


@router.delete("/v1/imds/faults", tags=["imds"])
async def clear(imds: ServedImds):
    return {"cleared": imds.clear_faults()}
