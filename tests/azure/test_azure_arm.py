"""The Azure Resource Manager surface (Microsoft.Compute), in-process over httpx's ASGI transport: user operations and
their scheduled events (Microsoft's overview), policies and notification profiles (the overview, the
terminate-notification page), long-running operations, and ARM's error shapes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
import pytest

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.arm.compute import create_arm_app
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.model import EventSource, EventStatus, EventType, ScheduleRequest
from forewarn.azure.vms import Power
from helpers import T0, open_store, parse_fleet

SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
API = "2024-07-01"
FLEET = f"""
defaults: {{subscription: {SUB}, resource_group: Contoso-RG, location: westeurope}}
hosts: [{{name: host-01}}, {{name: host-02}}, {{name: host-03}}, {{name: host-04}}]
availability_sets:
  - name: westno
    scheduled_events_policy:
      user_initiated_reboot: {{automatically_approve: true}}
vms:
  - {{name: WestNO_0, host: host-01, availability_set: westno}}
  - {{name: WestNO_1, host: host-01, availability_set: westno}}
  - {{name: solo, host: host-02, zone: "1", tags: {{role: api}}}}
scale_sets:
  - name: web
    instances: 3
    hosts: [host-03]
    scheduled_events_profile:
      terminate_notification_profile: {{enable: true, not_before_timeout: PT5M}}
      os_image_notification_profile: {{enable: true, not_before_timeout: PT15M}}
  - name: workers
    instances: 2
    hosts: [host-04]
  - name: spotset
    instances: 1
    hosts: [host-04]
    spot: true
  - name: bigmem
    instances: 1
    hosts: [host-04]
    size: Standard_M8ms
