"""The Azure platform behaviours of the engine: impacts on VMs, policies, terminate and OS image notifications,
scale-in, domains, and the exceptional cases of "Scheduled Events for Azure Virtual Machines"."""

from datetime import timedelta

import pytest

from forewarn.azure.changes import EventChanged, VmChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventSource, EventStatus, EventType, Impact, ScheduleRequest
from forewarn.azure.vms import NotificationProfile, Power
from forewarn.core.errors import Conflict, Invalid
from forewarn.engine.engine import Engine
from forewarn.fleet.file import parse_fleet
from helpers import T0, small_fleet

VMSS = "vmss:00000000-0000-0000-0000-000000000000/forewarn-rg/myvmss/pg0"


def engine(fleet=None) -> Engine:
    return Engine(fleet or small_fleet(), seed="test", now=T0)


def events(changes):
    return [c.event for c in changes if isinstance(c, EventChanged)]


def test_user_restart_is_a_user_reboot_and_the_vm_reboots():
    e = engine()
    [event] = events(e.component(AzureComponent).restart(["solo"]))
    assert (event.event_type, event.source, event.status) == (EventType.REBOOT, EventSource.USER, EventStatus.SCHEDULED)
    assert event.not_before == T0 + timedelta(minutes=15)
    assert event.description == "Virtual machine is going to be restarted as requested by authorized user."
    e.advance(T0 + timedelta(minutes=15))
    state = e.component(AzureComponent).vm_states["solo"]
    assert (state.power, state.memory_generation, state.impacted_by) == (Power.REBOOTING, 2, event.event_id)
    e.advance(T0 + timedelta(minutes=15, seconds=90))
    state = e.component(AzureComponent).vm_states["solo"]
    assert state.power is Power.RUNNING and state.booted_at == T0 + timedelta(minutes=15, seconds=90)
    assert state.temp_disk_generation == 1  # a reboot keeps the temporary disk


def test_automatically_approved_user_operations_skip_scheduled():
    """From "Scheduled Events for Azure Virtual Machines": with automaticallyApprove the event appears as Started; no Scheduled document ever exists."""
    e = engine()
    e.component(AzureComponent).update_policy("westno", auto_approve_reboot=True)
    scope = azure_fleet(e.fleet).vm("WestNO_0").scope
    changes = e.component(AzureComponent).restart(["WestNO_0"])
    [event] = events(changes)
    assert event.status is EventStatus.STARTED and [c.what for c in changes if isinstance(c, EventChanged)] == [
        "started"
    ]
    assert e.component(AzureComponent).incarnation(scope) == 2  # [] -> [Started]: one step
    # Redeploy is approved separately, and the policy applies to every member of the set.
    [redeploy] = events(e.component(AzureComponent).redeploy(["WestNO_1"]))
    assert redeploy.status is EventStatus.SCHEDULED


def test_policy_belongs_to_the_set_not_its_members():
    e = engine()
    with pytest.raises(Invalid, match="availability set westno, which decides for all its VMs"):
        e.component(AzureComponent).update_policy("WestNO_0", auto_approve_reboot=True)
    with pytest.raises(Invalid, match="scale set myvmss"):
        e.component(AzureComponent).update_policy("myvmss_1", auto_approve_redeploy=True)
    assert e.component(AzureComponent).update_policy("solo", auto_approve_redeploy=True)[0].policy.auto_approve_redeploy


def test_redeploy_moves_the_vm_and_loses_the_temporary_disk():
    e = engine()
    e.component(AzureComponent).schedule(ScheduleRequest(EventType.REDEPLOY, vms=("solo",), notice=timedelta(0)))
    e.advance(T0)
    state = e.component(AzureComponent).vm_states["solo"]
    assert (state.power, state.host, state.temp_disk_generation) == (Power.REDEPLOYING, "host-03", 2)
    assert "solo" in [vm.name for vm in e.component(AzureComponent).vms_on_host("host-03")]
    assert "solo" not in [vm.name for vm in e.component(AzureComponent).vms_on_host("host-02")]
    e.advance(T0 + timedelta(minutes=10))
    assert e.component(AzureComponent).vm_states["solo"].power is Power.RUNNING


