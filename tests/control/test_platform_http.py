"""The platform behaviours through the control API of a real server, seen by the VMs through IMDS."""

import pytest
import requests

from helpers import Server


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("platform")) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


def vm(server, name):
    return server.get(f"/v1/vms/{name}")


def test_auto_approved_restart_is_started_at_once_and_the_vm_reboots(server):
    response = requests.patch(f"{server.control}/v1/policies/solo", json={"auto_approve_reboot": True})
    assert response.status_code == 200 and response.json()["auto_approve_reboot"] is True
    outcome = server.post("/v1/vms/restart", {"vms": ["solo"]}, expect=200).json()
    [event] = outcome["events"]
    assert (event["status"], event["source"], event["type"]) == ("Started", "User", "Reboot")
    assert outcome["vms"][0]["power"] == "rebooting"
    doc = server.scheduled_events().json()
    assert doc["DocumentIncarnation"] == 2 and doc["Events"][0]["EventStatus"] == "Started"
    server.advance("90s")
    state = vm(server, "solo")
    assert state["power"] == "running" and state["booted_at"] == "2026-04-20T22:13:28Z"


def test_terminate_notification_through_the_api(server):
    url = f"{server.control}/v1/policies/myvmss"
    bad = requests.patch(url, json={"terminate_notification": {"enable": True, "not_before_timeout": "PT20M"}})
    assert bad.status_code == 400 and "PT5M and PT15M" in bad.json()["error"]["message"]
    assert requests.patch(url, json={"terminate_notification": {"enable": True, "not_before_timeout": "PT5M"}}).ok
    assert vm(server, "myvmss_0")["latest_model"] is False
    server.post("/v1/scale-sets/myvmss/update-instances", {}, expect=200)
    assert vm(server, "myvmss_0")["latest_model"] is True
    outcome = server.post("/v1/scale-sets/myvmss/scale-in", {"count": 2}, expect=200).json()
    assert sorted(e["resources"][0] for e in outcome["events"]) == ["myvmss_1", "myvmss_2"]
    doc = requests.get(
        f"{server.imds}/metadata/scheduledevents?api-version=2019-01-01", headers={"Metadata": "true"}, params=None
    )
    assert doc.status_code == 200  # the default VM (solo) is not in the scale set: nothing for it
    assert doc.json()["Events"] == []
    server.advance("5m")
    assert vm(server, "myvmss_2")["power"] == "deleted"
    again = server.post("/v1/vms/restart", {"vms": ["myvmss_2"]})
    assert again.status_code == 409 and "deleted" in again.json()["error"]["message"]


def test_exceptional_cases_through_the_api(server):
    failure = server.post("/v1/platform/hardware-failure", {"hosts": ["host-02"]}, expect=200).json()
    assert {e["status"] for e in failure["events"]} == {"Started"}
    assert {e["type"] for e in failure["events"]} == {"Redeploy"}
    assert vm(server, "solo")["host"] == "host-03"
    predicted = server.post("/v1/platform/predicted-failure", {"hosts": ["host-01"], "notice": "3d"}, expect=200).json()
    assert predicted["events"][0]["not_before"] == "2026-04-23T22:11:58Z"
    assert server.post("/v1/platform/evict", {"vms": ["solo"]}).status_code == 400
    evicted = server.post("/v1/platform/evict", {"vms": ["spotty"]}, expect=200).json()
    assert evicted["events"][0]["type"] == "Preempt"
    assert server.post("/v1/platform/hardware-failure", {"hosts": ["host-01"], "type": "Freeze"}).status_code == 400


def test_domain_maintenance_through_schedule(server):
    [event] = server.schedule(type="Reboot", group="myvmss", update_domain=2)
    assert event["resources"] == ["myvmss_2"]
    assert server.post("/v1/events", {"type": "Reboot", "group": "nope", "update_domain": 1}).status_code == 404


def test_arm_api_served_by_the_real_server(server):
    """The PUT of "Terminate notification for Azure Virtual Machine Scale Set instances", as written, then an instance delete: the Terminate event reaches the scale set's VMs."""
    base = (
        f"{server.arm}/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/forewarn-rg/providers/"
        "Microsoft.Compute/virtualMachineScaleSets/myvmss"
    )
    put = requests.put(
        f"{base}?api-version=2019-03-01",
        json={
            "properties": {
                "virtualMachineProfile": {
                    "scheduledEventsProfile": {
                        "terminateNotificationProfile": {"notBeforeTimeout": "PT5M", "enable": True}
                    }
                }
            }
        },
    )
    assert put.status_code == 200, put.text
    upgrade = requests.post(f"{base}/manualupgrade?api-version=2019-03-01", json={"instanceIds": ["0", "1", "2"]})
    assert upgrade.status_code in (200, 202), upgrade.text
    deleted = requests.post(f"{base}/delete?api-version=2019-03-01", json={"instanceIds": ["1"]})
    assert deleted.status_code == 202 and "Azure-AsyncOperation" in deleted.headers
    [event] = [e for e in server.get("/v1/events") if e["type"] == "Terminate"]
    assert event["resources"] == ["myvmss_1"] and event["not_before"] == "2026-04-20T22:16:58Z"
    status = requests.get(deleted.headers["Azure-AsyncOperation"]).json()
    assert status["status"] == "InProgress"
    missing = requests.get(f"{base}?api-version=2019-03-01".replace("myvmss", "nope"))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "ResourceNotFound"
    assert requests.get(base).json()["error"]["code"] == "MissingApiVersionParameter"