"""
# The resource group as a client may spell it: ARM compares resource group names case-insensitively.
RG = f"/subscriptions/{SUB}/resourceGroups/contoso-rg/providers/Microsoft.Compute"
VMS = f"{RG}/virtualMachines"
AVSETS = f"{RG}/availabilitySets"
VMSS = f"{RG}/virtualMachineScaleSets"


class Arm:
    """The ARM app over a service with a manual clock, called synchronously."""

    def __init__(self, path):
        self.path = path
        self.service = Maintenance.open(
            open_store(str(path)), parse_fleet(FLEET, "arm.yaml"), "manual", 1.0, T0, "seed"
        )
        self.app = create_arm_app(self.service)

    def reopen(self) -> None:
        """A restart: a new service and a new app over the same database."""
        self.service.store.close()
        self.service = Maintenance.open(open_store(str(self.path)), None, "manual", 1.0, None, None)
        self.app = create_arm_app(self.service)

    def call(
        self, method: str, path: str, body=None, content: bytes | None = None, api: str | None = API, **params
    ) -> httpx.Response:
        if api is not None:
            params["api-version"] = api

        async def run():
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://arm.test") as client:
                return await client.request(method, path, params=params or None, json=body, content=content)

        return asyncio.run(run())

    def follow(self, url: str) -> httpx.Response:
        parts = urlsplit(url)
        assert parts.netloc == "arm.test"
        return self.call("GET", parts.path + "?" + parts.query, api=None)

    def advance(self, **delta) -> None:
        self.service.advance_clock(timedelta(**delta))

    def live(self, vm_name: str):
        engine = self.service.settled_engine()
        return engine.component(AzureComponent).live_events(azure_fleet(engine.fleet).vm(vm_name).scope)


@pytest.fixture
def arm(tmp_path):
    arm = Arm(tmp_path / "arm.db")
    yield arm
    arm.service.store.close()


def error_of(response: httpx.Response) -> dict:
    assert set(response.json()) == {"error"}, response.text
    return response.json()["error"]


# ------------------------------------------------------------------------------------------------ ARM conventions
def test_api_version_is_required_on_every_call(arm):
    for method, path in (("GET", f"{VMS}/solo"), ("POST", f"{VMS}/solo/restart"), ("GET", "/subscriptions/x")):
        response = arm.call(method, path, api=None)
        assert response.status_code == 400
        assert error_of(response) == {
            "code": "MissingApiVersionParameter",
            "message": "The api-version query parameter (?api-version=) is required for all requests.",
        }
    response = arm.call("GET", f"{VMS}/solo", api="yesterday")
    assert response.status_code == 400 and error_of(response)["code"] == "InvalidApiVersionParameter"
    assert "The api-version 'yesterday' is invalid." in error_of(response)["message"]
    assert not arm.live("solo")  # nothing happened


def test_not_found_shapes(arm):
    response = arm.call("GET", f"{VMS}/nope")
    assert response.status_code == 404
    assert error_of(response) == {
        "code": "ResourceNotFound",
        "message": "The Resource 'Microsoft.Compute/virtualMachines/nope' under resource group 'contoso-rg' was not "
        "found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
    }
    response = arm.call(
        "GET", f"/subscriptions/{SUB}/resourceGroups/other-rg/providers/Microsoft.Compute/virtualMachines/solo"
    )
    assert response.status_code == 404
    assert error_of(response) == {
        "code": "ResourceGroupNotFound",
        "message": "Resource group 'other-rg' could not be found.",
    }
    response = arm.call("GET", "/subscriptions/00000000-0000-0000-0000-000000000009/resourceGroups/contoso-rg")
    assert response.status_code == 404 and error_of(response)["code"] == "SubscriptionNotFound"
    # Scale-set instances are not standalone VMs (Uniform orchestration); unknown instances are not found either.
    assert arm.call("GET", f"{VMS}/web_0").status_code == 404
    response = arm.call("GET", f"{VMSS}/web/virtualMachines/9")
    assert response.status_code == 404
    assert "'Microsoft.Compute/virtualMachineScaleSets/web/virtualMachines/9'" in error_of(response)["message"]
    assert error_of(arm.call("GET", f"{RG}/disks/d1"))["code"] == "InvalidResourceType"
    assert arm.call("PUT", f"{VMS}/solo/restart").status_code == 405
    network = f"/subscriptions/{SUB}/resourceGroups/contoso-rg/providers/Microsoft.Network/virtualNetworks/v"
    assert error_of(arm.call("GET", network))["code"] == "InvalidResourceNamespace"


def test_paths_and_names_are_case_insensitive(arm):
    path = f"/SUBSCRIPTIONS/{SUB}/resourcegroups/CONTOSO-RG/Providers/microsoft.compute/VIRTUALMACHINES/SOLO"
    response = arm.call("GET", path)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["name"] == "solo"
    assert (
        body["id"] == f"/subscriptions/{SUB}/resourceGroups/Contoso-RG/providers/Microsoft.Compute/virtualMachines/solo"
    )


def test_malformed_bodies_are_400_never_500(arm):
    for content in (b"{not json", b"[1, 2]", b"\xff\xfe", b'"text"'):
        response = arm.call("PATCH", f"{AVSETS}/westno", content=content)
        assert response.status_code == 400, response.text
        assert error_of(response)["code"] == "InvalidRequestContent"
    assert "could not be deserialized" in error_of(arm.call("PATCH", f"{VMS}/solo", content=b"{"))["message"]
    bad = [
        (
            "PATCH",
            f"{AVSETS}/westno",
            {"properties": {"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": "yes"}}}},
        ),
        ("PATCH", f"{AVSETS}/westno", {"properties": {"scheduledEventsPolicy": []}}),
        ("PATCH", f"{AVSETS}/westno", {"properties": 3}),
        ("PATCH", f"{VMSS}/web", {"sku": {"capacity": "two"}}),
        ("PATCH", f"{VMSS}/web", {"sku": {"capacity": -1}}),
        (
            "PATCH",
            f"{VMSS}/web",
            {
                "properties": {
                    "virtualMachineProfile": {
                        "scheduledEventsProfile": {"terminateNotificationProfile": {"notBeforeTimeout": 10}}
                    }
                }
            },
        ),
        (
            "PATCH",
            f"{VMSS}/web",
            {
                "properties": {
                    "virtualMachineProfile": {
                        "scheduledEventsProfile": {"terminateNotificationProfile": {"notBeforeTimeout": "ten minutes"}}
                    }
                }
            },
        ),
        ("POST", f"{VMSS}/web/delete", {"instanceIds": "0"}),
        ("POST", f"{VMSS}/web/delete", {"instanceIds": [None]}),
        ("POST", f"{VMSS}/web/delete", {}),
        ("POST", f"{VMSS}/web/manualupgrade", None),
        ("POST", f"{VMSS}/web/restart", {"instanceIds": ["7"]}),
        ("PATCH", f"{VMSS}/web", None),
    ]
    for method, path, body in bad:
        response = arm.call(method, path, body)
        assert response.status_code == 400, (method, path, body, response.text)
        assert set(error_of(response)) >= {"code", "message"}
    assert not arm.live("web_0")


def test_the_fleet_file_fixes_what_arm_cannot_change(arm):
    assert arm.call("PUT", f"{VMS}/newvm", {"location": "westeurope"}).status_code == 409
    assert arm.call("PATCH", f"{VMS}/solo", {"tags": {"role": "db"}}).status_code == 409
    assert arm.call("PATCH", f"{VMSS}/web", {"sku": {"capacity": 5}}).status_code == 409
    # A GET-modify-PUT round trip repeats the fixed fields unchanged, which is fine.
    body = arm.call("GET", f"{VMS}/solo").json()
    body["properties"]["scheduledEventsPolicy"]["userInitiatedRedeploy"]["automaticallyApprove"] = True
    response = arm.call("PUT", f"{VMS}/solo", body)
    assert response.status_code == 200, response.text
    assert arm.service.settled_engine().component(AzureComponent).policy("solo").auto_approve_redeploy


@pytest.mark.parametrize("name", ["rel%20x", "_x", "x-", "x.", "a%3Cb", "a" * 65])
def test_a_put_of_a_name_azure_refuses_is_refused_for_its_name(arm, name):
    """Azure's rule for VM and scale set names ("Naming rules and restrictions for Azure resources") comes before
    forewarn's refusal to create machines: 400 InvalidParameter naming the rule, not 409."""
    for collection in (VMS, VMSS):
        response = arm.call("PUT", f"{collection}/{name}", {"location": "westeurope"})
        assert response.status_code == 400, response.text
        error = error_of(response)
        assert (error["code"], error["target"]) == ("InvalidParameter", "name")
        assert error["message"].startswith("The entity name '")
        assert "letters, digits, underscores, periods and hyphens" in error["message"] or "1-64" in error["message"]
    assert arm.call("PUT", f"{VMS}/fine_name", {"location": "westeurope"}).status_code == 409


