"""A Compute Engine maintenance event that ended leaves the engine's memory once its end is committed, and every
reader still finds it, from the database: by id, in the listing with ended events, after a restart (which loads only
live events), and in a wave by host, which maintains an instance once even when it migrated onto a later unit's
host after its maintenance had left memory. The service in process, over a real SQLite file and a real PostgreSQL
schema."""

from __future__ import annotations

from datetime import timedelta

import pytest

from forewarn.app.runtime import Maintenance
from forewarn.core.errors import NotFound
from forewarn.fleet.file import parse_fleet
from forewarn.gcp.changes import GceEventChanged
from forewarn.gcp.component import GceRequest, GcpComponent
from forewarn.gcp.model import EventState
from forewarn.waves.component import WaveRunner
from forewarn.waves.model import WaveCloud, WaveOrder, WaveSpec, WaveStatus
from forewarn.waves.records import WaveChanged
from helpers import T0, open_store

FLEET = """
hosts: [{name: h1}, {name: h2}, {name: h3}]
defaults: {gce_zone: us-central1-a}
gce_instances:
  - {name: web-1, host: h1}
  - {name: web-2, host: h2}
  - {name: gpu-1, host: h1, gpus: {count: 1, type: nvidia-l4}}
  - {name: eu-1, host: h3, zone: europe-west1-b}
"""


def open_service(url: str) -> Maintenance:
    return Maintenance.open(open_store(url), parse_fleet(FLEET, "gce.yaml"), "manual", 1.0, T0, "seed")


def gcp(service: Maintenance) -> GcpComponent:
    return service.settled_engine().component(GcpComponent)


def scheduled(changes: list) -> GceEventChanged:
    [change] = [c for c in changes if isinstance(c, GceEventChanged) and c.what == "scheduled"]
    return change.event


def test_an_ended_event_leaves_memory_and_is_read_from_the_database(store_url):
    service = open_service(store_url)
    done = scheduled(
        service.perform(lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("web-1",), reason="w-1, host h1")))
    )
    canceled = scheduled(
        service.perform(
            lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("web-2",), notice=timedelta(days=2)))
        )
    )
    live = scheduled(
        service.perform(
            lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("eu-1",), notice=timedelta(days=3)))
        )
    )
    service.perform(lambda e: e.component(GcpComponent).cancel_gce(canceled.event_id))
    service.advance_clock(timedelta(hours=1))

    component = gcp(service)
    assert set(component.gce_events) == {live.event_id}
    assert component.gce_events_of("web-1") == []
    assert component.gce_event(done.event_id).state is EventState.COMPLETED
    assert component.gce_event(canceled.event_id).state is EventState.CANCELED
    with pytest.raises(NotFound):
        component.gce_event("1234567890123456789")
    listed = [event.event_id for event in component.all_gce_events()]
    assert listed == [done.event_id, canceled.event_id, live.event_id]
    assert component.maintained_by(["web-1", "web-2", "eu-1"], "w-1,") == {"web-1"}
    service.store.close()

    restarted = open_service(store_url)
    component = gcp(restarted)
    assert set(component.gce_events) == {live.event_id}
    assert [event.event_id for event in component.all_gce_events()] == listed
    assert component.gce_event(done.event_id).state is EventState.COMPLETED
    restarted.store.close()


def test_a_wave_by_host_maintains_an_instance_once_though_its_maintenance_left_memory(store_url):
    service = open_service(store_url)
    started = service.perform(
        lambda e: e.component(WaveRunner).start_wave(WaveSpec(cloud=WaveCloud.GCE, order=WaveOrder.HOST, concurrency=1))
    )
    wave_id = next(c.wave.wave_id for c in started if isinstance(c, WaveChanged))
    while service.settled_engine().component(WaveRunner).wave(wave_id).status is WaveStatus.RUNNING:
        service.step_clock()  # one commit a deadline: each unit's events leave memory before the next unit
    events = gcp(service).all_gce_events()
    assert sorted(event.instance for event in events) == ["eu-1", "gpu-1", "web-1", "web-2"]
    # web-1 migrated from h1 to h2 and gpu-1 restarted there, before h2's unit: not maintained again.
    assert [event.instance for event in events if event.reason.endswith("host h2")] == ["web-2"]
    assert gcp(service).gce_events == {}
    service.store.close()
