"""The Compute Engine component through the service and a real store: rules of the notice, preemption, scheduling
checks, and a restart from the database in the middle of a maintenance."""

from datetime import timedelta

import pytest

from forewarn.app.runtime import Maintenance
from forewarn.core.errors import Conflict, Invalid
from forewarn.fleet.file import FleetFileError, parse_fleet
from forewarn.gcp.component import GceRequest, GcpComponent
from forewarn.gcp.model import EventState, InstanceStatus, MaintenanceKind, OnHostMaintenance
from helpers import T0, open_store

FLEET = """
hosts: [{name: host-a}, {name: host-b}]
gce_instances:
  - {name: web-1, host: host-a}
  - {name: db-1, host: host-a, scheduling: {on_host_maintenance: TERMINATE, automatic_restart: false}}
  - {name: gpu-1, host: host-b, gpus: {count: 1}}
  - {name: spot-1, host: host-b, scheduling: {provisioning_model: SPOT}}
"""


def open_service(url):
    return Maintenance.open(open_store(url), parse_fleet(FLEET, "gce.yaml"), "manual", 1.0, T0, "seed")


@pytest.fixture
def service(tmp_path):
    return open_service(str(tmp_path / "gce.db"))


def test_a_restart_keeps_a_maintenance_under_way(tmp_path):
    url = str(tmp_path / "gce.db")
    first = open_service(url)
    first.perform(lambda engine: engine.component(GcpComponent).watch("web-1"))
    [event] = [
        c.event
        for c in first.perform(
            lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("web-1",), notice=timedelta(days=2)))
        )
    ][-1:]
    first.advance_clock(timedelta(days=2) - timedelta(seconds=60))
    assert first.settled_engine().component(GcpComponent).maintenance_event("web-1") == "MIGRATE_ON_HOST_MAINTENANCE"
    first.store.close()
    second = open_service(url)
    assert second.settled_engine().component(GcpComponent).gce_events[event.event_id].state is EventState.NOTIFIED
    assert second.settled_engine().component(GcpComponent).gce_states["web-1"].watched is True
    assert second.settled_engine().component(GcpComponent).upcoming("web-1") is not None
    second.step_clock()  # the start: web-1 moves
    second.step_clock()  # the end
    assert second.settled_engine().component(GcpComponent).maintenance_event("web-1") == "NONE"
    assert second.settled_engine().component(GcpComponent).gce_states["web-1"].host == "host-b"
    assert second.settled_engine().component(GcpComponent).gce_event(event.event_id).state is EventState.COMPLETED
    assert (
        second.settled_engine().component(GcpComponent).gce_states["web-1"].watched is False
    )  # asked again before the next notice


def test_terminate_without_gpus_has_no_notice_and_no_restart_without_automatic_restart(service):
    service.perform(lambda engine: engine.component(GcpComponent).watch("db-1"))
    service.perform(
        lambda engine: engine.component(GcpComponent).schedule_gce(GceRequest(("db-1",), notice=timedelta(minutes=5)))
    )
    service.advance_clock(timedelta(minutes=4))
    assert (
        service.settled_engine().component(GcpComponent).maintenance_event("db-1") == "NONE"
    )  # not populated for TERMINATE without GPUs
    service.advance_clock(timedelta(minutes=1))
    assert service.settled_engine().component(GcpComponent).gce_states["db-1"].status is InstanceStatus.TERMINATED
    service.advance_clock(timedelta(hours=1))
    assert service.settled_engine().component(GcpComponent).gce_states["db-1"].status is InstanceStatus.TERMINATED
    service.perform(lambda engine: engine.component(GcpComponent).start_gce("db-1"))
    assert service.settled_engine().component(GcpComponent).gce_states["db-1"].status is InstanceStatus.RUNNING