# ------------------------------------------------------------------------------------------------------ resources
def test_vm_body_and_instance_view(arm):
    body = arm.call("GET", f"{VMS}/WestNO_0", **{"$expand": "instanceView"}).json()
    vm = azure_fleet(arm.service.settled_engine().fleet).vm("WestNO_0")
    assert body["type"] == "Microsoft.Compute/virtualMachines" and body["location"] == "westeurope"
    properties = body["properties"]
    assert properties["vmId"] == vm.vm_id and properties["hardwareProfile"] == {"vmSize": "Standard_D2s_v3"}
    assert properties["availabilitySet"]["id"].endswith("/providers/Microsoft.Compute/availabilitySets/westno")
    assert properties["provisioningState"] == "Succeeded"
    assert "scheduledEventsPolicy" not in properties  # the availability set holds it
    assert [s["code"] for s in properties["instanceView"]["statuses"]] == [
        "ProvisioningState/succeeded",
        "PowerState/running",
    ]
    solo = arm.call("GET", f"{VMS}/solo").json()
    assert solo["zones"] == ["1"] and solo["tags"] == {"role": "api"}
    assert solo["properties"]["scheduledEventsPolicy"] == {
        "userInitiatedRedeploy": {"automaticallyApprove": False},
        "userInitiatedReboot": {"automaticallyApprove": False},
    }
    assert "instanceView" not in solo["properties"]
    names = [vm["name"] for vm in arm.call("GET", VMS).json()["value"]]
    assert names == ["WestNO_0", "WestNO_1", "solo"]
    # Before 2024-03-01 the policy is not part of the model.
    assert "scheduledEventsPolicy" not in arm.call("GET", f"{VMS}/solo", api="2023-09-01").json()["properties"]


