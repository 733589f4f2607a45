"""A replica's incremental refresh (docs/replicas.md): the journal of each commit's rows, read back and applied, leaves
the replica's engine as a fresh load of the database would build it, command after command, with and without the
replica's own projections on a real clock; and the journal says when it cannot tell (pruned, reset)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
import requests

import replication_helpers
from forewarn.app.runtime import Maintenance
from forewarn.aws.component import Ec2Component, Ec2Request
from forewarn.aws.model import Ec2Code
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.core.changes import Change, Rebuilt
from forewarn.engine.engine import Engine
from forewarn.fleet.file import load_fleet
from forewarn.gcp.component import GceRequest, GcpComponent
from forewarn.waves.component import WaveRunner
from forewarn.waves.model import WaveCloud, WaveOrder, WaveSpec
from helpers import T0, Server, open_store
from replication_helpers import FAST, FakeWall, role, until


def snapshot(engine: Engine) -> dict[str, Any]:
    """Everything a replica serves from, and what drives its next steps (deadlines, numbering)."""
    azure = engine.component(AzureComponent)
    scopes = {event.scope for event in engine.component(AzureComponent).events.values()} | set(
        engine.component(AzureComponent).incarnations
    )
    return {
        "now": engine.now,
        "next_seq": engine.next_seq,
        "events": dict(engine.component(AzureComponent).events),
        "incarnations": {scope: engine.component(AzureComponent).incarnation(scope) for scope in scopes},
        "live": {
            scope: [event.event_id for event in engine.component(AzureComponent).live_events(scope)] for scope in scopes
        },
        "operations": {op: list(ids) for op, ids in engine.component(AzureComponent).operations.items()},
        "vm_states": dict(engine.component(AzureComponent).vm_states),
        "hosts": {host: azure.names_on_host(host) for host in azure.host_names()},
        "policies": dict(engine.component(AzureComponent).policies),
        "enabled": dict(engine.component(AzureComponent).last_seen),
        "ec2_instances": dict(engine.component(Ec2Component).ec2_instances),
        "ec2_states": dict(engine.component(Ec2Component).ec2_states),
        "ec2_events": dict(engine.component(Ec2Component).ec2_events),
        "ec2_order": {
            iid: [e.event_id for e in engine.component(Ec2Component).ec2_events_of(iid)]
            for iid in engine.component(Ec2Component).ec2_instances
        },
        "ec2_windows": dict(engine.component(Ec2Component).ec2_windows),
        "attributes": engine.component(Ec2Component).notification_attributes,
        "gce_states": dict(engine.component(GcpComponent).gce_states),
        "gce_events": dict(engine.component(GcpComponent).gce_events),
        "gce_order": {
            name: [e.event_id for e in engine.component(GcpComponent).gce_events_of(name)]
            for name in engine.component(GcpComponent).gce_states
        },
        "waves": dict(engine.component(WaveRunner).waves),
        "deadlines": set(engine.scheduler.pending()),
    }


class Pair(replication_helpers.Pair):
    """The shared pair; the replica follows by incremental refresh, and what it heard is kept."""

    def __init__(self, url: str, clock: str = "manual", wall: FakeWall | None = None):
        super().__init__(url, clock, wall)
        self.heard: list[list[Change]] = []
        self.replica.subscribe(self.heard.append)

    def refresh(self) -> int:
        """One refresh as a replica's thread makes it; how many commits it took."""
        changed = self.reader.changes_since(self.position, self.replica.projected_rows())
        assert changed is not None, "the journal could tell"
        if changed.commits:
            self.replica.replicate(changed, catch_up=False)
            self.position = changed.position
        return changed.commits

    def fresh(self) -> Engine:
        state = self.reader.load()
        assert state is not None and state.position == self.position  # the replica holds what the database does
        return super().fresh()

    def check(self) -> None:
        fresh = self.fresh()
        if self.replica.clock.mode == "real" and self.replica.settled_engine().now > fresh.now:
            fresh.advance(
                self.replica.settled_engine().now
            )  # a freshly loaded replica's catch-up: what the replica did
        assert snapshot(self.replica.settled_engine()) == snapshot(fresh)


