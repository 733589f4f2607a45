"""Every case of Microsoft's "Scheduled Events for Azure Virtual Machines", its IMDS pages and "Terminate notification
for Azure Virtual Machine Scale Set instances", end to end: a real server process on the manual clock, driven through
the
Azure management API (ARM) or, for what only the platform starts, the control API; asserting the documents each VM
of the scope sees over time through IMDS."""

import pytest
import requests

from helpers import Server

SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
OTHER = "0b8e7d6c-3a2f-4c1e-8d9b-5f4a3e2d1c02"
RG = f"/subscriptions/{SUB}/resourceGroups/contoso-rg/providers/Microsoft.Compute"
API = "2024-07-01"
ADDRESSES = {
    "WestNO_0": "127.0.0.30",
    "WestNO_1": "127.0.0.31",
    "solo": "127.0.0.32",
    "tenant-b": "127.0.0.33",
    "web_0": "127.0.0.40",
    "web_1": "127.0.0.41",
    "web_2": "127.0.0.42",
    "spotty": "127.0.0.35",
}
FLEET = f"""
defaults: {{subscription: {SUB}, resource_group: contoso-rg, location: westeurope}}
hosts: [{{name: host-01}}, {{name: host-02}}, {{name: host-03}}, {{name: host-04}}]
availability_sets: [{{name: westno}}]
vms:
  - {{name: WestNO_0, host: host-01, availability_set: westno, imds: {{address: 127.0.0.30}}}}
  - {{name: WestNO_1, host: host-01, availability_set: westno, imds: {{address: 127.0.0.31}}}}
  - {{name: solo, host: host-02, imds: {{address: 127.0.0.32}}}}
  - {{name: tenant-b, host: host-02, subscription: {OTHER}, resource_group: fabrikam-rg, imds: {{address: 127.0.0.33}}}}
  - {{name: spotty, host: host-04, spot: true, imds: {{address: 127.0.0.35}}}}
scale_sets:
  - {{name: web, instances: 3, hosts: [host-03], imds: {{address: 127.0.0.40}}}}
"""


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("cases"), FLEET) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


def doc(server, vm, version="2020-07-01"):
    response = requests.get(
        f"http://{ADDRESSES[vm]}:{server.imds_port}/metadata/scheduledevents",
        params={"api-version": version},
        headers={"Metadata": "true"},
    )
    assert response.status_code == 200, response.text
    return response.json()


def seen(server, vm):
    """(incarnation, [(type, status, resources)]) as the VM sees it."""
    d = doc(server, vm)
    return d["DocumentIncarnation"], [(e["EventType"], e["EventStatus"], e["Resources"]) for e in d["Events"]]


def approve(server, vm, event_id):
    response = requests.post(
        f"http://{ADDRESSES[vm]}:{server.imds_port}/metadata/scheduledevents",
        params={"api-version": "2020-07-01"},
        headers={"Metadata": "true"},
        json={"StartRequests": [{"EventId": event_id}]},
    )
    assert response.status_code == 200, response.text


def arm(server, method, path, body=None, api=API):
    response = requests.request(method, f"{server.arm}{RG}{path}", params={"api-version": api}, json=body)
    assert response.status_code < 400, response.text
    return response


def ids(server, vm):
    return [e["EventId"] for e in doc(server, vm)["Events"]]


def vm_state(server, vm):
    return server.get(f"/v1/vms/{vm}")


# ------------------------------------------------------------------------------------------- platform maintenance
def test_shared_host_waits_for_every_tenant_and_each_sees_only_its_own(server):
    server.schedule(type="Reboot", hosts=["host-02"])
    assert seen(server, "solo") == (2, [("Reboot", "Scheduled", ["solo"])])
    assert seen(server, "tenant-b") == (2, [("Reboot", "Scheduled", ["tenant-b"])])
    approve(server, "solo", ids(server, "solo")[0])
    assert seen(server, "solo") == (2, [("Reboot", "Scheduled", ["solo"])])  # waits for the other tenant
    approve(server, "tenant-b", ids(server, "tenant-b")[0])
    assert seen(server, "solo") == (3, [("Reboot", "Started", ["solo"])])
    assert seen(server, "tenant-b") == (3, [("Reboot", "Started", ["tenant-b"])])
    assert vm_state(server, "solo")["power"] == "rebooting"
    server.advance("10m")
    assert seen(server, "solo") == (4, []) and vm_state(server, "solo")["power"] == "running"


