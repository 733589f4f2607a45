"""Waves: maintenance rolled over a fleet by update domain, fault domain or host, with a concurrency limit."""

import json
from datetime import timedelta

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forewarn.app.runtime import Maintenance
from forewarn.aws.fleet import ec2_fleet
from forewarn.azure.changes import EventChanged
from forewarn.azure.component import AzureComponent, StoredAzure
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventStatus, EventType, ScheduleRequest
from forewarn.core.errors import Conflict, Invalid, NotFound
from forewarn.engine.engine import Engine
from forewarn.fleet.file import parse_fleet
from forewarn.fleet.generate import FleetShape, fleet_yaml, generate_fleet
from forewarn.gcp.changes import GceEventChanged
from forewarn.gcp.component import GceRequest, GcpComponent, StoredGcp
from forewarn.gcp.fleet import gce_fleet
from forewarn.gcp.model import EventState, InstanceStatus, MaintenanceKind
from forewarn.waves.component import StoredWaves, WaveChanged, WaveCloud, WaveOrder, WaveRunner, WaveSpec, WaveStatus
from forewarn.waves.units import ORDERS
from helpers import T0, Server, forewarn, open_store

# Four hosts; an availability set with 3 update domains and 2 fault domains; a scale set of 4 over two hosts.
FLEET = """
hosts: [{name: h1}, {name: h2}, {name: h3}, {name: h4}]
availability_sets: [{name: web, fault_domains: 2, update_domains: 3}]
vms:
  - {name: web-0, host: h1, availability_set: web}
  - {name: web-1, host: h2, availability_set: web}
  - {name: web-2, host: h3, availability_set: web}
  - {name: web-3, host: h1, availability_set: web}
  - {name: solo, host: h4}
scale_sets:
  - {name: pool, instances: 4, hosts: [h2, h3], update_domains: 2, fault_domains: 2}
"""


def engine(text: str = FLEET) -> Engine:
    return Engine(parse_fleet(text), seed="test", now=T0)


def run_to_end(e: Engine, wave_id: str, limit: int = 10_000) -> list:
    """Move the clock deadline by deadline until the wave ends; every change on the way."""
    changes = []
    for _ in range(limit):
        if e.component(WaveRunner).wave(wave_id).status is not WaveStatus.RUNNING:
            return changes
        changes += e.advance(e.next_deadline())
    raise AssertionError("the wave did not end")


def scheduled_units(changes) -> list[str]:
    return [c.reason.split(":")[0] for c in changes if isinstance(c, WaveChanged) and c.what == "unit-scheduled"]


def test_update_domains_go_one_at_a_time_and_the_next_is_scheduled_when_one_completes():
    e = engine()
    changes = e.component(WaveRunner).start_wave(WaveSpec(EventType.FREEZE, WaveOrder.UPDATE_DOMAIN, groups=("web",)))
    wave = next(c.wave for c in changes if isinstance(c, WaveChanged))
    assert wave.units == ("0", "1", "2")
    first = [c.event for c in changes if isinstance(c, EventChanged)]
    assert [ev.resources for ev in first] == [("web-0", "web-3")]  # UD 0 (round robin of 3), both on h1
    assert {ev.status for ev in first} == {EventStatus.SCHEDULED}
    # Nothing of UD 1 until UD 0 has completed: when its events complete, UD 1's are Scheduled at that instant.
    completion = first[0].not_before + first[0].impact_window
    e.advance(completion - timedelta(seconds=1))
    assert len(e.component(AzureComponent).events) == 1
    step = e.advance(completion)
    completed = [c.event for c in step if isinstance(c, EventChanged) and c.what == "completed"]
    scheduled = [c.event for c in step if isinstance(c, EventChanged) and c.what == "scheduled"]
    assert len(completed) == 1 and [ev.resources for ev in scheduled] == [("web-1",)]
    assert scheduled[0].created_at == completion
    # One document change for the scope at that instant: the old event leaves, the new one is Scheduled.
    assert (
        e.component(AzureComponent).incarnation(scheduled[0].scope) == 1 + 1 + 1 + 1
    )  # scheduled, started, (completed + next scheduled)
    rest = run_to_end(e, wave.wave_id)
    assert scheduled_units(rest) == ["update domain 2"]
    done = e.component(WaveRunner).wave(wave.wave_id)
    assert (done.status, done.done, done.skipped, done.in_flight) == (WaveStatus.COMPLETED, 3, (), ())