@pytest.fixture
def pair(postgres_url):
    made = Pair(postgres_url)
    yield made
    made.close()


def test_a_replica_refreshed_commit_by_commit_equals_a_fresh_load(pair):
    leader = pair.leader
    commands = [
        lambda: azure_commands.schedule(
            leader, ScheduleRequest(EventType.FREEZE, vms=("WestNO_0", "WestNO_1"), notice=timedelta(minutes=15))
        ),
        lambda: azure_commands.approve(
            leader,
            [
                leader.settled_engine()
                .component(AzureComponent)
                .live_events(azure_fleet(leader.settled_engine().fleet).vm("WestNO_0").scope)[0]
                .event_id
            ],
            by="WestNO_0",
        ),
        lambda: azure_commands.schedule(
            leader, ScheduleRequest(EventType.REBOOT, hosts=("host-02",), notice=timedelta(minutes=10))
        ),
        lambda: leader.perform(lambda engine: engine.component(AzureComponent).redeploy(["WestNO_2"])),
        lambda: leader.perform(lambda engine: engine.component(AzureComponent).delete(["myvmss_0"])),
        lambda: leader.perform(lambda engine: engine.component(AzureComponent).evict(["spot-worker-01"])),
        lambda: leader.perform(
            lambda engine: engine.component(Ec2Component).schedule_ec2(
                Ec2Request(Ec2Code.SYSTEM_REBOOT, ("i-0a1b2c3d4e5f60718",), notice=timedelta(minutes=5))
            )
        ),
        lambda: leader.perform(
            lambda engine: engine.component(Ec2Component).interrupt_spot(["i-0f1e2d3c4b5a69788"], "terminate")
        ),
        lambda: leader.perform(
            lambda engine: engine.component(Ec2Component).register_notification_attributes(True, ())
        ),
        lambda: leader.perform(
            lambda engine: engine.component(WaveRunner).start_wave(
                WaveSpec(
                    order=WaveOrder.ZONE,
                    cloud=WaveCloud.GCE,
                    groups=("zones/us-central1-b",),
                    notice=timedelta(minutes=3),
                )
            )
        ),
        lambda: leader.perform(
            lambda engine: engine.component(GcpComponent).schedule_gce(
                GceRequest(("web-1",), notice=timedelta(minutes=8), latest=timedelta(minutes=30))
            )
        ),
        lambda: leader.perform(
            lambda engine: engine.component(GcpComponent).reschedule_gce("web-1", notice=timedelta(minutes=20))
        ),
        lambda: leader.perform(lambda engine: engine.component(GcpComponent).watch("web-1")),
        lambda: leader.perform(lambda engine: engine.component(GcpComponent).preempt(["batch-1"])),
        lambda: leader.perform(lambda engine: engine.component(GcpComponent).watch("trainer-1")),
        # A GPU instance: announced, its notice an hour before the start (at 20 minutes), on leader and replica.
        lambda: leader.perform(
            lambda engine: engine.component(GcpComponent).schedule_gce(
                GceRequest(("trainer-1",), notice=timedelta(minutes=80))
            )
        ),
        lambda: leader.perform(lambda engine: engine.component(GcpComponent).host_error(["trainer-1"])),
        lambda: leader.perform(
            lambda engine: engine.component(WaveRunner).start_wave(
                WaveSpec(EventType.REBOOT, WaveOrder.HOST, 1, notice=timedelta(minutes=2))
            )
        ),
    ]
    for command in commands:
        command()
        assert pair.refresh() == 1
        pair.check()
    # Time moves: events start and complete, VMs recover, the wave goes host by host, EC2 and GCE maintenance runs.
    for step in range(30):
        leader.advance_clock(timedelta(minutes=1))
        if step % 3 == 2:  # several commits in one refresh, as under load
            assert pair.refresh() == 3
            pair.check()
    assert any(wave.done for wave in leader.settled_engine().component(WaveRunner).waves.values())
    [gce_wave] = [
        wave
        for wave in leader.settled_engine().component(WaveRunner).waves.values()
        if wave.spec.cloud is WaveCloud.GCE
    ]
    assert gce_wave.done >= 1, gce_wave  # a unit whose instance was maintained, not only skipped ones
    [gpu] = leader.settled_engine().component(GcpComponent).gce_events_of("trainer-1")
    assert gpu.notice_at == gpu.window_start - timedelta(hours=1), gpu
    # Only what moved was told: incarnations of the touched scopes, never a whole rebuild.
    assert not any(isinstance(change, Rebuilt) for heard in pair.heard for change in heard)
    # And the engine goes on as the fresh one does (what a replica that takes over does next): the deadlines, the
    # waves' counts of open events, the numbering.
    fresh, later = pair.fresh(), leader.settled_engine().now + timedelta(hours=2)
    assert pair.replica.settled_engine().advance(later) == fresh.advance(later)
    assert snapshot(pair.replica.settled_engine()) == snapshot(fresh)


