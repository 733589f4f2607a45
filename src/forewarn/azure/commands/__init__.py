"""Azure's commands on the runtime (``app/runtime.py``): each one command of ``AzureComponent``, with the check that
refuses it before it changes anything, run through the runtime's group commit (``*_soon``, on the event loop) or
committed at once (``perform``: callers with no event loop, such as tests and start-up)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import replace

from forewarn.app.runtime import Check, Command, Maintenance
from forewarn.app.turns import Turns
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
    """``schedule`` through the group commit: the events, once durable. A request over many hosts, or naming many
    VMs, is scheduled ``MACHINES_PER_COMMAND`` machines' hosts a command, each committed on its own (the whole
    request checked before the first), so that the server answers requests between them: a Freeze over 5% of a
    million VMs' hosts is 45,000 VMs. Each command is a step of its own (a scope on hosts of two commands moves two DocumentIncarnations),
    each host is still one operation, and every event has the first command's NotBefore."""
    first, *rest = await _vm_parts(service, request) if _names_vms_only(request) else _host_parts(service, request)
    pinned: list[ScheduleRequest] = []  # the later parts, at the first one's NotBefore
    if rest:
        # The whole request checked first, a part at a time, each in a turn of the loop of its own (a command that
        # changes nothing): at a million VMs it counts the VMs of some 5,000 hosts, or looks up 90,000 VMs named,
        # which the first part's own work would otherwise follow in one stretch. A command that comes between them
        # and makes the request wrong has its part refused, as every part is checked again when it is scheduled.
        for part in (first, *rest):
            await service.perform_soon(_nothing, _checking(part))

    def schedule_first(engine: Engine) -> list[Change]:
        azure = _azure(engine)
        if request.not_before is None and not request.start_now:
            not_before = azure.check_request(first)[0]
            pinned[:] = [replace(part, not_before=not_before, notice=None) for part in rest]
        else:
            pinned[:] = rest
        return azure.schedule(first)

    # The events of each command as it is answered, not its changes to the last: the answer's first turn would read
    # them all again (45,000 events are some 100,000 changes).
    events = _events(await service.perform_soon(schedule_first, _checking(first)))
    for part in pinned:
        events += _events(await service.perform_soon(_scheduling(part), _checking(part)))
    return events


def _nothing(engine: Engine) -> list[Change]:
    return []


def _scheduling(request: ScheduleRequest) -> Command:
    return lambda engine: _azure(engine).schedule(request)


def _checking(request: ScheduleRequest) -> Check:
    return lambda engine: _azure(engine).check_schedule(request)


# Machines a command of a schedule over many hosts takes before the next command takes the rest (a host is never
# split): 5 to 15 ms of the event loop's time in a million VMs' fleet (bench/stalls.py; at 500, 27 ms). Counted, not
# timed: where a command ends shows in the documents. Smaller, it makes more commits than metadata replicas on a
# shared machine keep up with (``waves/component.py``'s ``MACHINES_PER_COMMAND``).
MACHINES_PER_COMMAND = 250


def _names_vms_only(request: ScheduleRequest) -> bool:
    return bool(request.vms) and not request.hosts and request.group is None and not request.per_vm


async def _vm_parts(service: Maintenance, request: ScheduleRequest) -> list[ScheduleRequest]:
    """``request``, which names VMs only, cut by their hosts into requests of about ``MACHINES_PER_COMMAND`` VMs
    (a host's VMs named are never split: they share an operation), the hosts in the order their first VM is named.
    The VMs are looked up a turn of the loop at a time (90,000 names fit in a request's megabyte); an unknown one
    is refused here, before anything is checked."""
    names = tuple(dict.fromkeys(request.vms))
    if len(names) <= MACHINES_PER_COMMAND:
        return [request]
    azure = _azure(service.settled_engine())
    by_host: dict[str, list[str]] = {}
    turns = Turns()
    for name in names:
        vm = azure_fleet(azure.fleet).vm(name)
        by_host.setdefault(azure.vm_states.host(vm.name), []).append(name)
        if turns.over():
            await turns.next()
    parts: list[ScheduleRequest] = []
    vms: list[str] = []
    for named in by_host.values():
        vms += named
        if len(vms) >= MACHINES_PER_COMMAND:
            parts.append(replace(request, vms=tuple(vms)))
            vms = []
    if vms:
        parts.append(replace(request, vms=tuple(vms)))
    return parts


def _host_parts(service: Maintenance, request: ScheduleRequest) -> list[ScheduleRequest]:
    """``request`` cut by its hosts into requests of about ``MACHINES_PER_COMMAND`` machines (itself, when it names
    VMs or a group too, or is small)."""
    if request.vms or request.group is not None or len(request.hosts) < 2:
        return [request]
    azure = _azure(service.settled_engine())
    parts: list[ScheduleRequest] = []
    hosts: list[str] = []
    machines = 0
    for host in request.hosts:
        hosts.append(host)
        machines += azure.count_on_host(host)
        if machines >= MACHINES_PER_COMMAND:
            parts.append(replace(request, hosts=tuple(hosts)))
            hosts, machines = [], 0
    if hosts or not parts:
        parts.append(replace(request, hosts=tuple(hosts)))
    return parts


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


def request_seen(service: Maintenance, scope: str) -> asyncio.Future[list[Change]] | None:
    """A VM of ``scope`` asked for its scheduled events (tracked only when enabling is required): the scope's idle
    timer moves (in memory), or the scope is enabled (``seen_in``: the commit to wait for before answering). A
    process that follows a leader notes the scope for the leader instead (``Role.relays_read``)."""
    if not service.rules.of(AzureRules).enabling_required or service.role.relays_read(scope):
        return None
    return seen_in([scope], service)


def seen_in(scopes: list[str], service: Maintenance) -> asyncio.Future[list[Change]] | None:
    """``scopes`` asked for their events (here, or at a follower that relayed it), each as if asked here: enabled
    scopes have their idle timer moved, with no commit; the others are enabled, in one command through the group
    commit, whose future this returns (None: nothing to commit). Names that are no scope of the fleet are passed
    over."""
    if not service.rules.of(AzureRules).enabling_required:
        return None
    known = service.in_memory(lambda engine: azure_fleet(engine.fleet).vms_by_scope)  # the fleet never changes
    asked = [scope for scope in dict.fromkeys(scopes) if scope in known]
    if not asked:
        return None
    service.catch_up()
    # Without waiting for a group commit under way: its commands do not enable scopes (this does, in the next one),
    # and the idle timer lives in memory only.
    unseen = service.in_memory(lambda engine: _touch(_azure(engine), engine, asked))
    if not unseen:
        return None
    return service.perform_soon(
        lambda engine: [change for scope in unseen for change in _azure(engine).request_seen(scope)]
    )


def _touch(azure: AzureComponent, engine: Engine, scopes: list[str]) -> list[str]:
    """Move the idle timer of the enabled ones of ``scopes``; the others, to enable."""
    unseen = []
    for scope in scopes:
        if azure.is_enabled(scope):
            azure.last_seen[scope] = engine.now
        else:
            unseen.append(scope)
    return unseen