def test_no_two_units_overlap_with_concurrency_one():
    e = engine()
    [started] = [
        c
        for c in e.component(WaveRunner).start_wave(WaveSpec(EventType.REBOOT, WaveOrder.FAULT_DOMAIN))
        if isinstance(c, WaveChanged) and c.what == "started"
    ]
    run_to_end(e, started.wave.wave_id)
    by_unit: dict[int, list] = {}
    fleet = e.fleet
    for event in e.component(AzureComponent).events.values():
        domains = {azure_fleet(fleet).vms[name].fault_domain for name in event.resources}
        assert len(domains) == 1  # an event never mixes fault domains
        by_unit.setdefault(domains.pop(), []).append(event)
    spans = sorted((min(ev.created_at for ev in evs), max(ev.ended_at for ev in evs)) for evs in by_unit.values())
    assert len(spans) == 2
    assert spans[0][1] <= spans[1][0]  # the second fault domain is created after the first one ended


def test_concurrency_limits_the_hosts_in_flight_and_every_vm_is_covered_once():
    e = engine()
    changes = e.component(WaveRunner).start_wave(WaveSpec(EventType.FREEZE, WaveOrder.HOST, concurrency=2))
    wave = e.component(WaveRunner).waves[next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))]
    assert wave.units == ("h1", "h2", "h3", "h4")
    assert [
        e.component(WaveRunner).wave(wave.wave_id).units[run.unit]
        for run in e.component(WaveRunner).wave(wave.wave_id).in_flight
    ] == ["h1", "h2"]
    max_in_flight = 0
    while e.component(WaveRunner).wave(wave.wave_id).status is WaveStatus.RUNNING:
        max_in_flight = max(max_in_flight, len(e.component(WaveRunner).wave(wave.wave_id).in_flight))
        e.advance(e.next_deadline())
    assert max_in_flight == 2
    covered = sorted(name for ev in e.component(AzureComponent).events.values() for name in ev.resources)
    assert covered == sorted(azure_fleet(e.fleet).vms)
    assert all(ev.status is EventStatus.COMPLETED for ev in e.component(AzureComponent).events.values())


def test_approval_brings_a_unit_forward_and_the_next_follows():
    e = engine()
    changes = e.component(WaveRunner).start_wave(WaveSpec(EventType.FREEZE, WaveOrder.UPDATE_DOMAIN, groups=("pool",)))
    [event, *_] = [c.event for c in changes if isinstance(c, EventChanged)]
    e.component(AzureComponent).approve(
        [ev.event_id for ev in e.component(AzureComponent).live_events(event.scope)], by="control"
    )
    step = e.advance(T0 + event.impact_window)
    assert [c.event.resources for c in step if isinstance(c, EventChanged) and c.what == "scheduled"] == [
        ("pool_1", "pool_3")
    ]


def test_cancel_stops_the_wave_and_cancels_only_scheduled_events():
    e = engine()
    changes = e.component(WaveRunner).start_wave(WaveSpec(EventType.FREEZE, WaveOrder.UPDATE_DOMAIN, groups=("web",)))
    wave_id = next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))
    result = e.component(WaveRunner).cancel_wave(wave_id)
    assert {c.event.status for c in result if isinstance(c, EventChanged)} == {EventStatus.CANCELED}
    wave = e.component(WaveRunner).wave(wave_id)
    assert wave.status is WaveStatus.CANCELED and wave.in_flight == () and wave.next_unit == 1
    assert e.next_deadline() is None  # nothing else will be scheduled
    with pytest.raises(Conflict):
        e.component(WaveRunner).cancel_wave(wave_id)


def test_wave_ids_follow_one_another_whatever_else_was_numbered_between_and_after_a_rebuild():
    """The user's view: wave-1, wave-2, wave-3, although events (numbered by the engine's sequence) came between."""
    e = engine()

    def start(runner: WaveRunner) -> str:
        changes = runner.start_wave(WaveSpec(EventType.FREEZE, WaveOrder.UPDATE_DOMAIN, groups=("web",)))
        return next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))

    first = start(e.component(WaveRunner))
    e.component(AzureComponent).schedule(ScheduleRequest(EventType.REBOOT, vms=("solo",), notice=timedelta(hours=1)))
    e.component(WaveRunner).cancel_wave(first)
    second = start(e.component(WaveRunner))
    assert (first, second) == ("wave-1", "wave-2")
    e.component(WaveRunner).cancel_wave(second)  # no unit in flight: the waves alone can be stored
    waves = StoredWaves(list(e.component(WaveRunner).waves.values()))
    rebuilt = Engine(parse_fleet(FLEET), "test", e.now, created_at=T0, stored={"waves": waves}, next_seq=e.next_seq)
    assert start(rebuilt.component(WaveRunner)) == "wave-3"  # from the stored waves, as after a restart