def test_a_replica_reads_back_what_its_own_projection_changed(postgres_url):
    """Real clock: the replica applies a deadline before the leader's commit of it arrives (a projection). The
    leader, meanwhile, canceled the event and the wave: the refresh reads back the rows the projection changed, and
    the replica ends where a fresh load does, phantom events of the wave dropped."""
    wall = FakeWall(1_000_000.0)
    pair = Pair(postgres_url, clock="real", wall=wall)
    try:
        leader, replica = pair.leader, pair.replica
        [event] = azure_commands.schedule(
            leader, ScheduleRequest(EventType.FREEZE, vms=("standalone-01",), notice=timedelta(seconds=10))
        )
        leader.perform(
            lambda engine: engine.component(WaveRunner).start_wave(
                WaveSpec(EventType.FREEZE, WaveOrder.HOST, 1, notice=timedelta(seconds=5), groups=("myvmss",))
            )
        )
        pair.refresh()
        pair.check()
        azure_commands.cancel(leader, event.event_id)  # not yet replicated
        wave_id = next(iter(leader.settled_engine().component(WaveRunner).waves))
        leader.perform(lambda engine: engine.component(WaveRunner).cancel_wave(wave_id))
        wall.value += 3600  # every deadline of the hour passes
        projected = replica.catch_up()
        assert replica.projected and projected
        assert replica.settled_engine().component(AzureComponent).event(event.event_id).status.value == "Completed"
        assert len(replica.settled_engine().component(AzureComponent).events) > len(
            leader.settled_engine().component(AzureComponent).events
        )  # the wave's next units, in the projection
        pair.refresh()
        assert not replica.projected
        # the leader's own catch-up has not been committed: compare with the committed state, at its time
        pair.check()
        assert replica.settled_engine().component(AzureComponent).event(event.event_id).status.value == "Canceled"
        assert any(isinstance(heard[0], Rebuilt) for heard in pair.heard)  # phantom events: the read models reset
        # The leader commits the hour; the replica projects it again, then takes the commit: the same state.
        leader.catch_up()
        replica.catch_up()
        pair.refresh()
        pair.check()
    finally:
        pair.close()