def test_scale_set_and_availability_set_bodies(arm):
    web = arm.call("GET", f"{VMSS}/web").json()
    assert web["sku"] == {"name": "Standard_D2s_v3", "tier": "Standard", "capacity": 3}
    assert web["properties"]["virtualMachineProfile"]["scheduledEventsProfile"] == {
        "terminateNotificationProfile": {"notBeforeTimeout": "PT5M", "enable": True},
        "osImageNotificationProfile": {"notBeforeTimeout": "PT15M", "enable": True},
    }
    assert web["properties"]["upgradePolicy"] == {"mode": "Manual"}
    spot = arm.call("GET", f"{VMSS}/spotset").json()
    assert spot["properties"]["virtualMachineProfile"]["priority"] == "Spot"
    old = arm.call("GET", f"{VMSS}/web", api="2019-07-01").json()["properties"]
    assert old["virtualMachineProfile"]["scheduledEventsProfile"] == {
        "terminateNotificationProfile": {"notBeforeTimeout": "PT5M", "enable": True}
    }
    assert "scheduledEventsPolicy" not in old
    instances = arm.call("GET", f"{VMSS}/web/virtualMachines").json()["value"]
    assert [(i["name"], i["instanceId"], i["properties"]["latestModelApplied"]) for i in instances] == [
        ("web_0", "0", True),
        ("web_1", "1", True),
        ("web_2", "2", True),
    ]
    avset = arm.call("GET", f"{AVSETS}/WESTNO").json()
    assert avset["name"] == "westno" and len(avset["properties"]["virtualMachines"]) == 2
    assert avset["properties"]["scheduledEventsPolicy"]["userInitiatedReboot"] == {"automaticallyApprove": True}
    assert [s["name"] for s in arm.call("GET", VMSS).json()["value"]] == ["web", "workers", "spotset", "bigmem"]


# ----------------------------------------------------------------------------------------------- user operations
def test_restart_under_automatically_approve_starts_at_once_and_the_operation_succeeds(arm):
    response = arm.call("POST", f"{VMS}/WestNO_0/restart")
    assert response.status_code == 202 and response.content == b""
    status_url = response.headers["Azure-AsyncOperation"]
    location = response.headers["Location"]
    assert status_url.startswith(
        f"http://arm.test/subscriptions/{SUB}/providers/Microsoft.Compute/locations/westeurope/operations/"
    )
    assert status_url.endswith(f"?api-version={API}")
    assert location == status_url.replace("?api-version=", "?monitor=true&api-version=")
    assert int(response.headers["Retry-After"]) >= 1

    [event] = arm.live("WestNO_0")
    assert (event.event_type, event.source, event.status) == (EventType.REBOOT, EventSource.USER, EventStatus.STARTED)
    assert event.resources == ("WestNO_0",)
    assert arm.service.settled_engine().component(AzureComponent).vm_states["WestNO_0"].power is Power.REBOOTING
    view = arm.call("GET", f"{VMS}/WestNO_0/instanceView").json()
    assert [s["code"] for s in view["statuses"]] == ["ProvisioningState/updating", "PowerState/starting"]

    status = arm.follow(status_url)
    assert status.status_code == 200
    assert status.json() == {
        "startTime": T0.isoformat(),
        "status": "InProgress",
        "name": status_url.split("/")[-1].split("?")[0],
    }
    monitor = arm.follow(location)
    assert monitor.status_code == 202 and monitor.headers["Location"] == location

    arm.advance(minutes=10)  # the impact window: the event completes
    assert arm.live("WestNO_0") == []
    status = arm.follow(status_url).json()
    assert status["status"] == "Succeeded" and status["endTime"] == (T0 + timedelta(minutes=10)).isoformat()
    monitor = arm.follow(location)
    assert monitor.status_code == 200 and monitor.content == b""


def test_restart_without_the_policy_is_scheduled_with_notice(arm):
    response = arm.call("POST", f"{VMS}/solo/restart")
    assert response.status_code == 202
    [event] = arm.live("solo")
    assert event.status is EventStatus.SCHEDULED and event.not_before == T0 + timedelta(minutes=15)
    arm.advance(minutes=15)
    assert arm.live("solo")[0].status is EventStatus.STARTED
    assert arm.follow(response.headers["Azure-AsyncOperation"]).json()["status"] == "InProgress"
    arm.advance(minutes=10)
    assert arm.follow(response.headers["Azure-AsyncOperation"]).json()["status"] == "Succeeded"


def test_redeploy_follows_the_redeploy_policy_only(arm):
    arm.call("POST", f"{VMS}/WestNO_1/redeploy")
    [event] = arm.live("WestNO_1")
    assert (event.event_type, event.status) == (EventType.REDEPLOY, EventStatus.SCHEDULED)


def test_operation_status_survives_a_restart(arm):
    response = arm.call("POST", f"{VMS}/solo/restart")
    status_url = response.headers["Azure-AsyncOperation"]
    arm.reopen()
    assert arm.follow(status_url).json()["status"] == "InProgress"
    arm.advance(minutes=25)
    arm.reopen()
    assert arm.follow(status_url).json()["status"] == "Succeeded"