def test_a_canceled_event_ends_its_unit_and_a_deleted_domain_is_skipped():
    e = engine()
    changes = e.component(WaveRunner).start_wave(WaveSpec(EventType.FREEZE, WaveOrder.UPDATE_DOMAIN, groups=("web",)))
    wave_id = next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))
    e.component(AzureComponent).delete(["web-1"])  # UD 1 of web has only web-1
    assert e.component(AzureComponent).vm_states["web-1"].deleted
    for event in [c.event for c in changes if isinstance(c, EventChanged)]:
        e.component(AzureComponent).cancel(event.event_id)  # the operator cancels UD 0's events: the unit is over
    wave = e.component(WaveRunner).wave(wave_id)
    assert wave.skipped == (1,)  # UD 1: web-1 was deleted
    assert [wave.units[run.unit] for run in wave.in_flight] == ["2"]


def test_refusals_change_nothing():
    e = engine()
    for spec, error in (
        (WaveSpec(EventType.PREEMPT), Invalid),
        (WaveSpec(EventType.FREEZE, concurrency=0), Invalid),
        (WaveSpec(EventType.FREEZE, groups=("nope",)), NotFound),
        (WaveSpec(EventType.FREEZE, notice=timedelta(seconds=-1)), Invalid),
    ):
        with pytest.raises(error):
            e.component(WaveRunner).start_wave(spec)
    assert e.component(WaveRunner).waves == {} and e.component(AzureComponent).events == {} and e.next_seq == 1


def test_redeployed_vms_are_taken_on_their_new_host():
    e = engine()
    e.component(AzureComponent).hardware_failure(["h4"])  # solo is redeployed to the next host, h1
    assert [vm.name for vm in e.component(AzureComponent).vms_on_host("h1")] == ["web-0", "web-3", "solo"]
    assert e.component(AzureComponent).vms_on_host("h4") == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    vms=st.integers(5, 300),
    concurrency=st.integers(1, 6),
    order=st.sampled_from(ORDERS[WaveCloud.AZURE]),
    seed=st.text("abc", min_size=1, max_size=4),
    approve=st.booleans(),
)
def test_property_every_vm_once_never_more_units_than_the_limit_and_state_survives_a_rebuild(
    vms, concurrency, order, seed, approve
):
    fleet = parse_fleet(fleet_yaml(FleetShape(vms=vms, vms_per_host=4, seed=seed)))
    e = Engine(fleet, seed="p", now=T0)
    changes = e.component(WaveRunner).start_wave(WaveSpec(EventType.FREEZE, order, concurrency=concurrency))
    wave_id = next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))
    rounds = 0
    while e.component(WaveRunner).wave(wave_id).status is WaveStatus.RUNNING:
        wave = e.component(WaveRunner).wave(wave_id)
        assert len(wave.in_flight) <= concurrency
        if approve and rounds % 2:
            e.component(AzureComponent).approve(
                [
                    ev.event_id
                    for ev in e.component(AzureComponent).events.values()
                    if ev.status is EventStatus.SCHEDULED
                ],
                by="control",
            )
        if rounds == 3:  # rebuilt from what a store keeps: same progress
            e = Engine(
                fleet,
                "p",
                e.now,
                created_at=T0,
                stored={
                    "azure": StoredAzure(
                        list(e.component(AzureComponent).events.values()),
                        e.component(AzureComponent).incarnations,
                        list(e.component(AzureComponent).vm_states.values()),
                    ),
                    "waves": StoredWaves(list(e.component(WaveRunner).waves.values())),
                },
                next_seq=e.next_seq,
            )
        e.advance(e.next_deadline())
        rounds += 1
    covered = [name for ev in e.component(AzureComponent).events.values() for name in ev.resources]
    assert sorted(covered) == sorted(azure_fleet(fleet).vms)  # every VM exactly once
    attribute = {WaveOrder.UPDATE_DOMAIN: "update_domain", WaveOrder.FAULT_DOMAIN: "fault_domain"}.get(order)
    for ev in e.component(AzureComponent).events.values():
        if attribute:
            assert len({getattr(azure_fleet(fleet).vms[n], attribute) for n in ev.resources}) == 1
        else:
            assert len({azure_fleet(fleet).vms[n].host for n in ev.resources}) == 1


# ------------------------------------------------------------------------------------------ generated fleets
def test_generated_fleet_is_reproducible_and_has_the_mix_asked():
    shape = FleetShape(vms=2_000, seed="s1")
    assert fleet_yaml(shape) == fleet_yaml(FleetShape(vms=2_000, seed="s1"))
    assert fleet_yaml(shape) != fleet_yaml(FleetShape(vms=2_000, seed="s2"))
    fleet = parse_fleet(fleet_yaml(shape))
    assert len(azure_fleet(fleet).vms) == 2_000 and len(fleet.hosts) == 200
    in_scale_sets = sum(1 for vm in azure_fleet(fleet).vms.values() if vm.scale_set)
    in_sets = sum(1 for vm in azure_fleet(fleet).vms.values() if vm.availability_set)
    assert (in_scale_sets, in_sets) == (1_200, 600)
    assert any(vm.spot for vm in azure_fleet(fleet).vms.values())
    per_host = [len(vms) for vms in azure_fleet(fleet).vms_by_host.values()]
    assert max(per_host) - min(per_host) <= 1  # tenants share hosts evenly