def test_vms_on_different_hosts_get_events_that_cancel_alone(server):
    server.schedule(type="Freeze", vms=["WestNO_0", "solo"])
    [solo_event] = ids(server, "solo")
    server.post(f"/v1/events/{solo_event}/cancel", expect=200)
    assert seen(server, "solo") == (3, [])
    assert seen(server, "WestNO_1") == (2, [("Freeze", "Scheduled", ["WestNO_0"])])
    server.advance("15m")
    assert seen(server, "WestNO_1") == (3, [("Freeze", "Started", ["WestNO_0"])])
    assert vm_state(server, "WestNO_0")["power"] == "frozen" and vm_state(server, "WestNO_1")["power"] == "running"
    server.advance("5s")
    assert vm_state(server, "WestNO_0")["power"] == "running"


def test_cancel_is_refused_once_started(server):
    [event] = server.schedule(type="Freeze", vms=["solo"], notice="1m")
    server.advance("1m")
    response = server.post(f"/v1/events/{event['event_id']}/cancel")
    assert response.status_code == 409
    assert seen(server, "solo") == (3, [("Freeze", "Started", ["solo"])])


def test_update_domain_of_a_scale_set(server):
    server.schedule(type="Reboot", group="web", update_domain=1)
    assert seen(server, "web_0") == (2, [("Reboot", "Scheduled", ["web_1"])])


def test_redeploy_moves_the_vm_and_more_short_impacts_while_started(server):
    server.schedule(type="Redeploy", vms=["solo"], notice="1m", extra_impacts=1)
    server.advance("1m")
    state = vm_state(server, "solo")
    assert (state["power"], state["host"], state["temp_disk_generation"]) == ("redeploying", "host-03", 2)
    server.advance("4m")  # moved; the extra short impact comes half way through the 10-minute window
    assert vm_state(server, "solo")["power"] == "running"
    server.advance("1m")
    assert vm_state(server, "solo")["power"] == "frozen"
    server.advance("5m")
    assert seen(server, "solo") == (4, []) and vm_state(server, "solo")["power"] == "running"


# -------------------------------------------------------------------------------------- user-initiated (ARM)
def test_user_restart_waits_for_approval_or_not_before(server):
    accepted = arm(server, "POST", "/virtualMachines/solo/restart")
    assert accepted.status_code == 202
    incarnation, [event] = seen(server, "solo")
    assert (incarnation, event) == (2, ("Reboot", "Scheduled", ["solo"]))
    assert doc(server, "solo")["Events"][0]["EventSource"] == "User"
    approve(server, "solo", ids(server, "solo")[0])
    assert seen(server, "solo") == (3, [("Reboot", "Started", ["solo"])])
    operation = requests.get(accepted.headers["Azure-AsyncOperation"]).json()
    assert operation["status"] == "InProgress"
    server.advance("10m")
    assert requests.get(accepted.headers["Azure-AsyncOperation"]).json()["status"] == "Succeeded"


def test_automatically_approved_restart_skips_scheduled_for_the_whole_set(server):
    arm(
        server,
        "PATCH",
        "/availabilitySets/westno",
        {"properties": {"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": True}}}},
    )
    refused = requests.patch(
        f"{server.arm}{RG}/virtualMachines/WestNO_0",
        params={"api-version": API},
        json={"properties": {"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": False}}}},
    )
    assert refused.status_code >= 400
    arm(server, "POST", "/virtualMachines/WestNO_1/restart")
    assert seen(server, "WestNO_0") == (2, [("Reboot", "Started", ["WestNO_1"])])  # never Scheduled
    arm(server, "POST", "/virtualMachines/WestNO_0/redeploy")  # redeploy is not auto-approved
    assert seen(server, "WestNO_0")[1][1] == ("Redeploy", "Scheduled", ["WestNO_0"])


def enable_terminate(server, timeout="PT5M"):
    # The REST example of "Terminate notification for Azure Virtual Machine Scale Set instances", as written.
    arm(
        server,
        "PUT",
        "/virtualMachineScaleSets/web",
        {
            "properties": {
                "virtualMachineProfile": {
                    "scheduledEventsProfile": {
                        "terminateNotificationProfile": {"notBeforeTimeout": timeout, "enable": True}
                    }
                }
            }
        },
        api="2019-03-01",
    )
    arm(server, "POST", "/virtualMachineScaleSets/web/manualupgrade", {"instanceIds": ["0", "1", "2"]})