def test_unknown_or_tampered_operations_are_not_found(arm):
    status_url = arm.call("POST", f"{VMS}/solo/restart").headers["Azure-AsyncOperation"]
    operation_id = status_url.split("/")[-1].split("?")[0]
    base = f"/subscriptions/{SUB}/providers/Microsoft.Compute/locations/westeurope/operations"
    for bad in ("nope", operation_id.replace(operation_id[0], "9", 1), "1-2-3-4-5", "0-0-0-zzzz"):
        response = arm.call("GET", f"{base}/{bad}")
        assert response.status_code == 404, bad
        assert error_of(response)["code"] == "NotFound"


def test_canceled_event_cancels_the_operation(arm):
    response = arm.call("POST", f"{VMS}/solo/restart")
    [event] = arm.live("solo")
    azure_commands.cancel(arm.service, event.event_id)
    status = arm.follow(response.headers["Azure-AsyncOperation"]).json()
    assert status["status"] == "Canceled" and status["error"]["code"] == "OperationCanceled"
    assert arm.follow(response.headers["Location"]).status_code == 409


def test_delete_of_a_standalone_vm_is_unannounced_and_done_at_once(arm):
    response = arm.call("DELETE", f"{VMS}/solo")
    assert response.status_code == 202
    assert arm.live("solo") == []
    assert arm.service.settled_engine().component(AzureComponent).vm_states["solo"].deleted
    assert arm.follow(response.headers["Azure-AsyncOperation"]).json()["status"] == "Succeeded"
    assert arm.call("GET", f"{VMS}/solo").status_code == 404
    assert arm.call("DELETE", f"{VMS}/solo").status_code == 204  # ARM RPC: deleting what is gone
    assert arm.call("POST", f"{VMS}/solo/restart").status_code == 404


# ----------------------------------------------------------------------------------------------------- policies
def test_policy_is_set_on_the_availability_set_and_refused_on_its_members(arm):
    body = {"properties": {"scheduledEventsPolicy": {"userInitiatedRedeploy": {"automaticallyApprove": True}}}}
    response = arm.call("PATCH", f"{AVSETS}/westno", body)
    assert response.status_code == 200, response.text
    assert response.json()["properties"]["scheduledEventsPolicy"] == {
        "userInitiatedRedeploy": {"automaticallyApprove": True},
        "userInitiatedReboot": {"automaticallyApprove": True},  # unchanged: PATCH merges
    }
    owner = azure_fleet(arm.service.settled_engine().fleet).vm("WestNO_0").policy_owner
    assert arm.service.settled_engine().component(AzureComponent).policies[owner].auto_approve_redeploy

    response = arm.call("PATCH", f"{VMS}/WestNO_1", body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "InvalidParameter"
    assert "availability set 'westno'" in error["message"] and "all its members" in error["message"]

    arm.call("POST", f"{VMS}/WestNO_1/redeploy")
    [event] = arm.live("WestNO_1")
    assert (event.event_type, event.status) == (EventType.REDEPLOY, EventStatus.STARTED)

    response = arm.call("PUT", f"{VMSS}/web/virtualMachines/0", body)
    assert response.status_code == 400 and "scale set 'web'" in error_of(response)["message"]

    response = arm.call(
        "PATCH",
        f"{VMS}/solo",
        {"properties": {"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": True}}}},
    )
    assert response.status_code == 200
    assert response.json()["properties"]["scheduledEventsPolicy"]["userInitiatedReboot"] == {
        "automaticallyApprove": True
    }


def test_policy_needs_api_version_2024_03_01(arm):
    body = {"properties": {"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": False}}}}
    response = arm.call("PATCH", f"{AVSETS}/westno", body, api="2023-09-01")
    assert response.status_code == 400
    assert error_of(response) == {
        "code": "BadRequest",
        "message": "Could not find member 'scheduledEventsPolicy' on object of type 'AvailabilitySetProperties'. "
        "Path 'properties.scheduledEventsPolicy'.",
    }
    owner = azure_fleet(arm.service.settled_engine().fleet).vm("WestNO_0").policy_owner
    assert arm.service.settled_engine().component(AzureComponent).policies[owner].auto_approve_reboot  # unchanged