def test_refusals_change_nothing(service):
    with pytest.raises(Invalid, match="cannot live-migrate"):
        service.perform(
            lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("gpu-1",), kind=MaintenanceKind.MIGRATE))
        )
    with pytest.raises(Invalid, match="cannot live-migrate"):
        service.perform(lambda e: e.component(GcpComponent).set_scheduling("gpu-1", OnHostMaintenance.MIGRATE, None))
    with pytest.raises(Invalid, match="automaticRestart"):
        service.perform(lambda e: e.component(GcpComponent).set_scheduling("spot-1", None, True))
    with pytest.raises(Conflict, match="no pending maintenance"):
        service.perform(lambda e: e.component(GcpComponent).perform_maintenance("web-1"))
    service.perform(
        lambda e: e.component(GcpComponent).schedule_gce(
            GceRequest(("web-1",), notice=timedelta(days=1), can_reschedule=False)
        )
    )
    with pytest.raises(Conflict, match="cannot be started by the user"):
        service.perform(lambda e: e.component(GcpComponent).perform_maintenance("web-1"))
    with pytest.raises(Conflict, match="already has maintenance"):
        service.perform(lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("web-1",))))
    assert (
        service.settled_engine().component(GcpComponent).gce_states["gpu-1"].on_host_maintenance
        is OnHostMaintenance.TERMINATE
    )


def test_preemption_stops_a_spot_instance_after_thirty_seconds(service):
    service.perform(lambda engine: engine.component(GcpComponent).preempt(["spot-1"]))
    assert service.settled_engine().component(GcpComponent).gce_states["spot-1"].preempted is True
    service.advance_clock(timedelta(seconds=29))
    assert service.settled_engine().component(GcpComponent).gce_states["spot-1"].status is InstanceStatus.STOPPING
    service.advance_clock(timedelta(seconds=1))
    state = service.settled_engine().component(GcpComponent).gce_states["spot-1"]
    assert state.status is InstanceStatus.TERMINATED and not state.deleted  # STOP, the default termination action
    service.perform(lambda engine: engine.component(GcpComponent).start_gce("spot-1"))
    assert service.settled_engine().component(GcpComponent).gce_states["spot-1"].preempted is False


def test_the_fleet_file_refuses_what_compute_engine_refuses():
    with pytest.raises(FleetFileError, match=r"f.yaml:3: gce_instances\[0\].scheduling: .*must use onHostMaintenance"):
        parse_fleet(
            "gce_instances:\n  - name: spot\n    scheduling: {provisioning_model: SPOT, on_host_maintenance: MIGRATE}\n",
            "f.yaml",
        )
    with pytest.raises(FleetFileError, match="lowercase letters"):
        parse_fleet("gce_instances:\n  - name: Web_1\n", "f.yaml")


def test_rescheduling_moves_the_window_up_to_its_latest_start_and_survives_a_restart(tmp_path):
    url = str(tmp_path / "gce.db")
    first = open_service(url)
    first.perform(lambda e: e.component(GcpComponent).watch("gpu-1"))
    request = GceRequest(("gpu-1",), notice=timedelta(days=2), window=timedelta(hours=2), latest=timedelta(days=3))
    [event] = [c.event for c in first.perform(lambda e: e.component(GcpComponent).schedule_gce(request))]
    assert event.latest_window_start == T0 + timedelta(days=5) and event.can_reschedule
    first.advance_clock(timedelta(hours=1))
    later = T0 + timedelta(days=4)
    [moved] = [
        c
        for c in first.perform(lambda e: e.component(GcpComponent).reschedule_gce("gpu-1", later))
        if hasattr(c, "event")
    ]
    assert moved.what == "rescheduled" and "from 2026-04-22T22:11:58Z to 2026-04-24T22:11:58Z" in moved.reason
    upcoming = first.settled_engine().component(GcpComponent).upcoming("gpu-1")
    assert (upcoming.window_start, upcoming.window_end) == (later, later + timedelta(hours=2))
    assert upcoming.latest_window_start == T0 + timedelta(days=5)  # the bound does not move
    first.store.close()

    second = open_service(url)  # the notice (gpu-1's hour) follows the new start after a restart too
    assert second.settled_engine().component(GcpComponent).upcoming("gpu-1") == upcoming
    assert second.settled_engine().next_deadline() == later - timedelta(hours=1)
    second.step_clock()
    assert second.settled_engine().component(GcpComponent).maintenance_event("gpu-1") == "TERMINATE_ON_HOST_MAINTENANCE"
    assert second.now() == later - timedelta(hours=1)
    kinds = [entry.kind for entry in second.store.journal() if entry.kind.startswith("gce")]
    assert kinds == ["gce scheduled", "gce rescheduled", "gce notified"]
    second.store.close()