def test_generated_fleet_with_compute_engine_instances_shares_the_hosts(tmp_path):
    shape = FleetShape(vms=1_000, gce=500, seed="s1")
    text = fleet_yaml(shape)
    assert text == fleet_yaml(FleetShape(vms=1_000, gce=500, seed="s1"))
    assert text.splitlines()[0].endswith("500 Compute Engine instances.")
    fleet = parse_fleet(text)
    assert (len(azure_fleet(fleet).vms), len(gce_fleet(fleet).instances), len(fleet.hosts)) == (1_000, 500, 150)
    # Without --gce the file is the one it always was: the instances' choices come after every VM's.
    assert "gce_instances" not in fleet_yaml(FleetShape(vms=1_000, seed="s1"))
    instances = list(gce_fleet(fleet).instances.values())
    assert {i.zone for i in instances} == {
        "us-central1-a",
        "us-central1-b",
        "us-central1-c",
        "europe-west1-b",
        "asia-southeast1-a",
    }
    gpu = [i for i in instances if i.gpus]
    spot = [i for i in instances if i.provisioning_model.value == "SPOT"]
    assert 5 < len(gpu) < 50 and 20 < len(spot) < 90, (len(gpu), len(spot))
    # Compute Engine's defaults from the fleet file's rules: GPUs and Spot terminate, Spot does not restart.
    assert all(i.on_host_maintenance.value == "TERMINATE" for i in gpu + spot)
    assert all(not i.automatic_restart for i in spot)
    assert {i.on_host_maintenance.value for i in instances if i not in gpu + spot} == {"MIGRATE"}
    per_host: dict[str, int] = {}
    for host in [vm.host for vm in azure_fleet(fleet).vms.values()] + [i.host for i in instances]:
        per_host[host] = per_host.get(host, 0) + 1
    assert max(per_host.values()) - min(per_host.values()) <= 1  # both clouds fill the hosts evenly
    only_gce = parse_fleet(fleet_yaml(FleetShape(vms=0, gce=30, seed="s1")))
    assert (len(azure_fleet(only_gce).vms), len(gce_fleet(only_gce).instances), len(only_gce.hosts)) == (0, 30, 3)


def test_generated_fleet_with_ec2_and_compute_engine_instances_shares_the_hosts():
    text = fleet_yaml(FleetShape(vms=1_000, gce=300, ec2=200, seed="s1"))
    assert text.splitlines()[0].endswith("300 Compute Engine instances, 200 EC2 instances.")
    fleet = parse_fleet(text)
    assert (
        len(azure_fleet(fleet).vms),
        len(gce_fleet(fleet).instances),
        len(ec2_fleet(fleet).instances),
        len(fleet.hosts),
    ) == (1_000, 300, 200, 150)
    assert "ec2_instances" not in fleet_yaml(FleetShape(vms=1_000, gce=300, seed="s1"))
    instances = list(ec2_fleet(fleet).instances.values())
    assert {i.availability_zone for i in instances} == {"us-east-1a", "us-east-1b", "us-east-1c", "eu-west-1a"}
    assert 5 < sum(1 for i in instances if i.spot) < 40
    per_host: dict[str, int] = {}
    for host in [vm.host for vm in azure_fleet(fleet).vms.values()] + [
        i.host for i in [*gce_fleet(fleet).instances.values(), *instances]
    ]:
        per_host[host] = per_host.get(host, 0) + 1
    assert max(per_host.values()) - min(per_host.values()) <= 1


@pytest.mark.parametrize(
    "shape, message",
    [
        (FleetShape(vms=0), "--vms"),
        (FleetShape(vms=0, gce=-1), "--gce"),
        (FleetShape(vms=10, gce=10, gce_gpu_share=0.6, gce_spot_share=0.6), "GCE GPU and Spot shares"),
        (FleetShape(vms=10, vms_per_host=0), "--vms-per-host"),
        (FleetShape(vms=10, scale_set_share=0.8, availability_set_share=0.5), "shares"),
    ],
)
def test_generator_refuses_impossible_shapes(shape, message):
    with pytest.raises(ValueError, match=message):
        generate_fleet(shape)


# --------------------------------------------------------------------------------------- store, API and CLI


def finishes_with_every_unit(service: Maintenance, wave_id: str, units: int) -> None:
    """A wave reopened after a restart runs to its end on the clock, each of its units completed once; the store is
    closed after."""
    while service.settled_engine().component(WaveRunner).wave(wave_id).status is WaveStatus.RUNNING:
        service.step_clock()
    assert service.settled_engine().component(WaveRunner).wave(wave_id).done == units
    kinds = [entry.kind for entry in service.store.journal() if entry.kind.startswith("wave")]
    assert kinds[0] == "wave started" and kinds[-1] == "wave completed"
    assert kinds.count("wave unit-completed") == units
    service.store.close()