def test_central_publishing_opt_in_applies_to_new_events(arm):
    """From "Scheduled Events in Event Grid": scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph, from api-version 2025-04-01,
    with 2020-07-01 the only events api-version."""
    targets = {
        "scheduledEventsAdditionalPublishingTargets": {
            "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": "2020-07-01"}
        }
    }
    engine = arm.service.settled_engine()
    owner = azure_fleet(engine.fleet).vm("web_0").policy_owner
    older = arm.call("PATCH", f"{VMSS}/web", {"properties": {"scheduledEventsPolicy": targets}}, api="2024-11-01")
    assert older.status_code == 400 and error_of(older)["code"] == "BadRequest"
    assert "scheduledEventsAdditionalPublishingTargets" in error_of(older)["message"]
    wrong = {
        "scheduledEventsAdditionalPublishingTargets": {
            "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": "2019-08-01"}
        }
    }
    refused = arm.call("PATCH", f"{VMSS}/web", {"properties": {"scheduledEventsPolicy": wrong}}, api="2025-04-01")
    assert refused.status_code == 400 and error_of(refused)["code"] == "InvalidParameter"
    assert not engine.component(AzureComponent).policies[owner].publish_central

    before = azure_commands.schedule(arm.service, ScheduleRequest(EventType.FREEZE, vms=("web_0",)))
    response = arm.call("PATCH", f"{VMSS}/web", {"properties": {"scheduledEventsPolicy": targets}}, api="2025-04-01")
    assert response.status_code == 200, response.text
    assert (
        response.json()["properties"]["scheduledEventsPolicy"]["scheduledEventsAdditionalPublishingTargets"]
        == targets["scheduledEventsAdditionalPublishingTargets"]
    )
    after = azure_commands.schedule(arm.service, ScheduleRequest(EventType.FREEZE, vms=("web_1",)))
    assert [e.central for e in before] == [False] and [e.central for e in after] == [True]


# --------------------------------------------------------------------------------------- notification profiles (002)
def terminate_profile(timeout: str, enable: bool = True) -> dict:
    return {
        "properties": {
            "virtualMachineProfile": {
                "scheduledEventsProfile": {
                    "terminateNotificationProfile": {"notBeforeTimeout": timeout, "enable": enable}
                }
            }
        }
    }


def test_terminate_timeout_must_be_between_5_and_15_minutes(arm):
    for timeout in ("PT4M", "PT16M"):
        response = arm.call("PUT", f"{VMSS}/workers", terminate_profile(timeout))
        assert response.status_code == 400, response.text
        error = error_of(response)
        assert error["code"] == "InvalidParameter" and "between PT5M and PT15M" in error["message"]
    response = arm.call("PUT", f"{VMSS}/workers", terminate_profile("PT15M"))
    assert response.status_code == 200
    assert response.json()["properties"]["virtualMachineProfile"]["scheduledEventsProfile"][
        "terminateNotificationProfile"
    ] == {"notBeforeTimeout": "PT15M", "enable": True}


def test_scheduled_events_profile_needs_api_version_2019_03_01(arm):
    """From "Terminate notification for Azure Virtual Machine Scale Set instances", troubleshooting: 'BadRequest' with "Could not find member 'scheduledEventsProfile' on object of type
    'VirtualMachineProfile'" on an older api-version."""
    response = arm.call("PUT", f"{VMSS}/workers", terminate_profile("PT5M"), api="2018-10-01")
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "BadRequest"
    assert error["message"].startswith(
        "Could not find member 'scheduledEventsProfile' on object of type 'VirtualMachineProfile'."
    )
    assert arm.call("PUT", f"{VMSS}/workers", terminate_profile("PT5M"), api="2019-03-01").status_code == 200
    body = {
        "properties": {
            "virtualMachineProfile": {"scheduledEventsProfile": {"osImageNotificationProfile": {"enable": True}}}
        }
    }
    response = arm.call("PATCH", f"{VMSS}/workers", body, api="2021-03-01")
    assert response.status_code == 400 and "'osImageNotificationProfile'" in error_of(response)["message"]


def test_terminate_notifications_are_refused_on_spot(arm):
    response = arm.call("PATCH", f"{VMSS}/spotset", terminate_profile("PT5M"))
    assert response.status_code == 400 and "Spot" in error_of(response)["message"]