def test_a_projection_made_while_a_refresh_is_read_is_read_back_by_the_next_one(postgres_url):
    wall = FakeWall(1_000_000.0)
    pair = Pair(postgres_url, clock="real", wall=wall)
    try:
        leader, replica = pair.leader, pair.replica
        [first] = azure_commands.schedule(
            leader, ScheduleRequest(EventType.FREEZE, vms=("standalone-01",), notice=timedelta(seconds=10))
        )
        [second] = azure_commands.schedule(
            leader, ScheduleRequest(EventType.FREEZE, vms=("WestNO_0",), notice=timedelta(seconds=60))
        )
        pair.refresh()
        azure_commands.schedule(
            leader, ScheduleRequest(EventType.FREEZE, vms=("fabrikam-db-01",))
        )  # something to refresh
        wall.value += 20
        assert replica.catch_up()  # the first event starts, in a projection
        changed = pair.reader.changes_since(pair.position, replica.projected_rows())  # the thread reads...
        assert changed is not None and str(first.seq) in changed.touched["forewarn_azure_events"]
        wall.value += 60
        assert replica.catch_up()  # ... while the loop projects the second event's start
        replica.replicate(changed, catch_up=False)  # then applies what it read
        pair.position = changed.position
        assert replica.projected and str(second.seq) in replica.projected_rows()["forewarn_azure_events"]
        assert str(first.seq) not in replica.projected_rows()["forewarn_azure_events"]
        leader.catch_up()
        pair.refresh()
        assert not replica.projected
        pair.check()
    finally:
        pair.close()


def test_a_replica_that_projected_the_same_deadlines_takes_the_leaders_commit(postgres_url):
    wall = FakeWall(1_000_000.0)
    pair = Pair(postgres_url, clock="real", wall=wall)
    try:
        leader, replica = pair.leader, pair.replica
        azure_commands.schedule(
            leader, ScheduleRequest(EventType.REBOOT, hosts=("host-03",), notice=timedelta(seconds=30))
        )
        leader.perform(
            lambda engine: engine.component(Ec2Component).schedule_ec2(
                Ec2Request(Ec2Code.INSTANCE_STOP, ("i-0a1b2c3d4e5f60718",))
            )
        )
        pair.refresh()
        projections = 0
        for _ in range(20):
            wall.value += 17
            projections += bool(replica.catch_up())  # the replica's timer fires first
            leader.catch_up()
            pair.refresh()
            assert not replica.projected
            pair.check()
        assert projections >= 3
    finally:
        pair.close()


def test_the_journal_says_when_it_cannot_tell(pair, postgres_url):
    leader = pair.leader
    azure_commands.schedule(leader, ScheduleRequest(EventType.FREEZE, vms=("standalone-01",)))
    pair.refresh()
    nothing = pair.reader.changes_since(pair.position)
    assert nothing is not None and nothing.commits == 0 and nothing.records == {}
    leader.advance_clock(timedelta(minutes=1))
    leader.advance_clock(timedelta(minutes=1))
    # Pruned past the replica's position: the whole state is to be loaded.
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("DELETE FROM forewarn_changes WHERE position = %s", (pair.position + 1,))
    assert pair.reader.changes_since(pair.position) is None
    # The newest entry is never pruned: it carries the position a full load holds.
    state = pair.reader.load()
    assert state is not None and state.position == pair.position + 2
    pair.position = state.position
    leader.reset()
    assert pair.reader.changes_since(pair.position) is None
    # A journal behind the position asked for (another database): load everything.
    assert pair.reader.changes_since(pair.position + 100) is None


def test_commits_take_consecutive_positions_in_their_own_transaction(postgres_url):
    store = open_store(postgres_url)
    try:
        store.keeps_changes = True
        service = Maintenance.open(store, load_fleet("demo"), "manual", 1.0, T0, "seed")
        first = store.position
        service.advance_clock(timedelta(minutes=1))
        azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("WestNO_0",)))
        assert store.position == first + 2
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            rows = connection.execute("SELECT position, keys FROM forewarn_changes ORDER BY position").fetchall()
        assert [row[0] for row in rows] == list(range(1, store.position + 1))
        assert '"forewarn_azure_events":["' in rows[-1][1] and '"forewarn_azure_scopes":["' in rows[-1][1]
    finally:
        store.close()


