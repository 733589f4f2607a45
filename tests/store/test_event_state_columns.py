"""Migration 12 on a database as version 11 left it (EC2 and Compute Engine events with no state column): each
event's state (and an EC2 event's end) is copied from its record into the new columns, and the engine then loads
only what it keeps in memory, reading the rest from the table. On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from forewarn.app.runtime import Maintenance
from forewarn.aws.changes import Ec2EventChanged
from forewarn.aws.component import Ec2Component, Ec2Request
from forewarn.aws.model import Ec2Code, Ec2EventState
from forewarn.fleet.file import parse_fleet
from forewarn.gcp.changes import GceEventChanged
from forewarn.gcp.component import GceRequest, GcpComponent
from forewarn.gcp.model import EventState
from forewarn.store.migrations import LATEST
from helpers import T0, open_store, raw_connection

FLEET = """
hosts: [{name: h1}]
ec2_instances:
  - {id: i-0aaaaaaaaaaaaaaa1, host: h1}
gce_instances:
  - {name: web-1, host: h1}
  - {name: web-2, host: h1}
"""


def _open(url: str) -> Maintenance:
    return Maintenance.open(open_store(url), parse_fleet(FLEET), "manual", 1.0, T0, "seed")


def _ids(changes: list, kind: type) -> list[str]:
    return [change.event.event_id for change in changes if isinstance(change, kind) and change.what == "scheduled"]


def _as_version_11(url: str) -> None:
    connection = raw_connection(url)
    try:
        for table, columns in (("forewarn_ec2_events", ("state", "ended_at")), ("forewarn_gce_events", ("state",))):
            connection.execute(f"DROP INDEX {table}_by_instance")
            for column in columns:
                connection.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        connection.execute("UPDATE forewarn_meta SET value = '11' WHERE key = 'schema_version'")
    finally:
        connection.close()


def test_a_version_11_database_gets_each_events_state_and_loads_only_what_memory_keeps(store_url):
    service = _open(store_url)

    def ec2(code: Ec2Code, notice: timedelta):
        request = Ec2Request(code, ("i-0aaaaaaaaaaaaaaa1",), notice=notice)
        return _ids(service.perform(lambda e: e.component(Ec2Component).schedule_ec2(request)), Ec2EventChanged)

    def gce(name: str, notice: timedelta):
        request = GceRequest((name,), notice=notice)
        return _ids(service.perform(lambda e: e.component(GcpComponent).schedule_gce(request)), GceEventChanged)

    [ec2_ended] = ec2(Ec2Code.SYSTEM_REBOOT, timedelta(hours=1))
    [gce_ended] = gce("web-1", timedelta(minutes=5))
    service.advance_clock(timedelta(hours=3))
    [ec2_live] = ec2(Ec2Code.SYSTEM_REBOOT, timedelta(days=3))
    [gce_live] = gce("web-2", timedelta(days=3))
    service.store.close()
    _as_version_11(store_url)

    again = _open(store_url)
    connection = raw_connection(store_url)
    try:
        version = connection.execute("SELECT value FROM forewarn_meta WHERE key = 'schema_version'").fetchone()
        ec2_rows = connection.execute("SELECT event_id, state FROM forewarn_ec2_events ORDER BY seq").fetchall()
        gce_rows = connection.execute("SELECT event_id, state FROM forewarn_gce_events ORDER BY seq").fetchall()
    finally:
        connection.close()
    assert version == (str(LATEST),)
    assert [tuple(row) for row in ec2_rows] == [(ec2_ended, "completed"), (ec2_live, "active")]
    assert [tuple(row) for row in gce_rows] == [(gce_ended, "completed"), (gce_live, "pending")]
    engine = again.settled_engine()
    # An EC2 event that ended within the week stays in memory, for DescribeInstanceStatus; a Compute Engine one not.
    assert set(engine.component(Ec2Component).ec2_events) == {ec2_ended, ec2_live}
    assert set(engine.component(GcpComponent).gce_events) == {gce_live}
    assert engine.component(GcpComponent).gce_event(gce_ended).state is EventState.COMPLETED
    again.advance_clock(timedelta(days=7))
    component = again.settled_engine().component(Ec2Component)
    assert set(component.ec2_events) == {ec2_live}
    assert component.ec2_event(ec2_ended).state is Ec2EventState.COMPLETED
    again.store.close()