def test_rescheduling_earlier_and_by_notice_and_its_refusals(service):
    request = GceRequest(("web-1",), notice=timedelta(days=2), latest=timedelta(days=1))
    service.perform(lambda e: e.component(GcpComponent).schedule_gce(request))
    service.perform(
        lambda e: e.component(GcpComponent).reschedule_gce("web-1", notice=timedelta(hours=1))
    )  # earlier: a notice from now
    assert service.settled_engine().component(GcpComponent).upcoming("web-1").window_start == T0 + timedelta(hours=1)
    assert (
        service.perform(lambda e: e.component(GcpComponent).reschedule_gce("web-1", T0 + timedelta(hours=1))) == []
    )  # no move: no change
    for start, notice, error, message in (
        (T0 + timedelta(days=3, seconds=1), None, Invalid, "after the latest window start"),
        (T0 + timedelta(seconds=59), None, Invalid, "less than the 60-second notice of web-1; the earliest"),
        (T0 - timedelta(days=1), None, Invalid, "less than the 60-second notice of web-1"),
        (None, None, Invalid, "give the new start"),
        (T0 + timedelta(hours=2), timedelta(hours=2), Invalid, "not both"),
    ):
        with pytest.raises(error, match=message):
            service.perform(
                lambda e, start=start, notice=notice: e.component(GcpComponent).reschedule_gce("web-1", start, notice)
            )
    assert service.settled_engine().component(GcpComponent).upcoming("web-1").window_start == T0 + timedelta(hours=1)
    with pytest.raises(Conflict, match="no pending maintenance to reschedule"):
        service.perform(lambda e: e.component(GcpComponent).reschedule_gce("gpu-1", T0 + timedelta(hours=1)))
    service.perform(
        lambda e: e.component(GcpComponent).schedule_gce(
            GceRequest(("gpu-1",), notice=timedelta(days=1), can_reschedule=False)
        )
    )
    with pytest.raises(Conflict, match="cannot be rescheduled"):
        service.perform(lambda e: e.component(GcpComponent).reschedule_gce("gpu-1", T0 + timedelta(hours=1)))
    # Not announced (the 60-second notice only): nothing to move, and no latest start to give.
    with pytest.raises(Invalid, match="announced ahead"):
        service.perform(
            lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("db-1",), latest=timedelta(hours=1)))
        )
    with pytest.raises(Invalid, match="needs can-reschedule"):
        service.perform(
            lambda e: e.component(GcpComponent).schedule_gce(
                GceRequest(("db-1",), notice=timedelta(days=1), latest=timedelta(hours=1), can_reschedule=False)
            )
        )
    service.advance_clock(timedelta(hours=1) - timedelta(seconds=60))  # web-1 never asked: it started at once
    with pytest.raises(Conflict, match="no pending maintenance to reschedule"):
        service.perform(lambda e: e.component(GcpComponent).reschedule_gce("web-1", T0 + timedelta(hours=2)))


def events_of(changes):
    """The last state of each event the changes touched, by instance."""
    return {c.event.instance: c.event for c in changes if hasattr(c, "event")}


def watch(service, *names):
    for name in names:
        service.perform(lambda e, name=name: e.component(GcpComponent).watch(name))