def test_a_wave_survives_a_restart_mid_way(store_url):
    fleet = parse_fleet(FLEET)
    service = Maintenance.open(open_store(store_url), fleet, "manual", 1.0, T0, "seed")
    changes = service.perform(
        lambda e: e.component(WaveRunner).start_wave(WaveSpec(EventType.FREEZE, WaveOrder.HOST, concurrency=1))
    )
    wave_id = next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))
    service.step_clock()  # h1 Started
    service.step_clock()  # h1 completed (the freeze recovers first), ...
    service.step_clock()
    before = service.settled_engine().component(WaveRunner).wave(wave_id)
    service.store.close()

    again = Maintenance.open(open_store(store_url), None, "manual")
    assert again.settled_engine().component(WaveRunner).wave(wave_id) == before
    finishes_with_every_unit(again, wave_id, 4)


def test_api_and_cli_start_follow_list_show_and_cancel(tmp_path):
    with Server(tmp_path, FLEET) as server:
        response = server.post(
            "/v1/waves", {"type": "Reboot", "by": "fault-domain", "groups": ["web"], "notice": "5m", "name": "patch"}
        )
        assert response.status_code == 201, response.text
        body = response.json()
        assert body["scheduled"] == 2 and body["wave"]["in_flight"][0]["unit"] == "0"
        wave_id = body["wave"]["wave_id"]
        for bad, status in (
            ({"by": "rack"}, 400),
            ({"concurrency": 0}, 400),
            ({"groups": ["nope"]}, 404),
            ({"type": "Terminate"}, 400),
        ):
            assert server.post("/v1/waves", bad).status_code == status, bad
        assert requests.get(f"{server.control}/v1/waves/wave-999", timeout=10).status_code == 404

        canceled = server.post(f"/v1/waves/{wave_id}/cancel", {}).json()
        assert canceled["canceled"] == 2 and canceled["wave"]["status"] == "canceled"
        assert server.post(f"/v1/waves/{wave_id}/cancel", {}).status_code == 409

        result = forewarn(server, "wave", "start", "--by", "host", "--concurrency", "2", "--follow", "--json")
        assert result.returncode == 0, result.stderr
        assert "4/4 units" in result.stderr
        followed = json.loads(result.stdout)
        assert followed["status"] == "completed" and followed["done"] == 4

        listing = forewarn(server, "wave", "list")
        assert listing.returncode == 0 and "canceled" in listing.stdout and "completed" in listing.stdout
        shown = forewarn(server, "wave", "show", followed["wave_id"])
        assert "4 done" in shown.stdout
        missing = forewarn(server, "wave", "show", "wave-999", check=False)
        assert missing.returncode == 1 and "no wave" in missing.stderr


def test_cli_fleet_generate_writes_a_file_serve_accepts(tmp_path):
    out = tmp_path / "big.yaml"
    with Server(tmp_path, FLEET) as server:
        result = forewarn(server, "fleet", "generate", "--vms", "1200", "--out", str(out), "--seed", "x")
        assert result.returncode == 0, result.stderr
        assert "120 hosts" in result.stderr
        bad = forewarn(server, "fleet", "generate", "--vms", "0", check=False)
        assert bad.returncode == 1 and "--vms" in bad.stderr
    assert len(azure_fleet(parse_fleet(out.read_text())).vms) == 1200


def test_a_generated_fleet_with_gce_instances_serves_their_maintenance(tmp_path):
    with Server(tmp_path, FLEET) as server:
        out = tmp_path / "mixed.yaml"
        result = forewarn(server, "fleet", "generate", "--vms", "20", "--gce", "10", "--out", str(out))
        assert result.returncode == 0, result.stderr
        assert "3 hosts" in result.stderr and "10 Compute Engine instances" in result.stderr
    served = tmp_path / "served"
    served.mkdir()
    with Server(served, out.read_text()) as server:
        instances = server.get("/v1/gce/instances")
        assert [i["name"] for i in instances] == [f"gce-{n:05d}" for n in range(10)]
        [event] = server.post("/v1/gce/maintenance", {"instances": ["gce-00003"], "notice": "1d"}, expect=201).json()
        assert event["state"] == "pending" and event["instance"] == "gce-00003"


# --------------------------------------------------------------------------------------- Compute Engine waves
GCE_FLEET = """
hosts: [{name: h1}, {name: h2}, {name: h3}]
defaults: {gce_zone: us-central1-a}
gce_instances:
  - {name: web-1, host: h1}
  - {name: web-2, host: h2}
  - {name: gpu-1, host: h1, gpus: {count: 1, type: nvidia-l4}}
  - {name: eu-1, host: h3, zone: europe-west1-b}
  - {name: eu-2, host: h3, zone: europe-west1-b}
vms:
  - {name: azure-0, host: h1}
"""