def test_os_image_notifications_refused_on_m_series_and_need_pt15m(arm):
    body = {
        "properties": {
            "virtualMachineProfile": {"scheduledEventsProfile": {"osImageNotificationProfile": {"enable": True}}}
        }
    }
    response = arm.call("PATCH", f"{VMSS}/bigmem", body)
    assert response.status_code == 400 and "Standard_M8ms" in error_of(response)["message"]
    body["properties"]["virtualMachineProfile"]["scheduledEventsProfile"]["osImageNotificationProfile"][
        "notBeforeTimeout"
    ] = "PT10M"
    response = arm.call("PATCH", f"{VMSS}/workers", body)
    assert response.status_code == 400 and "PT15M" in error_of(response)["message"]
    del body["properties"]["virtualMachineProfile"]["scheduledEventsProfile"]["osImageNotificationProfile"][
        "notBeforeTimeout"
    ]
    response = arm.call("PATCH", f"{VMSS}/workers", body)  # enable alone takes PT15M
    assert response.status_code == 200, response.text


def test_manual_upgrade_then_delete_announces_one_terminate_per_vm(arm):
    """From "Terminate notification for Azure Virtual Machine Scale Set instances": change the model's timeout, update the instances to the latest model, then delete them: one Terminate
    event per VM, NotBefore = now + the new timeout."""
    assert arm.call("PATCH", f"{VMSS}/web", terminate_profile("PT10M")).status_code == 200
    instances = arm.call("GET", f"{VMSS}/web/virtualMachines").json()["value"]
    assert [i["properties"]["latestModelApplied"] for i in instances] == [False, False, False]

    response = arm.call("POST", f"{VMSS}/web/manualupgrade", {"instanceIds": ["0", "1"]})
    assert response.status_code == 202
    assert arm.follow(response.headers["Azure-AsyncOperation"]).json()["status"] == "Succeeded"
    instances = arm.call("GET", f"{VMSS}/web/virtualMachines").json()["value"]
    assert [i["properties"]["latestModelApplied"] for i in instances] == [True, True, False]

    arm.advance(minutes=1)
    now = T0 + timedelta(minutes=1)
    response = arm.call("POST", f"{VMSS}/web/delete", {"instanceIds": ["0", "1", "2"]})
    assert response.status_code == 202
    terminates = [e for e in arm.live("web_0") if e.event_type is EventType.TERMINATE]
    by_vm = {e.resources: e for e in terminates}
    assert set(by_vm) == {("web_0",), ("web_1",), ("web_2",)}  # one event per VM
    assert by_vm[("web_0",)].not_before == now + timedelta(minutes=10)
    assert by_vm[("web_1",)].not_before == now + timedelta(minutes=10)
    assert by_vm[("web_2",)].not_before == now + timedelta(minutes=5)  # still on the old model
    assert all(e.status is EventStatus.SCHEDULED for e in terminates)

    instance = arm.call("GET", f"{VMSS}/web/virtualMachines/0").json()
    assert instance["properties"]["provisioningState"] == "Deleting"
    assert arm.call("GET", f"{VMSS}/web").json()["sku"]["capacity"] == 0
    response_restart = arm.call("POST", f"{VMSS}/web/virtualMachines/0/restart")
    assert response_restart.status_code == 409
    assert "marked for deletion" in error_of(response_restart)["message"]
    # Deleting again is accepted and tracks the same events.
    again = arm.call("DELETE", f"{VMSS}/web/virtualMachines/0")
    assert again.status_code == 202
    assert arm.follow(again.headers["Azure-AsyncOperation"]).json()["status"] == "InProgress"

    status_url = response.headers["Azure-AsyncOperation"]
    arm.advance(minutes=10)  # all NotBefore passed: the batch started, the VMs are deleted
    assert all(arm.service.settled_engine().component(AzureComponent).vm_states[f"web_{i}"].deleted for i in range(3))
    assert arm.call("GET", f"{VMSS}/web/virtualMachines/0").status_code == 404
    assert arm.follow(status_url).json()["status"] == "InProgress"  # the events are Started until their window ends
    arm.advance(minutes=10)
    assert arm.follow(status_url).json()["status"] == "Succeeded"
    assert arm.follow(again.headers["Azure-AsyncOperation"]).json()["status"] == "Succeeded"
    assert arm.call("DELETE", f"{VMSS}/web/virtualMachines/0").status_code == 204
    response = arm.call("POST", f"{VMSS}/web/delete", {"instanceIds": ["0"]})
    assert response.status_code == 400
    assert error_of(response)["message"] == (
        "The provided instanceId 0 is not an active Virtual Machine Scale Set VM instanceId."
    )


