"""Azure's commands on the runtime (``app/runtime.py``): each one command of ``AzureComponent``, with the check that
refuses it before it changes anything, run through the runtime's group commit (``*_soon``, on the event loop) or
committed at once (``perform``: callers with no event loop, such as tests and start-up)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from forewarn.app.runtime import Maintenance
from forewarn.azure.changes import EventChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import Event, ScheduleRequest
from forewarn.azure.rules import AzureRules
from forewarn.core.changes import Change
from forewarn.engine.engine import Engine


def _events(changes: list[Change]) -> list[Event]:
    return [change.event for change in changes if isinstance(change, EventChanged)]


def _azure(engine: Engine) -> AzureComponent:
    return engine.component(AzureComponent)


def approve_soon(service: Maintenance, event_ids: Iterable[str], by: str) -> asyncio.Future[list[Change]]:
    """Approve events through the group commit; the future resolves once the approval is durable."""
    ids = list(event_ids)
    return service.perform_soon(lambda engine: _azure(engine).approve(ids, by), lambda e: _azure(e).check_approve(ids))


async def schedule_soon(service: Maintenance, request: ScheduleRequest) -> list[Event]:
    """``schedule`` through the group commit: the events, once durable."""
    changes = await service.perform_soon(
        lambda engine: _azure(engine).schedule(request), lambda engine: _azure(engine).check_schedule(request)
    )
    return _events(changes)


async def cancel_soon(service: Maintenance, event_id: str) -> Event:
    """``cancel`` through the group commit: the canceled event, once durable."""
    changes = await service.perform_soon(
        lambda engine: _azure(engine).cancel(event_id), lambda engine: _azure(engine).check_cancel(event_id)
    )
    return next(change.event for change in changes if isinstance(change, EventChanged))


def schedule(service: Maintenance, request: ScheduleRequest) -> list[Event]:
    changes = service.perform(
        lambda engine: _azure(engine).schedule(request), lambda engine: _azure(engine).check_schedule(request)
    )
    return _events(changes)


def approve(service: Maintenance, event_ids: Iterable[str], by: str) -> list[Change]:
    ids = list(event_ids)
    return service.perform(lambda engine: _azure(engine).approve(ids, by), lambda e: _azure(e).check_approve(ids))


def cancel(service: Maintenance, event_id: str) -> Event:
    changes = service.perform(
        lambda engine: _azure(engine).cancel(event_id), lambda engine: _azure(engine).check_cancel(event_id)
    )
    return next(change.event for change in changes if isinstance(change, EventChanged))


def request_seen(service: Maintenance, scope: str) -> None:
    """A VM of ``scope`` asked for its scheduled events (tracked only when enabling is required): the scope's idle
    timer moves (in memory), or the scope is enabled (committed). A process that follows a leader notes the scope for
    the leader instead (``Role.relays_read``)."""
    if not service.rules.of(AzureRules).enabling_required or service.role.relays_read(scope):
        return
    seen_in([scope], service)


def seen_in(scopes: list[str], service: Maintenance) -> None:
    """``scopes`` asked for their events (here, or at a follower that relayed it), each as if asked here: enabled
    scopes have their idle timer moved, with no commit; the others are enabled, in one commit. Names that are no scope
    of the fleet are passed over."""
    if not service.rules.of(AzureRules).enabling_required:
        return
    known = service.in_memory(lambda engine: azure_fleet(engine.fleet).vms_by_scope)  # the fleet never changes
    asked = [scope for scope in dict.fromkeys(scopes) if scope in known]
    if not asked:
        return
    service.catch_up()
    # Without waiting for a group commit: its commands do not enable scopes (this does, committed), and the idle timer
    # lives in memory only.
    unseen = service.in_memory(lambda engine: _touch(_azure(engine), engine, asked))
    if unseen:
        service.perform(lambda engine: [change for scope in unseen for change in _azure(engine).request_seen(scope)])


def _touch(azure: AzureComponent, engine: Engine, scopes: list[str]) -> list[str]:
    """Move the idle timer of the enabled ones of ``scopes``; the others, to enable."""
    unseen = []
    for scope in scopes:
        if azure.is_enabled(scope):
            azure.last_seen[scope] = engine.now
        else:
            unseen.append(scope)
    return unseen
