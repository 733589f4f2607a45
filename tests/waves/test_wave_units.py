"""The waves reach a cloud only through its wave units (``Cloud.wave_units()``, waves/units.py): a cloud without waves
is refused by name, plans stored before a plan named its cloud still load, and the runner rolls a cloud it was never
written for."""

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from forewarn.app.runtime import Maintenance
from forewarn.azure.component import AzureComponent, StoredAzure
from forewarn.control.app import create_control_app
from forewarn.core.changes import Change
from forewarn.core.component import Footing
from forewarn.core.errors import Invalid
from forewarn.core.scheduler import Scheduler
from forewarn.engine.engine import Engine
from forewarn.fleet.file import parse_fleet
from forewarn.gcp.component import GcpComponent, StoredGcp
from forewarn.waves.component import StoredWaves, WaveChanged, WaveRunner, WaveSpec, WaveStatus
from forewarn.waves.model import Wave, WaveCloud, WaveOrder, WaveRequest
from forewarn.waves.records import decode_wave, encode_wave_plan, encode_wave_progress
from forewarn.waves.units import ORDERS, MemberEnded, ScheduledUnit, units_named, wave_units
from helpers import T0, open_store

FLEET = """
hosts: [{name: h1}, {name: h2}]
vms:
  - {name: vm-1, host: h1}
  - {name: vm-2, host: h2}
ec2_instances:
  - {id: i-0a1b2c3d4e5f60718, instance_type: m5.large, availability_zone: us-east-1a, host: h1}
gce_instances:
  - {name: web-1, zone: us-central1-a, host: h2}
"""


def test_each_cloud_with_waves_gives_its_units_and_a_cloud_without_waves_is_refused_saying_so():
    assert list(wave_units()) == ["azure", "gce"]
    assert ORDERS[WaveCloud.AZURE][0] is WaveOrder.UPDATE_DOMAIN and ORDERS[WaveCloud.GCE][0] is WaveOrder.ZONE
    e = Engine(parse_fleet(FLEET), seed="test", now=T0)
    with pytest.raises(Invalid, match=r"^Amazon EC2 has no waves: a wave rolls over azure or gce$"):
        e.component(WaveRunner).start_wave(WaveSpec(cloud="aws"))
    with pytest.raises(Invalid, match=r"^unknown cloud 'nope'; expected one of azure, gce$"):
        units_named("nope")
    with pytest.raises(Invalid, match=r"^unknown cloud 'azur'; expected one of azure, gce; did you mean 'azure'\?$"):
        units_named("azur")
    assert units_named("GCE").cloud is WaveCloud.GCE


def test_the_control_api_says_a_cloud_has_no_waves(store_url):
    service = Maintenance.open(open_store(store_url), parse_fleet(FLEET), "manual", 1.0, T0, "seed")
    try:
        client = TestClient(create_control_app(service))
        response = client.post("/v1/waves", json={"cloud": "aws"})
        assert response.status_code == 400 and "Amazon EC2 has no waves" in response.text, response.text
        assert client.get("/v1/waves").json() == []
    finally:
        service.store.close()


def old_plan(wave: Wave, **fields: Any) -> str:
    """The plan as a server that wrote every cloud's fields with their defaults stored it, changed by ``fields``
    (a field set to None is left out)."""
    plan = json.loads(encode_wave_plan(wave))
    plan.update(event_type="Freeze", source="Platform", maintenance_type="SCHEDULED", can_reschedule=True)
    plan.update(fields)
    return json.dumps({key: value for key, value in plan.items() if value is not None or key not in fields})


def test_plans_stored_with_every_clouds_defaults_or_no_cloud_load_as_the_wave_they_were():
    e = Engine(parse_fleet(FLEET), seed="test", now=T0)
    runner = e.component(WaveRunner)
    azure_changes = runner.start_wave(WaveSpec(order=WaveOrder.HOST))
    gce_changes = runner.start_wave(WaveSpec(cloud=WaveCloud.GCE))
    azure, gce = (
        runner.wave(next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged)))
        for changes in (azure_changes, gce_changes)
    )
    assert azure.in_flight and gce.in_flight

    # No cloud, window, latest, can_reschedule or maintenance type at all: an Azure wave's plan.
    unnamed = decode_wave(
        old_plan(azure, cloud=None, window=None, latest=None, can_reschedule=None, maintenance_type=None),
        encode_wave_progress(azure),
        azure.in_flight,
    )
    assert unnamed.spec.cloud is WaveCloud.AZURE and unnamed.spec.order is WaveOrder.HOST
    assert (unnamed.units, unnamed.in_flight, unnamed.owners) == (azure.units, azure.in_flight, azure.owners)
    assert units_named(unnamed.spec.cloud).kind(unnamed.spec) == "Freeze"
    # A Compute Engine wave's plan with Azure's defaults in it: still Compute Engine's, showing its own type.
    defaults = decode_wave(old_plan(gce, maintenance_type="UNSCHEDULED"), encode_wave_progress(gce), gce.in_flight)
    assert defaults.spec.cloud is WaveCloud.GCE
    assert units_named(defaults.spec.cloud).kind(defaults.spec) == "UNSCHEDULED"

    # The engine takes them back, with the clouds' state, and the waves go on to the end.
    azure_part, gcp_part = e.component(AzureComponent), e.component(GcpComponent)
    rebuilt = Engine(
        parse_fleet(FLEET),
        seed="test",
        now=e.now,
        created_at=T0,
        stored={
            "azure": StoredAzure(
                azure_part.events.values(),
                azure_part.incarnations,
                azure_part.vm_states.values(),
                azure_part.policies.values(),
                azure_part.last_seen,
            ),
            "gcp": StoredGcp(gcp_part.gce_events.values(), gcp_part.gce_states.values()),
            "waves": StoredWaves([unnamed, defaults]),
        },
        next_seq=e.next_seq,
    )
    waves = rebuilt.component(WaveRunner)
    for _ in range(100):
        if all(wave.status is not WaveStatus.RUNNING for wave in waves.waves.values()):
            break
        rebuilt.advance(rebuilt.next_deadline())
    assert [(wave.status, wave.done) for wave in waves.waves.values()] == [
        (WaveStatus.COMPLETED, 2),
        (WaveStatus.COMPLETED, 1),
    ]