def test_a_hosts_count_of_vms_is_its_list_counted_before_and_after_a_redeploy_moves_one():
    e = engine()
    azure = e.component(AzureComponent)

    def counted_and_listed() -> dict[str, tuple[int, int]]:
        return {host: (azure.count_on_host(host), len(azure.names_on_host(host))) for host in azure.host_names()}

    before = counted_and_listed()
    assert all(count == listed for count, listed in before.values()) and before["host-02"][0] > 0
    azure.schedule(ScheduleRequest(EventType.REDEPLOY, vms=("solo",), notice=timedelta(0)))
    e.advance(T0)
    after = counted_and_listed()
    assert all(count == listed for count, listed in after.values())
    assert (after["host-02"][0], after["host-03"][0]) == (before["host-02"][0] - 1, before["host-03"][0] + 1)


def test_freeze_pauses_for_its_duration_and_keeps_memory():
    e = engine()
    e.component(AzureComponent).schedule(
        ScheduleRequest(EventType.FREEZE, vms=("solo",), notice=timedelta(0), duration_seconds=9)
    )
    e.advance(T0)
    assert e.component(AzureComponent).vm_states["solo"].power is Power.FROZEN
    e.advance(T0 + timedelta(seconds=8))
    assert e.component(AzureComponent).vm_states["solo"].power is Power.FROZEN
    e.advance(T0 + timedelta(seconds=9))
    state = e.component(AzureComponent).vm_states["solo"]
    assert state.power is Power.RUNNING and state.memory_generation == 1 and state.booted_at == T0


def test_terminate_needs_the_profile_on_the_instance_model():
    e = engine()
    e.component(AzureComponent).update_policy("myvmss", terminate=NotificationProfile(True, timedelta(minutes=5)))
    # Not yet updated to the latest model: deleted at once, no Terminate (the terminate-notification page's
    # troubleshooting).
    changes = e.component(AzureComponent).delete(["myvmss_0"])
    assert events(changes) == [] and e.component(AzureComponent).vm_states["myvmss_0"].deleted
    e.component(AzureComponent).update_instances("myvmss")
    changes = e.component(AzureComponent).delete(["myvmss_1", "myvmss_2"])
    terminate = events(changes)
    assert [ev.resources for ev in terminate] == [("myvmss_1",), ("myvmss_2",)]  # one event per VM
    assert {ev.not_before for ev in terminate} == {T0 + timedelta(minutes=5)}
    assert len({ev.operation_id for ev in terminate}) == 1  # one batch
    # An approved delete waits for the unapproved one of its batch ("Terminate notification for Azure Virtual Machine
    # Scale Set instances").
    e.component(AzureComponent).approve([terminate[1].event_id], by="myvmss_2")
    assert e.component(AzureComponent).event(terminate[1].event_id).status is EventStatus.SCHEDULED
    assert not e.component(AzureComponent).vm_states["myvmss_2"].deleted
    e.component(AzureComponent).approve([terminate[0].event_id], by="myvmss_1")
    assert all(e.component(AzureComponent).event(ev.event_id).status is EventStatus.STARTED for ev in terminate)
    assert (
        e.component(AzureComponent).vm_states["myvmss_1"].deleted
        and e.component(AzureComponent).vm_states["myvmss_2"].deleted
    )


def test_terminate_times_out_and_cannot_be_extended():
    e = engine()
    e.component(AzureComponent).update_policy("myvmss", terminate=NotificationProfile(True, timedelta(minutes=5)))
    e.component(AzureComponent).update_instances("myvmss")
    [event] = events(e.component(AzureComponent).delete(["myvmss_0"]))
    e.component(AzureComponent).update_policy("myvmss", terminate=NotificationProfile(True, timedelta(minutes=15)))
    e.component(AzureComponent).update_instances("myvmss")
    assert e.component(AzureComponent).event(event.event_id).not_before == T0 + timedelta(minutes=5)
    e.advance(T0 + timedelta(minutes=5))
    assert e.component(AzureComponent).vm_states["myvmss_0"].deleted


def test_terminate_profile_validation():
    e = engine()
    for timeout in (timedelta(minutes=4), timedelta(minutes=16)):
        with pytest.raises(Invalid, match="between PT5M and PT15M"):
            e.component(AzureComponent).update_policy("myvmss", terminate=NotificationProfile(True, timeout))
    with pytest.raises(Invalid, match="belong to scale sets"):
        e.component(AzureComponent).update_policy("westno", terminate=NotificationProfile(True, timedelta(minutes=5)))
    spot = engine(parse_fleet("scale_sets: [{name: cheap, instances: 2, spot: true}]"))
    with pytest.raises(Invalid, match="Spot"):
        spot.component(AzureComponent).update_policy("cheap", terminate=NotificationProfile(True, timedelta(minutes=5)))