def gce_wave(e: Engine, order: WaveOrder = WaveOrder.ZONE, **spec) -> str:
    changes = e.component(WaveRunner).start_wave(WaveSpec(cloud=WaveCloud.GCE, order=order, **spec))
    return next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))


def test_a_compute_engine_wave_goes_zone_by_zone_with_each_instances_own_maintenance():
    e = engine(GCE_FLEET)
    for name in ("web-1", "gpu-1"):
        e.component(GcpComponent).watch(
            name
        )  # they asked for maintenance-event: they get the notice (60 s; gpu-1's is an hour)
    wave_id = gce_wave(e, notice=timedelta(days=7), window=timedelta(hours=2))
    wave = e.component(WaveRunner).wave(wave_id)
    assert (wave.spec.order, wave.units) == (WaveOrder.ZONE, ("us-central1-a", "europe-west1-b"))
    # The first zone's instances are announced a week ahead; nothing in Europe yet, nor on the Azure VM.
    upcoming = {name: e.component(GcpComponent).upcoming(name) for name in gce_fleet(e.fleet).instances}
    assert {name for name, event in upcoming.items() if event} == {"web-1", "web-2", "gpu-1"}
    assert upcoming["web-1"].kind is MaintenanceKind.MIGRATE and upcoming["gpu-1"].kind is MaintenanceKind.TERMINATE
    assert upcoming["web-1"].window_start == T0 + timedelta(days=7) and not e.component(AzureComponent).events
    e.advance(T0 + timedelta(days=7) - timedelta(seconds=60))
    assert e.component(GcpComponent).maintenance_event("web-1") == "MIGRATE_ON_HOST_MAINTENANCE"
    assert e.component(GcpComponent).maintenance_event("gpu-1") == "TERMINATE_ON_HOST_MAINTENANCE"
    assert (
        e.component(GcpComponent).maintenance_event("web-2") == "NONE"
    )  # never asked: no notice, maintained at the start
    changes = run_to_end(e, wave_id)
    assert scheduled_units(changes) == ["zone europe-west1-b"]
    second = [c.event for c in changes if isinstance(c, GceEventChanged) and c.what == "scheduled"]
    # Europe's instances are announced at the instant the last of the first zone's maintenance is over: the GPU
    # VM's termination, 5 minutes after the start.
    assert {ev.instance for ev in second} == {"eu-1", "eu-2"}
    assert {ev.created_at for ev in second} == {T0 + timedelta(days=7, minutes=5)}
    assert {ev.reason for ev in second} == {f"{wave_id}, zone europe-west1-b"}
    done = e.component(WaveRunner).wave(wave_id)
    assert (done.status, done.done, done.skipped) == (WaveStatus.COMPLETED, 2, ())
    assert all(
        e.component(GcpComponent).gce_states[name].status is InstanceStatus.RUNNING
        for name in gce_fleet(e.fleet).instances
    )
    assert (
        e.component(GcpComponent).gce_states["web-1"].host != "h1"
        and e.component(GcpComponent).gce_states["gpu-1"].host != "h1"
    )


def test_by_host_an_instance_is_maintained_once_even_if_it_moves_onto_a_later_host():
    e = engine(GCE_FLEET)
    wave_id = gce_wave(e, order=WaveOrder.HOST, concurrency=1)
    assert e.component(WaveRunner).wave(wave_id).units == ("h1", "h2", "h3")
    run_to_end(e, wave_id)
    per_instance = {name: len(e.component(GcpComponent).gce_events_of(name)) for name in gce_fleet(e.fleet).instances}
    assert per_instance == dict.fromkeys(gce_fleet(e.fleet).instances, 1)
    # web-1 migrated from h1 to h2 and gpu-1 restarted there, before h2's unit: not maintained again.
    assert [ev.instance for ev in e.component(GcpComponent).gce_events.values() if ev.reason.endswith("host h2")] == [
        "web-2"
    ]


