"""A command over many machines is made in parts (``Maintenance.perform_in_parts_soon``): Compute Engine's and EC2's
schedule through the control API, a few hundred instances a part (and Azure's schedule naming many VMs, a command
a part: ``azure/commands``). Every instance is checked before the first
change, each part is a group commit of its own with the event loop free between them, no other command runs between
parts, and the outcome is the one the command made whole gives. Real SQLite file store, real engine."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from forewarn.app.runtime import MACHINES_PER_PART, Maintenance
from forewarn.aws.changes import Ec2EventChanged
from forewarn.aws.component import Ec2Component, Ec2Request
from forewarn.aws.control.routes import scheduling_in_parts as ec2_scheduling
from forewarn.aws.model import Ec2Code
from forewarn.azure import commands as azure_commands
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.core.errors import Conflict, NotFound
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml
from forewarn.gcp.changes import GceEventChanged
from forewarn.gcp.component import GceRequest, GcpComponent
from forewarn.gcp.control.routes import scheduling_in_parts as gce_scheduling
from helpers import T0, open_store

GENERATED = parse_fleet(fleet_yaml(FleetShape(vms=600, gce=600, ec2=600, seed="parts")))


def opened(path) -> Maintenance:
    return Maintenance.open(open_store(str(path)), GENERATED, "manual", 1.0, T0, "seed")


def gce_names(service: Maintenance) -> tuple[str, ...]:
    return tuple(service.settled_engine().component(GcpComponent).gce_states)


def ec2_ids(service: Maintenance) -> tuple[str, ...]:
    return tuple(service.settled_engine().component(Ec2Component).ec2_states)


def counted_commits(service: Maintenance) -> list[int]:
    """The number of changes of each of the store's commits from now on, in order."""
    made: list[int] = []
    real = service.store.commit

    def counted(changes, *args, **named):
        real(changes, *args, **named)
        made.append(len(changes))

    service.store.commit = counted  # type: ignore[method-assign]
    return made


def scheduled(changes, kind) -> list[tuple[str, str]]:
    return [(c.event.event_id, repr(c.event)) for c in changes if isinstance(c, kind)]