def test_a_gpu_instance_gets_an_hour_of_notice_the_others_sixty_seconds(service):
    """As "Handle GPU host maintenance events" says: "Compute Engine gives GPU VMs a 1-hour stopping notice, while
    normal VMs receive only a 60-second notice"."""
    watch(service, "web-1", "gpu-1")
    changes = service.perform(
        lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("web-1", "gpu-1"), notice=timedelta(hours=2)))
    )
    assert {event.window_start for event in events_of(changes).values()} == {T0 + timedelta(hours=2)}
    service.step_clock()
    assert service.now() == T0 + timedelta(hours=1)
    assert (
        service.settled_engine().component(GcpComponent).maintenance_event("gpu-1") == "TERMINATE_ON_HOST_MAINTENANCE"
    )
    assert service.settled_engine().component(GcpComponent).maintenance_event("web-1") == "NONE"
    assert (
        service.settled_engine().component(GcpComponent).gce_states["gpu-1"].status is InstanceStatus.RUNNING
    )  # it stops at the start
    service.step_clock()
    assert service.now() == T0 + timedelta(hours=2) - timedelta(seconds=60)
    assert service.settled_engine().component(GcpComponent).maintenance_event("web-1") == "MIGRATE_ON_HOST_MAINTENANCE"
    service.step_clock()
    assert service.now() == T0 + timedelta(hours=2)
    assert service.settled_engine().component(GcpComponent).gce_states["gpu-1"].status is InstanceStatus.TERMINATED
    notified = [e.notice_at for e in service.settled_engine().component(GcpComponent).gce_events.values()]
    assert sorted(notified) == [T0 + timedelta(hours=1), T0 + timedelta(hours=2) - timedelta(seconds=60)]


def test_the_default_notice_is_each_instances_own_and_nothing_is_announced(service):
    watch(service, "web-1", "gpu-1")
    events = events_of(
        service.perform(lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("web-1", "gpu-1"))))
    )
    assert events["web-1"].window_start == T0 + timedelta(seconds=60)
    assert events["gpu-1"].window_start == T0 + timedelta(hours=1)
    assert not any(event.announced or event.can_reschedule for event in events.values())
    assert {event.state for event in events.values()} == {EventState.NOTIFIED}  # the notice at once
    assert (
        events["gpu-1"].notice_at == T0 and service.settled_engine().component(GcpComponent).upcoming("gpu-1") is None
    )


def test_announcing_a_latest_start_and_rescheduling_count_from_a_gpu_instances_hour(service):
    watch(service, "gpu-1")
    # An hour ahead is the notice only; a second more is announced as upcoming maintenance.
    with pytest.raises(Invalid, match="announced ahead .*1-hour notice of gpu-1"):
        service.perform(
            lambda e: e.component(GcpComponent).schedule_gce(
                GceRequest(("gpu-1",), notice=timedelta(hours=1), latest=timedelta(1))
            )
        )
    [event] = events_of(
        service.perform(
            lambda e: e.component(GcpComponent).schedule_gce(
                GceRequest(("gpu-1",), notice=timedelta(hours=1, seconds=1))
            )
        )
    ).values()
    assert event.announced and event.state is EventState.PENDING
    service.perform(lambda e: e.component(GcpComponent).cancel_gce(event.event_id))
    service.perform(lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("gpu-1",), notice=timedelta(days=1))))
    with pytest.raises(Invalid, match="less than the 1-hour notice of gpu-1; the earliest is 2026-04-20T23:11:58Z"):
        service.perform(lambda e: e.component(GcpComponent).reschedule_gce("gpu-1", T0 + timedelta(minutes=59)))
    # The earliest start: its notice is due at once.
    service.perform(lambda e: e.component(GcpComponent).reschedule_gce("gpu-1", notice=timedelta(hours=1)))
    assert (
        service.settled_engine().component(GcpComponent).maintenance_event("gpu-1") == "TERMINATE_ON_HOST_MAINTENANCE"
    )
    assert service.settled_engine().component(GcpComponent).upcoming("gpu-1").window_start == T0 + timedelta(hours=1)