def test_only_deletes_raise_terminate():
    e = engine()
    e.component(AzureComponent).update_policy("myvmss", terminate=NotificationProfile(True, timedelta(minutes=5)))
    e.component(AzureComponent).update_instances("myvmss")
    assert [ev.event_type for ev in events(e.component(AzureComponent).restart(["myvmss_0"]))] == [EventType.REBOOT]
    assert [ev.event_type for ev in events(e.component(AzureComponent).redeploy(["myvmss_1"]))] == [EventType.REDEPLOY]
    assert events(e.component(AzureComponent).reimage(["myvmss_2"])) == []  # no OS image notification: reimaged at once
    assert e.component(AzureComponent).vm_states["myvmss_2"].power is Power.REIMAGING


def test_scale_in_removes_the_highest_instances_with_terminate_events():
    e = engine()
    e.component(AzureComponent).update_policy("myvmss", terminate=NotificationProfile(True, timedelta(minutes=10)))
    e.component(AzureComponent).update_instances("myvmss")
    [event] = events(e.component(AzureComponent).scale_in("myvmss", 1))
    assert event.resources == ("myvmss_2",) and event.source is EventSource.PLATFORM
    [event] = events(e.component(AzureComponent).scale_in("myvmss", 1))
    assert event.resources == ("myvmss_1",)  # myvmss_2 is already on its way out
    with pytest.raises(Invalid):
        e.component(AzureComponent).scale_in("myvmss", 2)
    with pytest.raises(Conflict, match="already being deleted"):
        e.component(AzureComponent).delete(["myvmss_2"])


def test_os_image_notification_announces_a_reimage():
    e = engine()
    with pytest.raises(Invalid, match="must be PT15M"):
        e.component(AzureComponent).update_policy("myvmss", os_image=NotificationProfile(True, timedelta(minutes=10)))
    e.component(AzureComponent).update_policy("myvmss", os_image=NotificationProfile(True, timedelta(minutes=15)))
    e.component(AzureComponent).update_instances("myvmss", ["myvmss_0"])
    [event] = events(e.component(AzureComponent).reimage(["myvmss_0"]))
    assert (event.event_type, event.impact, event.not_before) == (
        EventType.REBOOT,
        Impact.REIMAGE,
        T0 + timedelta(minutes=15),
    )
    e.component(AzureComponent).approve([event.event_id], by="myvmss_0")
    state = e.component(AzureComponent).vm_states["myvmss_0"]
    assert (state.power, state.os_disk_generation, state.temp_disk_generation) == (Power.REIMAGING, 2, 2)
    gpu = engine(parse_fleet("scale_sets: [{name: gpu, instances: 1, size: Standard_NC6s_v3}]"))
    with pytest.raises(Invalid, match="not supported for size Standard_NC6s_v3"):
        gpu.component(AzureComponent).update_policy("gpu", os_image=NotificationProfile(True, timedelta(minutes=15)))


def test_hardware_failure_bypasses_notice():
    e = engine()
    changes = e.component(AzureComponent).hardware_failure(["host-01"])
    [event] = events(changes)
    assert (event.event_type, event.status) == (EventType.REDEPLOY, EventStatus.STARTED)
    assert event.resources == ("WestNO_0", "WestNO_1")
    assert event.description == "Host server is undergoing an emergency repair."
    assert {e.component(AzureComponent).vm_states[n].host for n in event.resources} == {"host-02"}
    [reboot] = events(engine().component(AzureComponent).hardware_failure(["host-01"], EventType.REBOOT))
    assert reboot.event_type is EventType.REBOOT


def test_predicted_failure_days_ahead_and_approval_brings_it_forward():
    e = engine()
    [event] = events(e.component(AzureComponent).predicted_failure(["host-02"])[:1])
    assert event.event_type is EventType.REDEPLOY and event.not_before == T0 + timedelta(days=7)
    for ev in events(e.component(AzureComponent).predicted_failure(["host-01"], timedelta(days=2))):
        assert ev.not_before == T0 + timedelta(days=2)
        e.component(AzureComponent).approve([ev.event_id], by="WestNO_0")
        assert e.component(AzureComponent).event(ev.event_id).status is EventStatus.STARTED