def test_compute_engine_maintenance_of_many_instances_is_made_in_parts_as_it_would_be_whole(tmp_path):
    whole, parted = opened(tmp_path / "whole.db"), opened(tmp_path / "parts.db")
    request = GceRequest(gce_names(whole), notice=timedelta(hours=2), latest=timedelta(hours=1))
    expected = whole.perform(lambda engine: engine.component(GcpComponent).schedule_gce(request))
    commits = counted_commits(parted)
    seen: list[int] = []  # events made, as a reader on the loop saw them while the command went on

    async def schedule_and_read() -> list:
        made = parted.perform_in_parts_soon(gce_scheduling(request))
        while not made.done():
            seen.append(len(parted.settled_engine().component(GcpComponent).gce_events))
            await asyncio.sleep(0)
        return await made

    changes = asyncio.run(schedule_and_read())
    assert len(commits) == -(-600 // MACHINES_PER_PART) == 3
    assert any(0 < count < 600 for count in seen) and sorted(seen) == seen
    assert scheduled(changes, GceEventChanged) == scheduled(expected, GceEventChanged)
    parted.store.close()
    again = opened(tmp_path / "parts.db")
    assert len(again.settled_engine().component(GcpComponent).gce_events) == 600  # durable
    for service in (again, whole):
        service.store.close()


def test_ec2_events_of_many_instances_are_made_in_parts_as_they_would_be_whole(tmp_path):
    whole, parted = opened(tmp_path / "whole.db"), opened(tmp_path / "parts.db")
    request = Ec2Request(Ec2Code.INSTANCE_REBOOT, ec2_ids(whole), notice=timedelta(days=1))
    expected = whole.perform(lambda engine: engine.component(Ec2Component).schedule_ec2(request))
    commits = counted_commits(parted)
    changes = in_loop(lambda: parted.perform_in_parts_soon(ec2_scheduling(request)))
    assert len(commits) == 3
    assert scheduled(changes, Ec2EventChanged) == scheduled(expected, Ec2EventChanged)
    for service in (parted, whole):
        service.store.close()


def in_loop(handed_in):
    """What the future ``handed_in()`` gives, handed in on an event loop."""

    async def run():
        return await handed_in()

    return asyncio.run(run())


@pytest.mark.parametrize("fault", ["unknown", "pending"])
def test_an_instance_refused_in_a_later_part_refuses_the_whole_command_before_any_change(tmp_path, fault):
    service = opened(tmp_path / "parts.db")
    names = list(gce_names(service))
    if fault == "unknown":
        names.append("gce-nowhere")
    else:  # its maintenance already pending
        service.perform(lambda engine: engine.component(GcpComponent).schedule_gce(GceRequest((names[-1],))))
    before = len(service.settled_engine().component(GcpComponent).gce_events)
    commits = counted_commits(service)
    engine = service.settled_engine()
    with pytest.raises(NotFound if fault == "unknown" else Conflict):
        in_loop(lambda: service.perform_in_parts_soon(gce_scheduling(GceRequest(tuple(names)))))
    assert commits == [] and len(service.settled_engine().component(GcpComponent).gce_events) == before
    assert service.settled_engine() is engine  # refused as a check is: nothing to rebuild
    service.store.close()


def test_a_command_handed_in_during_another_in_parts_runs_after_its_last_part(tmp_path):
    service = opened(tmp_path / "parts.db")
    commits = counted_commits(service)
    names = gce_names(service)
    order: list[str] = []

    async def both() -> None:
        many = service.perform_in_parts_soon(gce_scheduling(GceRequest(names[:-1])))
        many.add_done_callback(lambda _: order.append("many"))
        while not commits:
            await asyncio.sleep(0.001)
        other = service.perform_soon(lambda e: e.component(GcpComponent).schedule_gce(GceRequest(names[-1:])))
        other.add_done_callback(lambda _: order.append("other"))
        await asyncio.gather(many, other)

    asyncio.run(both())
    assert order == ["many", "other"] and len(commits) == 4
    service.store.close()


def test_a_reset_during_a_command_in_parts_refuses_the_rest_of_it(tmp_path):
    service = opened(tmp_path / "parts.db")
    commits = counted_commits(service)

    async def schedule_then_reset() -> BaseException | list:
        many = service.perform_in_parts_soon(gce_scheduling(GceRequest(gce_names(service))))
        while not commits:
            await asyncio.sleep(0.001)
        service.reset()
        return (await asyncio.gather(many, return_exceptions=True))[0]

    outcome = asyncio.run(schedule_then_reset())
    assert isinstance(outcome, Conflict)
    assert str(outcome) == "the server was reset while this command was under way; what it did is undone"
    assert not service.settled_engine().component(GcpComponent).gce_events
    service.store.close()


def test_an_azure_schedule_naming_many_vms_is_committed_a_few_hosts_at_a_time_as_it_would_be_whole(tmp_path):
    whole, parted = opened(tmp_path / "whole.db"), opened(tmp_path / "parts.db")
    vms = tuple(reversed(azure_fleet(GENERATED).vms))  # not in their hosts' order
    request = ScheduleRequest(EventType.FREEZE, vms=vms, notice=timedelta(minutes=15))
    expected = azure_commands.schedule(whole, request)
    commits = counted_commits(parted)
    events = in_loop(lambda: azure_commands.schedule_soon(parted, request))
    assert len(commits) == 3  # 600 VMs, 10 a host: parts of 250, a host never split
    shown = [(e.event_id, e.operation_id, e.resources, e.not_before) for e in events]
    assert shown == [(e.event_id, e.operation_id, e.resources, e.not_before) for e in expected]
    for service in (parted, whole):
        service.store.close()
