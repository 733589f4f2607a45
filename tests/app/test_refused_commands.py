"""A refused command leaves no trace: memory, the database and a restarted server agree afterwards.

The engine may find a command refusable only after it changed part of its state (a clock move that fires deadlines,
then meets a refusal deeper down): the runtime then rebuilds the engine from what was committed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.core.changes import Change
from forewarn.core.errors import Invalid, NotFound
from forewarn.engine.engine import Engine
from forewarn.store import StoreError
from helpers import T0, HeldLoad, Server, open_store, small_fleet

FLEET = """
hosts: [{name: host-01}, {name: host-02}]
vms:
  - {name: a-0, host: host-01, availability_set: ha}
  - {name: a-1, host: host-02, availability_set: ha}
availability_sets: [{name: ha}]
"""
# Half a year before the end of simulated time (9000-01-01): a wave's second unit, with a 200-day notice, would fall
# past it.
NEAR_THE_END = datetime(8999, 6, 1, tzinfo=UTC)


def wave_near_the_end(server: Server) -> str:
    response = server.post(
        "/v1/waves", {"type": "Reboot", "by": "fault-domain", "groups": ["ha"], "notice": "200d", "concurrency": 1}
    )
    assert response.status_code == 201, response.text
    return response.json()["wave"]["wave_id"]


def readable_state(server: Server) -> dict:
    return {
        "clock": server.get("/v1/clock")["now"],
        "events": server.get("/v1/events", all="true"),
        "waves": server.get("/v1/waves"),
    }


def test_a_wave_whose_next_unit_falls_past_the_end_of_time_stops_and_time_moves_on(tmp_path):
    with Server(tmp_path, FLEET, start=NEAR_THE_END) as server:
        wave_id = wave_near_the_end(server)
        for _ in range(4):  # the first unit starts and ends; then nothing is left to step to
            stepped = server.post("/v1/clock/next")
            assert stepped.status_code == 200, stepped.text
        wave = server.get(f"/v1/waves/{wave_id}")
        assert wave["status"] == "canceled" and wave["next_unit"] == "1", wave
        journal = str(server.get("/v1/journal", limit=100))
        assert "wave stopped: fault domain 1 cannot be scheduled: NotBefore 9000-" in journal, journal
        assert server.post("/v1/clock/advance", {"by": "1h"}).status_code == 200
        before = readable_state(server)
        server.stop()
        server.start()
        assert readable_state(server) == before


# The runtime's own guarantee, whatever the command: one that changes part of the engine and is then refused leaves
# nothing behind, in memory or in the database.


def service_with_events(tmp_path) -> tuple[Maintenance, list[str]]:
    service = Maintenance.open(open_store(str(tmp_path / "r.db")), small_fleet(), "manual", 1.0, T0, "seed")
    events = azure_commands.schedule(
        service, ScheduleRequest(EventType.FREEZE, hosts=tuple(service.settled_engine().fleet.hosts))
    )
    assert len(events) >= 2
    return service, [event.event_id for event in events]


def approves_then_refuses(event_id: str):
    def command(engine: Engine) -> list[Change]:
        engine.component(AzureComponent).approve([event_id], "half-done")  # the engine changes...
        raise Invalid("refused after a change")  # ...and only then is the command refused

    return command


def statuses(service: Maintenance, ids: list[str]) -> list[EventStatus]:
    return [service.settled_engine().component(AzureComponent).events[event_id].status for event_id in ids]


def test_a_command_refused_after_it_changed_the_engine_leaves_no_trace(tmp_path):
    service, ids = service_with_events(tmp_path)
    with pytest.raises(Invalid):
        service.perform(approves_then_refuses(ids[0]))
    assert statuses(service, ids) == [EventStatus.SCHEDULED] * len(ids)
    assert service.settled_engine().component(AzureComponent).events[ids[0]].approvals == ()
    azure_commands.approve(service, [ids[1]], "test")  # the engine goes on from what was committed
    assert service.settled_engine().component(AzureComponent).events[ids[1]].approvals == ("test",)
    service.store.close()


def test_a_grouped_command_refused_after_a_change_fails_alone_and_the_others_commit(tmp_path):
    service, ids = service_with_events(tmp_path)
    first, second = ids[0], ids[1]

    async def group() -> list:
        return await asyncio.gather(
            azure_commands.approve_soon(service, [first], by="test"),
            service.perform_soon(approves_then_refuses(second)),
            azure_commands.approve_soon(service, [second], by="other"),
            return_exceptions=True,
        )

    outcomes = asyncio.run(group())
    assert isinstance(outcomes[1], Invalid), outcomes
    assert all(isinstance(outcome, list) and outcome for outcome in (outcomes[0], outcomes[2])), outcomes
    assert service.settled_engine().component(AzureComponent).events[second].approvals == ("other",)
    service.store.close()
    again = Maintenance.open(open_store(str(tmp_path / "r.db")), small_fleet(), "manual", 1.0, T0, "seed")
    assert [
        again.settled_engine().component(AzureComponent).events[event_id].approvals for event_id in (first, second)
    ] == [
        ("test",),
        ("other",),
    ]
    again.store.close()


def test_a_refusal_by_its_check_does_not_rebuild_the_engine(tmp_path):
    service, ids = service_with_events(tmp_path)
    engine = service.settled_engine()
    with pytest.raises(NotFound):
        azure_commands.approve(service, ["NO-SUCH-EVENT"], "test")
    assert service.settled_engine() is engine
    with pytest.raises(Invalid):
        service.perform(approves_then_refuses(ids[0]))
    assert service.settled_engine() is not engine
    service.store.close()


def test_the_rebuild_after_a_grouped_command_refused_midway_runs_in_a_thread(tmp_path):
    """At a million VMs the rebuild takes seconds: on the event loop every metadata GET would wait for it. It runs
    in a thread; the refused command is answered once it is done (its client's next read finds the engine rebuilt),
    and the group's other commands, and those that came meanwhile, run after it on the rebuilt engine."""
    service, ids = service_with_events(tmp_path)
    first, second = ids[0], ids[1]
    load = HeldLoad(service.store)

    async def run() -> tuple:
        group = [
            azure_commands.approve_soon(service, [first], by="test"),
            service.perform_soon(approves_then_refuses(second)),
        ]
        await asyncio.get_running_loop().run_in_executor(None, load.loading.wait, 10)
        later = azure_commands.approve_soon(service, [second], by="later")
        await asyncio.sleep(0.05)  # the loop goes on while the engine is built
        answered = [future.done() for future in [*group, later]]
        with pytest.raises(Unavailable, match="being reloaded"):
            service.settled_engine()
        load.loaded.set()
        return answered, await asyncio.gather(*group, later, return_exceptions=True)

    answered, outcomes = asyncio.run(run())
    assert answered == [False, False, False]
    assert isinstance(outcomes[1], Invalid) and outcomes[0] and outcomes[2], outcomes
    assert load.ran_off_the_main_thread()
    events = service.settled_engine().component(AzureComponent).events
    assert (events[first].approvals, events[second].approvals) == (("test",), ("later",))
    service.store.close()


def test_an_engine_left_unsettled_by_an_outage_is_rebuilt_in_a_thread_once_the_database_answers(tmp_path):
    """A failed commit whose rebuild could not read the database leaves the engine unsettled. Once the database
    answers, the first read starts the rebuild in a thread and is refused meanwhile; commands wait for it."""
    service, ids = service_with_events(tmp_path)
    load = HeldLoad(service.store)

    def out_of_reach(*args, **named):
        raise StoreError("the database is out of reach")

    async def run() -> tuple:
        service.store.commit = out_of_reach  # type: ignore[method-assign]
        service.store.load = out_of_reach  # type: ignore[method-assign]
        failed = await asyncio.gather(azure_commands.approve_soon(service, [ids[0]], by="lost"), return_exceptions=True)
        while service.resetting is not None:
            await asyncio.sleep(0.01)
        del service.store.commit
        service.store.load = load  # type: ignore[method-assign]
        with pytest.raises(Unavailable, match="being reloaded"):
            service.settled_engine()  # starts the rebuild
        command = azure_commands.approve_soon(service, [ids[1]], by="test")
        await asyncio.sleep(0.05)
        waiting = not command.done()
        load.loaded.set()
        return failed, waiting, await command

    failed, waiting, made = asyncio.run(run())
    assert isinstance(failed[0], Unavailable) and waiting and made
    assert load.ran_off_the_main_thread()
    events = service.settled_engine().component(AzureComponent).events
    assert (events[ids[0]].approvals, events[ids[1]].approvals) == ((), ("test",))
    service.store.close()