def test_terminate_notifications_and_the_batch_rule(server):
    enable_terminate(server)
    arm(server, "POST", "/virtualMachineScaleSets/web/delete", {"instanceIds": ["1", "2"]})
    incarnation, events = seen(server, "web_0")
    assert incarnation == 2 and events == [("Terminate", "Scheduled", ["web_1"]), ("Terminate", "Scheduled", ["web_2"])]
    # Terminate needs 2019-01-01 (the IMDS pages' version table)
    assert doc(server, "web_0", "2017-11-01")["Events"] == []
    first, second = ids(server, "web_1")
    approve(server, "web_2", second)  # each VM approves its own
    assert [e[1] for e in seen(server, "web_0")[1]] == ["Scheduled", "Scheduled"]  # waits for web_1's
    approve(server, "web_1", first)
    assert [e[1] for e in seen(server, "web_0")[1]] == ["Started", "Started"]
    assert vm_state(server, "web_1")["power"] == "deleted" and vm_state(server, "web_2")["power"] == "deleted"
    server.advance("10m")
    assert seen(server, "web_0")[1] == []


def test_terminate_times_out_at_not_before(server):
    enable_terminate(server, "PT7M")
    arm(server, "DELETE", "/virtualMachineScaleSets/web/virtualMachines/0")
    assert doc(server, "web_1")["Events"][0]["NotBefore"] == "Mon, 20 Apr 2026 22:18:58 GMT"
    server.advance("7m")
    assert seen(server, "web_1")[1] == [("Terminate", "Started", ["web_0"])]


def test_scale_in_by_capacity_and_only_deletes_raise_terminate(server):
    enable_terminate(server)
    arm(server, "POST", "/virtualMachineScaleSets/web/virtualMachines/0/restart")
    arm(server, "POST", "/virtualMachineScaleSets/web/virtualMachines/1/redeploy")
    assert [e[0] for e in seen(server, "web_0")[1]] == ["Reboot", "Redeploy"]
    arm(server, "PATCH", "/virtualMachineScaleSets/web", {"sku": {"capacity": 2}})
    assert seen(server, "web_0")[1][-1] == ("Terminate", "Scheduled", ["web_2"])


def test_os_image_notification_announces_the_reimage(server):
    arm(
        server,
        "PATCH",
        "/virtualMachineScaleSets/web",
        {
            "properties": {
                "virtualMachineProfile": {
                    "scheduledEventsProfile": {
                        "osImageNotificationProfile": {"enable": True, "notBeforeTimeout": "PT15M"}
                    }
                }
            }
        },
    )
    arm(server, "POST", "/virtualMachineScaleSets/web/manualupgrade", {"instanceIds": ["0"]})
    arm(server, "POST", "/virtualMachineScaleSets/web/virtualMachines/0/reimage")
    assert seen(server, "web_1")[1] == [("Reboot", "Scheduled", ["web_0"])]
    server.advance("15m")
    assert vm_state(server, "web_0")["power"] == "reimaging" and vm_state(server, "web_0")["os_disk_generation"] == 2


# ------------------------------------------------------------------------------------------ exceptional cases
def test_predicted_failure_days_ahead_brought_forward_by_approval(server):
    server.post("/v1/platform/predicted-failure", {"hosts": ["host-01"]}, expect=200)
    event = doc(server, "WestNO_0")["Events"][0]
    assert (event["EventType"], event["NotBefore"]) == ("Redeploy", "Mon, 27 Apr 2026 22:11:58 GMT")
    approve(server, "WestNO_1", event["EventId"])
    assert seen(server, "WestNO_0")[1] == [("Redeploy", "Started", ["WestNO_0", "WestNO_1"])]


def test_hardware_failure_appears_started(server):
    server.post("/v1/platform/hardware-failure", {"hosts": ["host-01"]}, expect=200)
    assert seen(server, "WestNO_0") == (2, [("Redeploy", "Started", ["WestNO_0", "WestNO_1"])])
    assert doc(server, "WestNO_0")["Events"][0]["Description"] == "Host server is undergoing an emergency repair."


def test_hardware_failure_type_is_configurable(tmp_path):
    server = Server(tmp_path, FLEET, extra=["--hardware-failure-type", "Reboot"]).start()
    try:
        server.post("/v1/platform/hardware-failure", {"hosts": ["host-02"]}, expect=200)
        assert seen(server, "solo") == (2, [("Reboot", "Started", ["solo"])])
    finally:
        server.stop()


def test_spot_eviction(server):
    server.post("/v1/platform/evict", {"vms": ["spotty"]}, expect=200)
    event = doc(server, "spotty")["Events"][0]
    assert (event["EventType"], event["NotBefore"]) == ("Preempt", "Mon, 20 Apr 2026 22:12:28 GMT")
    assert doc(server, "spotty", "2017-08-01")["Events"] == []  # Preempt needs 2017-11-01
    server.advance("30s")
    assert seen(server, "spotty")[1] == [("Preempt", "Started", ["spotty"])]
    assert vm_state(server, "spotty")["power"] == "deleted"
