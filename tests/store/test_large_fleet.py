"""What keeps a million-VM fleet small and quick to start, tested on small fleets: the fleet stored in columns with a
digest and read only by whoever lacks it, databases of the older format still read, the engine holding only what
differs from the deployed fleet, shared metadata documents."""

import json
import sqlite3
from dataclasses import asdict
from datetime import timedelta

import pytest

from forewarn.app.runtime import FleetMismatch, Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.imds.scheduled_events import AzureImds
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.azure.vms import VM_FIELDS, NotificationProfile, Power
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml
from forewarn.fleet.section import stored_fleet
from forewarn.net.callers import CallerResolver
from forewarn.store.base import SQLStore
from helpers import T0, open_store, small_fleet

VERSION = "2020-07-01"

TAGGED = """
hosts: [{name: h1}, {name: h2}]
vms:
  - {name: a, host: h1, tags: {team: web}, imds: {address: 127.0.0.77, port: 18001}}
  - {name: b, host: h2, availability_set: set1, zone: "2", size: Standard_E8s_v5, os_type: Windows}
scale_sets:
  - name: ss
    instances: 250
    hosts: [h1, h2]
    tags: {team: batch}
    zones: ["1", "2", "3"]
    scheduled_events_profile:
      terminate_notification_profile: {enable: true, not_before_timeout: PT7M}
"""


def open_manual(url, fleet=None) -> Maintenance:
    return Maintenance.open(open_store(url), fleet, "manual", 1.0, T0, "seed")


def _meta(url: str, key: str) -> str | None:
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url) as connection:
            row = connection.execute("SELECT value FROM forewarn_meta WHERE key = %s", (key,)).fetchone()
    else:
        with sqlite3.connect(url) as connection:
            row = connection.execute("SELECT value FROM forewarn_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def _execute(url: str, sql: str, params: tuple) -> None:
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url) as connection:
            connection.execute(sql.replace("?", "%s"), params)
    else:
        connection = sqlite3.connect(url)
        connection.execute(sql, params)
        connection.commit()
        connection.close()


def test_the_fleet_is_stored_in_columns_and_read_back_the_same(store_url):
    fleet = parse_fleet(TAGGED + "default_vm: a\n")
    open_manual(store_url, fleet).store.close()
    records = json.loads(_meta(store_url, "fleet") or "{}")
    assert records["format"] == 2 and records["vms"]["count"] == 252
    columns = records["vms"]["columns"]
    assert set(columns) == set(VM_FIELDS)
    assert columns["spot"] == {"same": False}  # a field every VM shares is written once
    assert len(records["vms"]["tags"]) == 3  # {}, team web, team batch
    assert _meta(store_url, "fleet_digest")

    again = open_manual(store_url)
    assert again.settled_engine().fleet == fleet
    assert [vm.record() for vm in azure_fleet(again.settled_engine().fleet).vms.values()] == [
        vm.record() for vm in azure_fleet(fleet).vms.values()
    ]
    instances = azure_fleet(again.settled_engine().fleet).vms_by_owner[
        azure_fleet(again.settled_engine().fleet).vms["ss_0"].policy_owner
    ]
    # The VMs of a scope share its strings, and the VMs of a set its tags
    assert instances[0].scope is instances[1].scope and instances[0].tags is instances[1].tags
    assert again.settled_engine().component(AzureComponent).vm_states["ss_0"].terminate == NotificationProfile(
        True, timedelta(minutes=7)
    )
    again.store.close()


def test_a_generated_fleet_round_trips_through_its_records():
    fleet = parse_fleet(fleet_yaml(FleetShape(vms=3000, seed="records")))
    assert stored_fleet(json.loads(json.dumps(fleet.to_records()))) == fleet


def test_a_database_whose_fleet_is_in_the_older_format_still_opens(store_url):
    service = open_manual(store_url, small_fleet())
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    service.store.close()
    # As a release before format 2 wrote it: one mapping per VM, no digest, schema version 4.
    old = small_fleet().to_records()
    old.pop("format")
    old["vms"] = [
        {name: value for name, value in asdict(vm).items() if name in VM_FIELDS}
        for vm in azure_fleet(small_fleet()).vms.values()
    ]
    _execute(store_url, "UPDATE forewarn_meta SET value = ? WHERE key = 'fleet'", (json.dumps(old, sort_keys=True),))
    _execute(store_url, "DELETE FROM forewarn_meta WHERE key = 'fleet_digest'", ())
    _execute(store_url, "UPDATE forewarn_meta SET value = '4' WHERE key = 'schema_version'", ())

    again = open_manual(store_url)
    assert again.settled_engine().fleet == small_fleet()
    assert again.settled_engine().component(AzureComponent).event(event.event_id).status is EventStatus.SCHEDULED
    again.store.close()
    open_manual(store_url, small_fleet()).store.close()  # the same fleet given again: compared, accepted
    with pytest.raises(FleetMismatch, match="different fleet"):
        open_manual(store_url, parse_fleet("vms: [{name: lonely}]"))