def test_spot_eviction():
    e = engine()
    [event] = events(e.component(AzureComponent).evict(["spotty"]))
    assert (event.event_type, event.not_before) == (EventType.PREEMPT, T0 + timedelta(seconds=30))
    e.advance(T0 + timedelta(seconds=30))
    assert e.component(AzureComponent).vm_states["spotty"].deleted
    with pytest.raises(Conflict, match="deleted"):
        e.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, vms=("spotty",)))
    with pytest.raises(Invalid, match="not a Spot VM"):
        e.component(AzureComponent).evict(["solo"])
    assert "spotty" not in [vm.name for vm in e.component(AzureComponent).vms_on_host("host-03")]


def test_update_and_fault_domains_of_a_set():
    e = engine()
    [event] = events(
        e.component(AzureComponent).schedule(ScheduleRequest(EventType.REBOOT, group="myvmss", update_domain=1))
    )
    assert event.resources == ("myvmss_1",)
    westno = events(
        e.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, group="westno", fault_domain=0))
    )
    assert sorted(ev.resources for ev in westno) == [("WestNO_0",), ("WestNO_2",)]  # two hosts: two events
    with pytest.raises(Invalid, match="either an update domain or a fault domain"):
        e.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, group="westno"))
    with pytest.raises(Invalid, match="has no running VM"):
        e.component(AzureComponent).schedule(ScheduleRequest(EventType.FREEZE, group="myvmss", update_domain=4))


def test_the_vm_runs_again_when_its_event_completes():
    e = engine()
    e.component(AzureComponent).schedule(
        ScheduleRequest(
            EventType.REBOOT,
            vms=("solo",),
            notice=timedelta(0),
            duration_seconds=3600,
            impact_window=timedelta(minutes=10),
        )
    )
    e.advance(T0)
    assert e.component(AzureComponent).vm_states["solo"].impact_until == T0 + timedelta(
        minutes=10
    )  # capped by the impact window
    changes = e.advance(T0 + timedelta(minutes=10))
    assert e.component(AzureComponent).vm_states["solo"].power is Power.RUNNING
    assert [c.what for c in changes if isinstance(c, VmChanged)] == ["recovered"]


def test_more_short_impacts_while_started_and_none_after():
    e = engine()
    [event] = events(
        e.component(AzureComponent).schedule(
            ScheduleRequest(
                EventType.REBOOT,
                vms=("solo",),
                notice=timedelta(0),
                impact_window=timedelta(minutes=9),
                extra_impacts=2,
            )
        )
    )
    e.advance(T0)
    e.advance(T0 + timedelta(minutes=2))
    assert e.component(AzureComponent).vm_states["solo"].power is Power.RUNNING  # the reboot is over
    changes = e.advance(T0 + timedelta(minutes=3, seconds=10))  # a 5-second freeze at 3 minutes
    assert [c.what for c in changes if isinstance(c, VmChanged)] == ["impacted", "recovered"]
    e.advance(T0 + timedelta(minutes=6))
    assert e.component(AzureComponent).event(event.event_id).status is EventStatus.STARTED
    e.advance(T0 + timedelta(minutes=9))
    assert (
        e.component(AzureComponent).event(event.event_id).status is EventStatus.COMPLETED
        and e.component(AzureComponent).vm_states["solo"].power is Power.RUNNING
    )
    assert e.next_deadline() is None


def test_a_refused_request_changes_nothing_even_when_enabling_splits_it():
    from forewarn.azure.rules import AzureRules
    from forewarn.engine.rules import Rules

    e = Engine(small_fleet(), seed="test", now=T0, rules=Rules().with_part(AzureRules(enabling_required=True)))
    e.component(AzureComponent).request_seen(azure_fleet(e.fleet).vm("solo").scope)
    with pytest.raises(Invalid, match="notice cannot be negative"):
        e.component(AzureComponent).schedule(
            ScheduleRequest(EventType.REBOOT, vms=("solo", "WestNO_0"), notice=timedelta(seconds=-1))
        )
    assert (
        e.component(AzureComponent).events == {}
        and e.component(AzureComponent).vm_states["WestNO_0"].power is Power.RUNNING
    )
    # Valid, the same request gives notice to the enabled scope only.
    changes = events(e.component(AzureComponent).schedule(ScheduleRequest(EventType.REBOOT, vms=("solo", "WestNO_0"))))
    assert sorted((ev.resources[0], ev.status) for ev in changes) == [
        ("WestNO_0", EventStatus.STARTED),
        ("solo", EventStatus.SCHEDULED),
    ]