# ------------------------------------------------------------------------------------- a cloud of the tests' own
@dataclass
class Rack:
    """A toy cloud's machines: each maintained by one event per machine, which the test ends by hand."""

    machines: dict[str, str]  # machine -> its rack
    open: dict[str, str] = field(default_factory=dict)  # event id -> machine
    ended: list[MemberEnded] = field(default_factory=list)
    scheduled: list[tuple[str, ...]] = field(default_factory=list)

    def end(self, event_id: str) -> list[Change]:
        self.open.pop(event_id)
        return [change for listener in self.ended for change in listener(event_id, None)]


@dataclass(frozen=True)
class RackUnits:
    cloud: str = "racks"
    orders: tuple[WaveOrder, ...] = (WaveOrder.HOST,)
    nothing_left: str = "no machine in the rack"

    def spec(self, request: WaveRequest, order: WaveOrder) -> WaveSpec:
        return WaveSpec(order=order, concurrency=request.concurrency, groups=request.groups, cloud=self.cloud)

    def checked(self, spec: WaveSpec) -> WaveSpec:
        if spec.event_type is not None:
            raise Invalid("racks take no event type")
        return spec

    def kind(self, spec: WaveSpec) -> str:
        return "rack-swap"

    def describe(self, spec: WaveSpec) -> str:
        return "rack swap"

    def scheduled_and_canceled(self, changes: Iterable[Change]) -> tuple[int, int]:
        return 0, 0

    def roller(self, component: Rack, footing: Footing) -> "RackRoller":
        return RackRoller(component)


@dataclass
class RackRoller:
    rack: Rack

    def when_ended(self, ended: MemberEnded) -> None:
        self.rack.ended.append(ended)

    def targets(self, spec: WaveSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (), tuple(dict.fromkeys(self.rack.machines.values()))

    def members(self, wave: Wave, unit: int) -> tuple[str, ...]:
        return tuple(name for name, rack in self.rack.machines.items() if rack == wave.units[unit])

    def refusal(self, spec: WaveSpec, members: tuple[str, ...], reason: str) -> Exception | None:
        return None

    def schedule(self, spec: WaveSpec, members: tuple[str, ...], reason: str, step: Any) -> ScheduledUnit:
        self.rack.scheduled.append(members)
        events = tuple(f"swap-{name}" for name in members)
        self.rack.open.update(zip(events, members, strict=True))
        return ScheduledUnit([], events, f"{len(members)} machines")

    def open_events(self, operations: Sequence[str]) -> int:
        return sum(1 for event_id in operations if event_id in self.rack.open)

    def cancel(self, operations: Sequence[str], reason: str, step: Any) -> list[Change]:
        return []

    def begin_step(self) -> Any:
        return None

    def end_step(self, step: Any) -> list[Change]:
        return []


def test_the_runner_rolls_a_cloud_it_was_never_written_for():
    rack = Rack({"a1": "rack-a", "a2": "rack-a", "b1": "rack-b", "c1": "rack-c"})
    units = RackUnits()
    runner = WaveRunner([(units, units.roller(rack, None))], Scheduler(T0), StoredWaves())  # type: ignore[arg-type]
    changes = runner.start_wave(WaveSpec(concurrency=2))  # no cloud named: the first with waves
    [wave_id] = {c.wave.wave_id for c in changes if isinstance(c, WaveChanged)}
    assert changes[0].reason == "rack swap over the whole fleet in 3 units by host, 2 at a time"
    assert rack.scheduled == [("a1", "a2"), ("b1",)]
    rack.end("swap-a1")
    assert rack.scheduled == [("a1", "a2"), ("b1",)]  # rack-a still has a1's neighbour open
    done = rack.end("swap-a2")
    assert [c.what for c in done if isinstance(c, WaveChanged)] == ["unit-completed", "unit-scheduled"]
    assert rack.scheduled[-1] == ("c1",)
    rack.end("swap-b1")
    rack.end("swap-c1")
    assert runner.wave(wave_id).status is WaveStatus.COMPLETED and runner.wave(wave_id).done == 3
    with pytest.raises(Invalid, match="racks take no event type"):
        runner.start_wave(WaveSpec("Freeze", cloud="racks"))
    with pytest.raises(Invalid, match="a racks wave goes by host, not zone"):
        runner.start_wave(WaveSpec(order=WaveOrder.ZONE))