def test_cancel_stops_a_compute_engine_wave_and_cancels_only_pending_maintenance():
    e = engine(GCE_FLEET)
    e.component(GcpComponent).watch("web-1")
    wave_id = gce_wave(e, groups=("us-central1-a",), notice=timedelta(days=7), latest=timedelta(days=2))
    e.component(GcpComponent).reschedule_gce("web-2", T0 + timedelta(days=8))  # its user moves it a day later
    # gpu-1 never asked: its maintenance starts when its notice would have come, an hour ahead (it has a GPU).
    e.advance(T0 + timedelta(days=7) - timedelta(hours=1))
    assert e.component(GcpComponent).upcoming("gpu-1").state is EventState.ONGOING
    before = e.advance(T0 + timedelta(days=7) - timedelta(seconds=60))  # gpu-1 done and restarted, web-1 notified
    changes = e.component(WaveRunner).cancel_wave(wave_id)
    canceled = {c.event.instance for c in changes if isinstance(c, GceEventChanged) and c.what == "canceled"}
    assert canceled == {"web-2"}
    assert (
        e.component(GcpComponent).maintenance_event("web-1") == "MIGRATE_ON_HOST_MAINTENANCE"
    )  # a notice given is kept
    rest = run_to_end_of_maintenance(e)
    completed = [c.event.instance for c in before + rest if isinstance(c, GceEventChanged) and c.what == "completed"]
    assert completed == ["gpu-1", "web-1"]
    assert e.component(WaveRunner).wave(wave_id).status is WaveStatus.CANCELED and not any(
        ev.instance.startswith("eu-") for ev in e.component(GcpComponent).gce_events.values()
    )


def run_to_end_of_maintenance(e: Engine) -> list:
    changes = []
    while e.next_deadline() is not None:
        changes += e.advance(e.next_deadline())
    return changes


def test_targets_and_skips_of_a_compute_engine_wave():
    e = engine(GCE_FLEET)
    e.component(GcpComponent).schedule_gce(
        GceRequest(("web-2",), notice=timedelta(days=1))
    )  # in maintenance already: not the wave's
    wave_id = gce_wave(e, order=WaveOrder.HOST, groups=("web-2", "instances/eu-1"))
    wave = e.component(WaveRunner).wave(wave_id)
    assert wave.owners == ("instances/web-2", "instances/eu-1") and wave.units == ("h2", "h3")
    changes = run_to_end(e, wave_id)
    skipped = [c.reason for c in changes if isinstance(c, WaveChanged) and c.what == "unit-skipped"]
    assert skipped == [] and e.component(WaveRunner).wave(wave_id).skipped == (
        0,
    )  # h2 was skipped at the start: web-2 is busy
    assert [ev.instance for ev in e.component(GcpComponent).gce_events.values() if ev.reason.startswith(wave_id)] == [
        "eu-1"
    ]


@pytest.mark.parametrize(
    "spec, error, message",
    [
        (WaveSpec(cloud=WaveCloud.GCE, order=WaveOrder.UPDATE_DOMAIN), Invalid, "zone or host"),
        (WaveSpec(order=WaveOrder.ZONE), Invalid, "update-domain or fault-domain or host"),
        (WaveSpec(cloud=WaveCloud.GCE, order=WaveOrder.ZONE, groups=("nope",)), NotFound, "no Compute Engine"),
        (WaveSpec(cloud=WaveCloud.GCE, order=WaveOrder.ZONE, impact_window=timedelta(1)), Invalid, "Azure's"),
        (WaveSpec(cloud=WaveCloud.GCE, order=WaveOrder.ZONE, window=timedelta(0)), Invalid, "window"),
        (WaveSpec(cloud=WaveCloud.GCE, order=WaveOrder.ZONE, latest=timedelta(1)), Invalid, "announced ahead"),
        # 30 minutes announces maintenance to web-1, not to gpu-1 (its notice is an hour): no latest start for it.
        (
            WaveSpec(cloud=WaveCloud.GCE, order=WaveOrder.HOST, notice=timedelta(minutes=30), latest=timedelta(1)),
            Invalid,
            "1-hour notice of gpu-1",
        ),
        (WaveSpec(window=timedelta(hours=1)), Invalid, "Compute Engine's"),
        (WaveSpec(cloud=WaveCloud.GCE, order=WaveOrder.ZONE, groups=("azure-0",)), NotFound, "no Compute Engine"),
    ],
)
def test_compute_engine_wave_refusals_change_nothing(spec, error, message):
    e = engine(GCE_FLEET)
    with pytest.raises(error, match=message):
        e.component(WaveRunner).start_wave(spec)
    assert (
        not e.component(WaveRunner).waves
        and not e.component(GcpComponent).gce_events
        and not e.component(AzureComponent).events
    )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    instances=st.integers(3, 120),
    concurrency=st.integers(1, 5),
    order=st.sampled_from(ORDERS[WaveCloud.GCE]),
    watched=st.sets(st.integers(0, 119), max_size=40),
    notice=st.sampled_from([None, timedelta(minutes=5), timedelta(days=7)]),
)
def test_property_every_compute_engine_instance_once_never_more_units_than_the_limit_and_a_rebuild(
    instances, concurrency, order, watched, notice
):
    fleet = parse_fleet(fleet_yaml(FleetShape(vms=0, gce=instances, seed="g")))
    e = Engine(fleet, seed="p", now=T0)
    names = list(gce_fleet(fleet).instances)
    for index in watched:
        if index < len(names):
            e.component(GcpComponent).watch(names[index])
    wave_id = gce_wave(e, order=order, concurrency=concurrency, notice=notice)
    rounds = 0
    while e.component(WaveRunner).wave(wave_id).status is WaveStatus.RUNNING:
        wave = e.component(WaveRunner).wave(wave_id)
        assert len(wave.in_flight) <= concurrency
        live = [ev for ev in e.component(GcpComponent).gce_events.values() if ev.live]
        units = {ev.reason for ev in live}
        assert len(units) <= concurrency
        if rounds == 3:  # rebuilt from what a store keeps: same progress
            e = Engine(
                fleet,
                "p",
                e.now,
                created_at=T0,
                stored={
                    "gcp": StoredGcp(
                        list(e.component(GcpComponent).gce_events.values()),
                        list(e.component(GcpComponent).gce_states.values()),
                    ),
                    "waves": StoredWaves(list(e.component(WaveRunner).waves.values())),
                },
                next_seq=e.next_seq,
            )
        e.advance(e.next_deadline())
        rounds += 1
    maintained = sorted(ev.instance for ev in e.component(GcpComponent).gce_events.values())
    assert maintained == sorted(gce_fleet(fleet).instances)  # every instance exactly once
    for ev in e.component(GcpComponent).gce_events.values():
        unit = ev.reason.split(", ", 1)[1]
        if order is WaveOrder.ZONE:
            assert unit == f"zone {gce_fleet(fleet).instances[ev.instance].zone}"
        assert ev.state is EventState.COMPLETED