def test_scale_in_through_capacity(arm):
    response = arm.call("PATCH", f"{VMSS}/web", {"sku": {"capacity": 1}})
    assert response.status_code == 202, response.text
    assert "Azure-AsyncOperation" in response.headers
    terminates = sorted(e.resources[0] for e in arm.live("web_0") if e.event_type is EventType.TERMINATE)
    assert terminates == ["web_1", "web_2"]  # the highest instance ids go first
    assert all(e.not_before == T0 + timedelta(minutes=5) for e in arm.live("web_0"))
    assert arm.call("GET", f"{VMSS}/web").json()["sku"]["capacity"] == 1
    # The same capacity again changes nothing.
    assert arm.call("PATCH", f"{VMSS}/web", {"sku": {"capacity": 1}}).status_code == 200
    # Without a terminate profile, instances go at once and the operation is done.
    response = arm.call("PUT", f"{VMSS}/workers", {"sku": {"capacity": 0}})
    assert response.status_code == 202
    assert all(
        arm.service.settled_engine().component(AzureComponent).vm_states[f"workers_{i}"].deleted for i in range(2)
    )
    assert arm.follow(response.headers["Azure-AsyncOperation"]).json()["status"] == "Succeeded"


def test_a_refused_step_leaves_nothing_changed(arm):
    """A PATCH with a valid profile and an impossible capacity is refused as a whole."""
    body = terminate_profile("PT12M")
    body["sku"] = {"capacity": 9}
    assert arm.call("PATCH", f"{VMSS}/web", body).status_code == 409
    owner = azure_fleet(arm.service.settled_engine().fleet).vm("web_0").policy_owner
    assert arm.service.settled_engine().component(AzureComponent).policies[
        owner
    ].terminate.not_before_timeout == timedelta(minutes=5)


def test_a_step_refused_after_another_changed_the_engine_is_rolled_back(arm, monkeypatch):
    """The policy step ran, then the engine refused the scale-in: the service rebuilds its engine from the database,
    so the uncommitted policy change is gone."""
    from forewarn.core.errors import Invalid

    def refuse(scale_set, count):
        raise Invalid("no scale-in today")

    monkeypatch.setattr(arm.service.settled_engine().component(AzureComponent), "scale_in", refuse)
    body = terminate_profile("PT12M")
    body["sku"] = {"capacity": 1}
    response = arm.call("PATCH", f"{VMSS}/web", body)
    assert response.status_code == 400 and error_of(response)["message"] == "no scale-in today"
    owner = azure_fleet(arm.service.settled_engine().fleet).vm("web_0").policy_owner
    assert arm.service.settled_engine().component(AzureComponent).policies[
        owner
    ].terminate.not_before_timeout == timedelta(minutes=5)
    assert (
        arm.call("GET", f"{VMSS}/web").json()["properties"]["virtualMachineProfile"]["scheduledEventsProfile"][
            "terminateNotificationProfile"
        ]["notBeforeTimeout"]
        == "PT5M"
    )


def test_reimage_is_announced_only_with_the_os_image_profile(arm):
    response = arm.call("POST", f"{VMSS}/web/virtualMachines/1/reimage")
    assert response.status_code == 202
    [event] = arm.live("web_1")
    assert (event.event_type, event.status, event.resources) == (EventType.REBOOT, EventStatus.SCHEDULED, ("web_1",))
    assert event.not_before == T0 + timedelta(minutes=15)

    response = arm.call("POST", f"{VMSS}/workers/reimage", {"instanceIds": ["0"]})
    assert response.status_code == 202
    assert arm.live("workers_0") == []  # no OS image profile: unannounced
    assert arm.service.settled_engine().component(AzureComponent).vm_states["workers_0"].power is Power.REIMAGING
    status_url = response.headers["Azure-AsyncOperation"]
    assert arm.follow(status_url).json()["status"] == "InProgress"
    arm.advance(minutes=2)
    assert arm.service.settled_engine().component(AzureComponent).vm_states["workers_0"].power is Power.RUNNING
    assert arm.follow(status_url).json()["status"] == "Succeeded"


def test_scale_set_restart_of_all_instances_is_one_command(arm):
    arm.call(
        "PATCH",
        f"{VMSS}/workers",
        {"properties": {"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": True}}}},
    )
    response = arm.call("POST", f"{VMSS}/workers/restart")
    assert response.status_code == 202
    [event] = arm.live("workers_0")  # same host, same scope: one event for both
    assert event.status is EventStatus.STARTED and set(event.resources) == {"workers_0", "workers_1"}