def test_a_restart_never_reads_the_stored_fleet_when_it_has_the_fleet_or_is_given_it(store_url, monkeypatch):
    first = open_manual(store_url, small_fleet())
    azure_commands.schedule(first, ScheduleRequest(EventType.REBOOT, vms=("WestNO_0",)))
    first.store.close()

    def refused(self):
        raise AssertionError("the stored fleet was read")

    monkeypatch.setattr(SQLStore, "fleet_records", refused)
    again = open_manual(store_url, small_fleet())  # the same file given again: the digests are compared
    again.reset()  # an engine rebuilt from the database keeps the fleet it has
    assert again.settled_engine().fleet == small_fleet()
    again.store.close()
    with pytest.raises(FleetMismatch, match="different fleet"):
        open_manual(store_url, parse_fleet("vms: [{name: lonely}]"))


def test_only_the_vm_states_that_differ_from_the_deployed_ones_are_held(tmp_path):
    service = open_manual(str(tmp_path / "f.db"), small_fleet())
    assert list(service.settled_engine().component(AzureComponent).vm_states.changed()) == []
    assert (
        service.settled_engine().component(AzureComponent).vm_states["solo"].power is Power.RUNNING
        and len(service.settled_engine().component(AzureComponent).vm_states) == 9
    )
    [freeze] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",), start_now=True))
    assert [state.name for state in service.settled_engine().component(AzureComponent).vm_states.changed()] == ["solo"]
    service.advance_clock(timedelta(hours=1))
    assert service.settled_engine().component(AzureComponent).event(freeze.event_id).status is EventStatus.COMPLETED
    assert (
        list(service.settled_engine().component(AzureComponent).vm_states.changed()) == []
    )  # frozen, then running as deployed: nothing held
    azure_commands.schedule(service, ScheduleRequest(EventType.REBOOT, vms=("solo",), start_now=True))
    service.advance_clock(timedelta(hours=1))
    [rebooted] = (
        service.settled_engine().component(AzureComponent).vm_states.changed()
    )  # booted again: held, and stored
    assert rebooted.name == "solo" and rebooted.memory_generation == 2
    service.store.close()
    again = open_manual(str(tmp_path / "f.db"))
    assert list(again.settled_engine().component(AzureComponent).vm_states.changed()) == [rebooted]
    again.store.close()


def test_instances_not_updated_keep_their_deployed_model_across_a_restart(tmp_path):
    url = str(tmp_path / "f.db")
    service = open_manual(url, parse_fleet(TAGGED))
    seven = NotificationProfile(True, timedelta(minutes=7))
    service.perform(
        lambda engine: engine.component(AzureComponent).update_policy(
            "ss", terminate=NotificationProfile(True, timedelta(minutes=9))
        )
    )
    service.perform(lambda engine: engine.component(AzureComponent).update_instances("ss", ["ss_1"]))
    service.store.close()
    again = open_manual(url)
    states = again.settled_engine().component(AzureComponent).vm_states
    assert (states["ss_0"].model_version, states["ss_0"].terminate) == (1, seven)  # as deployed, as before the restart
    assert states["ss_1"].model_version == 2 and states["ss_1"].terminate.not_before_timeout == timedelta(minutes=9)
    again.store.close()


def test_scopes_with_no_live_event_share_their_documents(tmp_path):
    service = open_manual(str(tmp_path / "f.db"), small_fleet())
    imds = AzureImds(service, CallerResolver(service.settled_engine().fleet, shared_ports={8169}))
    fleet = service.settled_engine().fleet
    solo, spotty, westno = (azure_fleet(fleet).vms[name].scope for name in ("solo", "spotty", "WestNO_0"))
    assert imds.document(solo, VERSION) is imds.document(spotty, VERSION)
    assert json.loads(imds.document(solo, VERSION)) == {"DocumentIncarnation": 1, "Events": []}

    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    assert json.loads(imds.document(solo, VERSION))["Events"][0]["EventId"] == event.event_id
    assert imds.document(spotty, VERSION) is imds.document(westno, VERSION)  # untouched: still the shared one
    azure_commands.cancel(service, event.event_id)
    assert json.loads(imds.document(solo, VERSION)) == {"DocumentIncarnation": 3, "Events": []}
    assert json.loads(imds.document(spotty, VERSION)) == {"DocumentIncarnation": 1, "Events": []}
    service.store.close()