def test_a_compute_engine_wave_survives_a_restart_mid_way(store_url):
    fleet = parse_fleet(GCE_FLEET)
    service = Maintenance.open(open_store(store_url), fleet, "manual", 1.0, T0, "seed")
    service.perform(lambda e: e.component(GcpComponent).watch("web-1"))
    changes = service.perform(
        lambda e: e.component(WaveRunner).start_wave(
            WaveSpec(cloud=WaveCloud.GCE, order=WaveOrder.ZONE, notice=timedelta(hours=1))
        )
    )
    wave_id = next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))
    # gpu-1 never asked: its maintenance started at once (its notice is the hour); web-1's notice is 60 s ahead.
    service.advance_clock(timedelta(minutes=59))
    before = service.settled_engine().component(WaveRunner).wave(wave_id)
    service.store.close()

    again = Maintenance.open(open_store(store_url), None, "manual")
    assert again.settled_engine().component(WaveRunner).wave(wave_id) == before
    assert again.settled_engine().component(GcpComponent).maintenance_event("web-1") == "MIGRATE_ON_HOST_MAINTENANCE"
    finishes_with_every_unit(again, wave_id, 2)


def test_api_and_cli_roll_a_compute_engine_wave(tmp_path):
    with Server(tmp_path, GCE_FLEET) as server:
        response = server.post(
            "/v1/waves", {"cloud": "gce", "groups": ["europe-west1-b"], "notice": "7d", "latest": "2d", "name": "eu"}
        )
        assert response.status_code == 201, response.text
        body = response.json()
        wave = body["wave"]
        assert (body["scheduled"], wave["cloud"], wave["type"], wave["by"]) == (2, "gce", "SCHEDULED", "zone")
        assert wave["in_flight"][0]["unit"] == "europe-west1-b" and len(wave["in_flight"][0]["operations"]) == 2
        eu = server.get("/v1/gce/instances/eu-1")["upcoming"]
        assert eu["state"] == "pending" and eu["latest_window_start"] == "2026-04-29T22:11:58Z"
        for bad, status in (
            ({"cloud": "gce", "by": "fault-domain"}, 400),
            ({"cloud": "gce", "type": "Freeze"}, 400),
            ({"cloud": "gce", "groups": ["nope"]}, 404),
            ({"cloud": "gce", "duration_seconds": 5}, 400),
            ({"cloud": "aws"}, 400),
            ({"window": "1h"}, 400),
        ):
            assert server.post("/v1/waves", bad).status_code == status, bad
        canceled = server.post(f"/v1/waves/{wave['wave_id']}/cancel", {}).json()
        assert canceled["canceled"] == 2 and canceled["wave"]["status"] == "canceled"

        result = forewarn(server, "wave", "start", "--cloud", "gce", "--by", "host", "--follow", "--json")
        followed = json.loads(result.stdout)
        assert (followed["status"], followed["done"], followed["cloud"]) == ("completed", 3, "gce")
        assert "3/3 units" in result.stderr
        shown = forewarn(server, "wave", "show", followed["wave_id"])
        assert "Compute Engine SCHEDULED maintenance by host" in shown.stdout
        listing = forewarn(server, "wave", "list").stdout
        assert "gce" in listing and "canceled" in listing and "completed" in listing
        refused = forewarn(server, "wave", "start", "--cloud", "gce", "--by", "update-domain", check=False)
        assert refused.returncode == 1 and "zone or host" in refused.stderr