def test_simulate_gives_a_gpu_instance_its_hour_and_perform_starts_at_once(service):
    watch(service, "gpu-1", "web-1")
    # simulateMaintenanceEvent: the activities of a regular maintenance event, the hour of notice included.
    [simulated] = events_of(service.perform(lambda e: e.component(GcpComponent).simulate_gce("gpu-1"))).values()
    assert (simulated.window_start, simulated.notice_at, simulated.announced) == (T0 + timedelta(hours=1), T0, False)
    # performMaintenance: the maintenance starts now, the key at once and the stop 60 s later, GPUs or not.
    service.perform(lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("web-1",), notice=timedelta(days=2))))
    [performed] = events_of(service.perform(lambda e: e.component(GcpComponent).perform_maintenance("web-1"))).values()
    assert (performed.window_start, performed.notice_at) == (T0 + timedelta(seconds=60), T0)
    run_all(service)
    watch(service, "gpu-1")
    service.perform(lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("gpu-1",), notice=timedelta(days=2))))
    now = service.now()
    [performed] = events_of(service.perform(lambda e: e.component(GcpComponent).perform_maintenance("gpu-1"))).values()
    assert (performed.window_start, performed.notice_at) == (now + timedelta(seconds=60), now)
    service.advance_clock(timedelta(seconds=60))
    assert service.settled_engine().component(GcpComponent).gce_states["gpu-1"].status is InstanceStatus.TERMINATED


def test_an_instance_that_never_asked_is_maintained_when_its_notice_would_come(service):
    """Never asked: "The maintenance event initiates immediately and skips the ... warning"; for a GPU instance, when
    its hour of notice would have begun."""
    [event] = events_of(
        service.perform(
            lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("gpu-1",), notice=timedelta(hours=3)))
        )
    ).values()
    service.step_clock()
    assert service.now() == T0 + timedelta(hours=2)
    started = service.settled_engine().component(GcpComponent).gce_events[event.event_id]
    assert (started.state, started.started_at, started.notice_at) == (EventState.ONGOING, T0 + timedelta(hours=2), None)
    assert service.settled_engine().component(GcpComponent).gce_states["gpu-1"].status is InstanceStatus.TERMINATED


def run_all(service):
    while service.settled_engine().next_deadline() is not None:
        service.step_clock()


def test_the_default_notice_from_a_moment_between_two_seconds_is_a_notice_not_an_announcement(service):
    """A running or paused clock stands between two seconds; the start, a whole second, is then up to a second more
    than the notice away, and was taken for maintenance announced ahead (upcoming, can-reschedule, no notice)."""
    service.set_clock(T0 + timedelta(milliseconds=300))
    watch(service, "web-1")
    [event] = events_of(
        service.perform(lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("web-1",))))
    ).values()
    assert event.window_start == T0 + timedelta(seconds=61)
    assert (event.announced, event.can_reschedule) == (False, False)
    assert service.settled_engine().component(GcpComponent).upcoming("web-1") is None


def test_simulate_goes_ahead_beside_announced_maintenance_and_not_during_a_notice(service):
    """ "Simulate a host maintenance event" limits simulation to instances outside sole-tenant node groups, at a
    per-region rate; maintenance announced ahead does not stand in its way."""
    watch(service, "web-1")
    [announced] = events_of(
        service.perform(
            lambda e: e.component(GcpComponent).schedule_gce(GceRequest(("web-1",), notice=timedelta(days=2)))
        )
    ).values()
    [simulated] = events_of(service.perform(lambda e: e.component(GcpComponent).simulate_gce("web-1"))).values()
    gcp = service.settled_engine().component(GcpComponent)
    assert simulated.event_id != announced.event_id
    assert gcp.maintenance_event("web-1") == "MIGRATE_ON_HOST_MAINTENANCE"
    assert gcp.upcoming("web-1").event_id == announced.event_id
    with pytest.raises(Conflict, match="not ready"):  # its notice is under way
        service.perform(lambda e: e.component(GcpComponent).simulate_gce("web-1"))
    service.advance_clock(timedelta(minutes=2))
    gcp = service.settled_engine().component(GcpComponent)
    assert gcp.gce_event(simulated.event_id).state is EventState.COMPLETED
    assert gcp.gce_events[announced.event_id].state is EventState.PENDING
    assert gcp.maintenance_event("web-1") == "NONE"
