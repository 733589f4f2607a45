"""A wave's units in flight are rows of their own (``forewarn_wave_runs``): a commit writes the units it started or
ended, not every unit in flight; a unit that starts and ends in one command leaves no row; and a database that kept
them in the wave's progress record (schema version 9) opens with the same waves."""

import json
from collections.abc import Sequence
from dataclasses import replace

from forewarn.app.runtime import Maintenance
from forewarn.azure.model import EventType
from forewarn.fleet.file import parse_fleet
from forewarn.store.records import Registry, Rows
from forewarn.waves.component import UnitRun, Wave, WaveChanged, WaveOrder, WaveRunner, WaveSpec, WaveStatus
from forewarn.waves.records import RUN_DELETE, RUN_INSERT, WAVE_RECORDS
from helpers import T0, open_store

FLEET = """
hosts: [{name: h1}, {name: h2}, {name: h3}, {name: h4}]
vms:
  - {name: a, host: h1}
  - {name: b, host: h2}
  - {name: c, host: h3}
  - {name: d, host: h4}
"""


def run(unit: int) -> UnitRun:
    return UnitRun(unit, (f"op-{unit}-a", f"op-{unit}-b"))


def written(changes: Sequence[WaveChanged]) -> dict[str, list[tuple]]:
    """The statements (and their rows) committing ``changes`` writes to the waves' tables, journal left out."""
    rows = Rows(T0)
    registry = Registry([WAVE_RECORDS])
    for change in changes:
        registry.write(change, rows)
    rows.write_latest()
    return {sql: params for sql, params in rows.statements.items() if "forewarn_wave" in sql}


def one_unit_ends_and_the_next_starts(in_flight: int) -> dict[str, list[tuple]]:
    """What a command writes when, of a wave with ``in_flight`` units in flight, the first ends and the next starts."""
    runs = tuple(run(unit) for unit in range(in_flight))
    wave = Wave("wave-1", WaveSpec(), (), tuple(f"h{unit}" for unit in range(in_flight + 1)), T0, next_unit=in_flight)
    ended = replace(wave, in_flight=runs[1:], done=1)
    started = replace(ended, in_flight=(*runs[1:], run(in_flight)), next_unit=in_flight + 1)
    return written(
        [
            WaveChanged(ended, "unit-completed", "h0 completed", runs[0]),
            WaveChanged(started, "unit-scheduled", f"h{in_flight}: scheduled", run(in_flight)),
        ]
    )


def size(statements: dict[str, list[tuple]]) -> int:
    return sum(len(str(value)) for params in statements.values() for row in params for value in row)


def test_a_commit_writes_the_units_it_changed_whatever_the_units_in_flight():
    few, many = one_unit_ends_and_the_next_starts(10), one_unit_ends_and_the_next_starts(5_000)
    assert [len(params) for params in few.values()] == [len(params) for params in many.values()] == [1, 1, 1]
    assert many[RUN_DELETE] == [("wave-1", 0)] and many[RUN_INSERT] == [("wave-1", 5_000, '["op-5000-a","op-5000-b"]')]
    # The same rows; only the numbers' digits differ (next_unit, the unit started), not the 5,000 units in flight.
    assert size(many) - size(few) <= 8, (size(few), size(many))


def test_a_unit_that_starts_and_ends_in_one_command_leaves_no_row():
    wave = Wave("wave-1", WaveSpec(), (), ("h0", "h1", "h2"), T0, next_unit=1, in_flight=(run(0),))
    statements = written(
        [
            WaveChanged(replace(wave, in_flight=()), "unit-completed", "h0 completed", run(0)),
            WaveChanged(replace(wave, in_flight=(run(1),)), "unit-scheduled", "h1: scheduled", run(1)),
            WaveChanged(replace(wave, in_flight=()), "unit-completed", "h1 completed", run(1)),
        ]
    )
    # Had the inserts been written after the deletes they follow, unit 1's row would stay.
    assert RUN_INSERT not in statements and statements[RUN_DELETE] == [("wave-1", 0), ("wave-1", 1)]


def _raw(url):
    if url.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(url)
    import sqlite3

    return sqlite3.connect(url)


def _selected(url, sql: str) -> list[tuple]:
    connection = _raw(url)
    try:
        return [tuple(row) for row in connection.execute(sql)]
    finally:
        connection.close()


def _stored_runs(url) -> list[tuple]:
    return _selected(url, "SELECT wave_id, unit, operations FROM forewarn_wave_runs")