# ------------------------------------------------------------------------------------------------ real processes
DEMO_VMS = {  # the demo fleet's VMs and the loopback address each asks its metadata from
    "WestNO_0": 10,
    "WestNO_1": 11,
    "WestNO_2": 12,
    "standalone-01": 13,
    "fabrikam-db-01": 14,
    "spot-worker-01": 15,
    "myvmss_0": 20,
    "myvmss_1": 21,
    "myvmss_2": 22,
}
VIEWS = [
    "/v1/events?all=true",
    "/v1/vms",
    "/v1/waves",
    "/v1/clock",
    "/v1/ec2/events",
    "/v1/ec2/instances",
    "/v1/gce/maintenance",
    "/v1/gce/instances",
]


def served(server: Server) -> dict[str, bytes]:
    """What a process serves: every demo VM's scheduled events, EC2 metadata, and the control API's views."""
    answers = {}
    for vm, address in DEMO_VMS.items():
        url = f"http://127.0.0.{address}:{server.imds_port}/metadata/scheduledevents?api-version=2020-07-01"
        answers[vm] = requests.get(url, headers={"Metadata": "true"}, timeout=5).content
    for address in (30, 31):
        url = f"http://127.0.0.{address}:{server.imds_port}/latest/meta-data/events/maintenance/scheduled"
        answers[f"ec2 {address}"] = requests.get(url, timeout=5).content
    for view in VIEWS:
        answers[view] = requests.get(f"{server.control}{view}", timeout=5).content
    return answers


def metric(server: Server, name: str) -> float:
    text = requests.get(f"{server.control}/metrics", timeout=5).text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(f"{name} ")))


def demo_server(tmp_path, name: str, url: str, role: str) -> Server:
    where = tmp_path / name
    where.mkdir(exist_ok=True)
    return Server(where, fleet_text=None, db=url, extra=["--fleet", "demo", "--role", role, *FAST])


def test_a_replica_refreshed_incrementally_serves_the_bytes_a_fresh_replica_loads(tmp_path, postgres_url):
    with (
        demo_server(tmp_path, "a", postgres_url, "shared") as leader,
        demo_server(tmp_path, "b", postgres_url, "replica") as replica,
    ):
        assert (role(leader), role(replica)) == ("leader", "replica")
        for server, path, body in [
            (leader, "/v1/events", {"type": "Freeze", "vms": ["WestNO_0", "WestNO_1"], "notice": "15m"}),
            (replica, "/v1/events", {"type": "Reboot", "hosts": ["host-02"], "notice": "10m"}),
            (replica, "/v1/vms/redeploy", {"vms": ["WestNO_2"]}),
            (leader, "/v1/vms/delete", {"vms": ["myvmss_0"]}),
            (replica, "/v1/platform/evict", {"vms": ["spot-worker-01"]}),
            (leader, "/v1/ec2/events", {"code": "system-reboot", "instances": ["i-0a1b2c3d4e5f60718"], "notice": "5m"}),
            (replica, "/v1/ec2/spot/interrupt", {"instances": ["i-0f1e2d3c4b5a69788"]}),
            (leader, "/v1/gce/maintenance", {"instances": ["web-1"], "notice": "8m"}),
            (replica, "/v1/gce/preempt", {"instances": ["batch-1"]}),
            (leader, "/v1/waves", {"type": "Reboot", "by": "host", "groups": ["westno"], "notice": "2m"}),
        ]:
            answer = requests.post(f"{server.control}{path}", json=body, timeout=10)
            assert answer.status_code in (200, 201), (path, answer.text)
        for minutes in range(12):
            server = (leader, replica)[minutes % 2]
            requests.post(f"{server.control}/v1/clock/advance", json={"by": "2m"}, timeout=10).raise_for_status()
            if minutes in (1, 11):  # events Scheduled and Started, VMs impacted; then all done
                until(lambda: served(replica) == served(leader), what="the replica follows the leader")
                with demo_server(tmp_path, f"fresh{minutes}", postgres_url, "replica") as fresh:  # a whole load
                    assert served(fresh) == served(replica)
        assert metric(replica, "forewarn_replica_refreshes_total") >= 10
        assert metric(replica, "forewarn_replica_full_reloads_total") == 0  # every refresh read only what changed
