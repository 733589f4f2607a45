"""Group commit (Maintenance.perform_soon): the commands of one turn of the event loop go in one transaction, each
answered only once that transaction is durable; a refused command fails alone; a failed commit fails them all and
leaves the engine as the database has it. Real SQLite file store, real engine."""

from __future__ import annotations

import asyncio

import pytest

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.azure.model import EventStatus, EventType
from forewarn.core.errors import CoreError
from forewarn.engine.engine import ScheduleRequest
from forewarn.store import StoreError
from helpers import T0, open_store, small_fleet


def scheduled(tmp_path) -> tuple[Maintenance, list[str]]:
    service = Maintenance.open(open_store(str(tmp_path / "g.db")), small_fleet(), "manual", 1.0, T0, "seed")
    events = service.schedule(ScheduleRequest(EventType.FREEZE, hosts=tuple(service.engine.fleet.hosts)))
    assert len(events) >= 2
    return service, [event.event_id for event in events]


def test_the_commands_of_one_turn_share_one_transaction_answered_after_it(tmp_path):
    service, ids = scheduled(tmp_path)
    commits = []
    commit = service.store.commit

    def counted(changes, *rest, **named):
        commit(changes, *rest, **named)
        commits.append([future.done() for future in futures])  # nothing is answered before this returns

    service.store.commit = counted  # type: ignore[method-assign]
    futures: list[asyncio.Future] = []

    async def approve_all() -> list:
        futures.extend(service.approve_soon([event_id], by="test") for event_id in ids)
        futures.append(service.approve_soon(["NO-SUCH-EVENT"], by="test"))
        return await asyncio.gather(*futures, return_exceptions=True)

    outcomes = asyncio.run(approve_all())
    assert commits == [[False] * len(futures)]  # one commit for the whole group, before any answer
    assert all(isinstance(outcome, list) and outcome for outcome in outcomes[:-1])
    assert isinstance(outcomes[-1], CoreError)  # refused alone
    service.store.close()
    again = Maintenance.open(open_store(str(tmp_path / "g.db")), small_fleet(), "manual", 1.0, T0, "seed")
    assert {again.engine.events[event_id].status for event_id in ids} == {EventStatus.STARTED}  # durable
    again.store.close()


def test_a_failed_group_commit_fails_every_command_and_changes_nothing(tmp_path):
    service, ids = scheduled(tmp_path)

    def fails(*args, **named):
        raise StoreError("disk full")

    service.store.commit = fails  # type: ignore[method-assign]

    async def approve_all() -> list:
        return await asyncio.gather(
            *(service.approve_soon([event_id], by="test") for event_id in ids), return_exceptions=True
        )

    outcomes = asyncio.run(approve_all())
    assert all(isinstance(outcome, Unavailable) for outcome in outcomes)
    # The engine was rebuilt from the database: no approval shows anywhere.
    assert {service.engine.events[event_id].status for event_id in ids} == {EventStatus.SCHEDULED}
    service.store.close()


def test_perform_soon_needs_a_running_loop(tmp_path):
    service, ids = scheduled(tmp_path)
    with pytest.raises(RuntimeError):
        service.approve_soon(ids[:1], by="test")
    service.store.close()