def _stored_progress(url) -> list[tuple]:
    return _selected(url, "SELECT wave_id, progress FROM forewarn_wave_progress")


def _as_schema_version_10(url) -> None:
    """The database as a release before forewarn_wave_progress left it: each wave's progress beside its plan."""
    connection = _raw(url)
    mark = "%s" if url.startswith("postgresql://") else "?"
    for wave_id, progress in connection.execute("SELECT wave_id, progress FROM forewarn_wave_progress").fetchall():
        connection.execute(f"UPDATE forewarn_waves SET progress = {mark} WHERE wave_id = {mark}", (progress, wave_id))
    connection.execute("DROP TABLE forewarn_wave_progress")
    connection.execute("UPDATE forewarn_meta SET value = '10' WHERE key = 'schema_version'")
    connection.commit()
    connection.close()


def _as_schema_version_9(url) -> None:
    """The database as a release before forewarn_wave_runs left it: each wave's units in flight in its progress."""
    _as_schema_version_10(url)
    connection = _raw(url)
    mark = "%s" if url.startswith("postgresql://") else "?"
    runs: dict[str, list] = {}
    for wave_id, unit, operations in connection.execute(
        "SELECT wave_id, unit, operations FROM forewarn_wave_runs ORDER BY wave_id, unit"
    ):
        runs.setdefault(wave_id, []).append([unit, json.loads(operations)])
    for wave_id, text in connection.execute("SELECT wave_id, progress FROM forewarn_waves").fetchall():
        progress = json.loads(text)
        old = {**progress, "in_flight": runs.get(wave_id, [])}
        connection.execute(
            f"UPDATE forewarn_waves SET progress = {mark} WHERE wave_id = {mark}", (json.dumps(old), wave_id)
        )
    connection.execute("DROP TABLE forewarn_wave_runs")
    connection.execute("UPDATE forewarn_meta SET value = '9' WHERE key = 'schema_version'")
    connection.commit()
    connection.close()


def _a_wave_one_step_in(store_url) -> tuple[Maintenance, str, Wave]:
    """A service with a wave of two units at a time, one clock step in: the service, the wave's id and the wave."""
    service = Maintenance.open(open_store(store_url), parse_fleet(FLEET), "manual", 1.0, T0, "seed")
    changes = service.perform(
        lambda e: e.component(WaveRunner).start_wave(WaveSpec(EventType.FREEZE, WaveOrder.HOST, concurrency=2))
    )
    wave_id = next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))
    service.step_clock()
    return service, wave_id, service.settled_engine().component(WaveRunner).wave(wave_id)


def test_a_database_with_the_units_in_flight_in_the_progress_opens_with_the_same_waves(store_url):
    service, wave_id, before = _a_wave_one_step_in(store_url)
    assert len(before.in_flight) == 2
    in_rows = sorted(_stored_runs(store_url))
    assert in_rows == [
        (wave_id, r.unit, json.dumps(list(r.operations), separators=(",", ":"))) for r in before.in_flight
    ]
    service.store.close()
    _as_schema_version_9(store_url)

    again = Maintenance.open(open_store(store_url), None, "manual")
    assert again.settled_engine().component(WaveRunner).wave(wave_id) == before
    assert sorted(_stored_runs(store_url)) == in_rows  # moved to rows of their own, and out of the progress
    [(_, progress)] = _stored_progress(store_url)
    assert "in_flight" not in json.loads(progress)
    while again.settled_engine().component(WaveRunner).wave(wave_id).status is WaveStatus.RUNNING:
        again.step_clock()
    assert again.settled_engine().component(WaveRunner).wave(wave_id).done == 4
    assert _stored_runs(store_url) == []  # every unit's row gone with its end
    again.store.close()


def test_a_database_with_the_progress_beside_the_plan_opens_with_the_same_waves(store_url):
    service, wave_id, before = _a_wave_one_step_in(store_url)
    progress = _stored_progress(store_url)
    service.store.close()
    _as_schema_version_10(store_url)

    again = Maintenance.open(open_store(store_url), None, "manual")
    assert again.settled_engine().component(WaveRunner).wave(wave_id) == before
    assert _stored_progress(store_url) == progress  # moved to a row of its own
    assert _selected(store_url, "SELECT progress FROM forewarn_waves") == [("{}",)]
    while again.settled_engine().component(WaveRunner).wave(wave_id).status is WaveStatus.RUNNING:
        again.step_clock()
    [(_, moved)] = _stored_progress(store_url)
    assert json.loads(moved)["status"] == "completed"  # the progress is written to its own row from then on
    again.store.close()
