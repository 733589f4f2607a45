"""Shapes shared by the control API's routers: the changes a clock move reports, and errors."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, Field

from forewarn.cloud import registered
from forewarn.core.changes import Change
from forewarn.waves.component import WaveChanged
from forewarn.waves.units import units_named

# A clock move reports at most this many changes one by one (a wave step can touch 100,000 events); the rest are
# counted in ``changes_total`` and are in the journal (GET /v1/journal).
MAX_LISTED_CHANGES = 1000


class ChangeOut(BaseModel):
    kind: str = Field(description="event, vm (Azure); ec2_event, instance (EC2); gce_event, gce_instance; wave")
    id: str
    what: str = Field(description="scheduled, approved, started, completed, canceled, impacted, recovered, ...")
    reason: str
    type: str | None = Field(default=None, description="the event type (Azure), code (EC2) or kind (Compute Engine)")
    status: str | None = None
    targets: list[str] = Field(default_factory=list, description="VMs or the instance the change is about")


# A change's report for a person reading ``clock next``: None for bookkeeping (incarnations, the clock itself,
# policies, enabling, an instance's metadata being read).
ChangeReport = Callable[[Any], "ChangeOut | None"]


def _wave_out(change: WaveChanged) -> ChangeOut:
    wave = change.wave
    return ChangeOut(
        kind="wave",
        id=wave.wave_id,
        what=change.what,
        reason=change.reason,
        type=units_named(wave.spec.cloud).kind(wave.spec),
        status=wave.status.value,
    )


@functools.cache
def change_reports() -> dict[type, ChangeReport]:
    """Each kind of change worth reporting, and its report: the waves' here, every registered cloud's from it."""
    reports: dict[type, ChangeReport] = {WaveChanged: _wave_out}
    for cloud in registered():
        reports.update(cloud.change_reports())
    return reports


def change_out(change: Change) -> ChangeOut | None:
    """What a person reading ``clock next`` wants to know of one change (None: nothing worth a line)."""
    report = change_reports().get(type(change))
    return None if report is None else report(change)


def changes_out(changes: Iterable[Change]) -> tuple[list[ChangeOut], int]:
    """The changes worth reporting, the first ``MAX_LISTED_CHANGES`` of them, and how many there were."""
    reported = [out for out in map(change_out, changes) if out is not None]
    return reported[:MAX_LISTED_CHANGES], len(reported)


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorBody


ERRORS: dict[int | str, dict[str, Any]] = {400: {"model": ErrorOut}, 404: {"model": ErrorOut}, 409: {"model": ErrorOut}}
