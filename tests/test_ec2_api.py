"""The EC2 Query API (DescribeInstanceStatus, ModifyInstanceEventStartTime; seed 004, reference aws.md 2.1-2.3, 2.6):
the wire in-process over httpx's ASGI transport (exact XML elements and error codes), then real boto3 and the aws CLI
against a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from forewarn.core.ec2 import Ec2Code
from forewarn.core.ec2_engine import Ec2EventChanged, Ec2Request
from forewarn.fleetfile import parse_fleet
from forewarn.service.runtime import Maintenance
from forewarn.store import open_store
from forewarn.surfaces.ec2_api import NAMESPACE, availability_zone_id, create_ec2_app
from helpers import T0, free_port

EBS = "i-0aaaaaaaaaaaaaaa1"
STORE = "i-0bbbbbbbbbbbbbbb2"
ASG = "i-0ccccccccccccccc3"
SPOT = "i-0ddddddddddddddd4"
MORE = [f"i-0e{n:015x}" for n in range(1, 9)]  # 8 more: 12 instances in us-east-1
WEST = "i-0fffffffffffffff9"  # us-west-2
FLEET = f"""
hosts: [{{name: h1}}, {{name: h2}}, {{name: h3}}]
ec2_instances:
  - {{id: {EBS}, host: h1, name: db}}
  - {{id: {STORE}, host: h1, root_device: instance-store}}
  - {{id: {ASG}, host: h2, auto_scaling_group: web-asg}}
  - {{id: {SPOT}, host: h3, spot: true}}
""" + "".join(f"  - {{id: {iid}, host: h2, availability_zone: us-east-1b}}\n" for iid in MORE) + \
    f"  - {{id: {WEST}, host: h3, availability_zone: us-west-2c}}\n"
EAST = sorted([EBS, STORE, ASG, SPOT] + MORE)
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def open_service(path, fleet: str = FLEET) -> Maintenance:
    return Maintenance.open(open_store(str(path)), parse_fleet(fleet), "manual", 1.0, T0, "seed")


def schedule(service: Maintenance, code: str, *instances: str, **fields):
    changes = service.perform(lambda engine: engine.schedule_ec2(Ec2Request(Ec2Code(code), instances, **fields)))
    events = [c.event for c in changes if isinstance(c, Ec2EventChanged)]
    return events[0] if len(events) == 1 else events


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


# ---------------------------------------------------------------------------------------------- in-process wire
class Wire:
    """The app over a service with a manual clock, called synchronously over httpx's ASGI transport."""

    def __init__(self, service: Maintenance):
        self.service = service
        self.app = create_ec2_app(service)

    def raw(self, method: str = "POST", data=None, query=None, headers=None, content=None,
            path: str = "/") -> httpx.Response:
        async def run():
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://ec2.test") as client:
                return await client.request(method, path, data=data, params=query, headers=headers, content=content)

        return asyncio.run(run())

    def call(self, action: str | None = "DescribeInstanceStatus", version: str | None = "2016-11-15",
             headers=None, **params) -> httpx.Response:
        data = {}
        if action is not None:
            data["Action"] = action
        if version is not None:
            data["Version"] = version
        data.update({key.replace("_", "."): str(value) for key, value in params.items()})
        return self.raw(data=data, headers=headers)

    def describe(self, **params) -> dict[str, ET.Element]:
        response = self.call(**params)
        assert response.status_code == 200, response.text
        root = ET.fromstring(response.content)
        return {q(item, "instanceId").text: item for item in root.iterfind(f"{{{NAMESPACE}}}instanceStatusSet/"
                                                                          f"{{{NAMESPACE}}}item")}


def q(element: ET.Element, path: str) -> ET.Element | None:
    return element.find("/".join(f"{{{NAMESPACE}}}{part}" for part in path.split("/")))


def names(element: ET.Element) -> list[str]:
    return [child.tag.split("}")[-1] for child in element]


def error(response: httpx.Response, status: int = 400) -> tuple[str, str]:
    """(Code, Message) of an EC2 error, after checking its exact shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "text/xml;charset=UTF-8"
    root = ET.fromstring(response.content)
    assert root.tag == "Response" and names(root) == ["Errors", "RequestID"]
    assert names(root.find("Errors")) == ["Error"] and names(root.find("Errors/Error")) == ["Code", "Message"]
    assert UUID.match(root.find("RequestID").text)
    assert root.find("RequestID").text == response.headers["x-amzn-requestid"]
    return root.find("Errors/Error/Code").text, root.find("Errors/Error/Message").text


@pytest.fixture
def wire(tmp_path):
    service = open_service(tmp_path / "ec2.db")
    yield Wire(service)
    service.store.close()


def test_describe_instance_status_wire_shape(wire):
    reboot = schedule(wire.service, "system-reboot", EBS)
    retire = schedule(wire.service, "instance-retirement", STORE, notice=timedelta(days=3))
    response = wire.call(InstanceId_1=EBS, InstanceId_2=STORE)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/xml;charset=UTF-8"
    assert response.text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstanceStatusResponse '
                                    'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">')
    root = ET.fromstring(response.content)
    assert names(root) == ["requestId", "instanceStatusSet"]  # no nextToken on the last page
    assert UUID.match(q(root, "requestId").text) and q(root, "requestId").text == response.headers["x-amzn-requestid"]
    ebs, store = list(q(root, "instanceStatusSet"))
    assert names(ebs) == ["instanceId", "availabilityZone", "availabilityZoneId", "operator", "instanceState",
                          "systemStatus", "instanceStatus", "attachedEbsStatus", "eventsSet"]
    assert (q(ebs, "instanceId").text, q(ebs, "availabilityZone").text, q(ebs, "availabilityZoneId").text) == \
        (EBS, "us-east-1a", "use1-az1")
    assert q(ebs, "operator/managed").text == "false"
    assert (q(ebs, "instanceState/code").text, q(ebs, "instanceState/name").text) == ("16", "running")
    for check in ("systemStatus", "instanceStatus", "attachedEbsStatus"):
        assert names(q(ebs, check)) == ["status", "details"]
        assert q(ebs, f"{check}/status").text == "ok"
        assert names(q(ebs, f"{check}/details/item")) == ["name", "status"]
        assert (q(ebs, f"{check}/details/item/name").text, q(ebs, f"{check}/details/item/status").text) == \
            ("reachability", "passed")
    [event] = list(q(ebs, "eventsSet"))
    assert names(event) == ["instanceEventId", "code", "description", "notBefore", "notAfter", "notBeforeDeadline"]
    assert [child.text for child in event] == [
        reboot.event_id, "system-reboot", "The instance is scheduled for a reboot", "2026-05-04T22:11:58.000Z",
        "2026-05-05T00:11:58.000Z", "2026-05-25T22:11:58.000Z"]
    # An instance-store root has no EBS to check; the retirement has neither NotAfter nor a deadline.
    assert q(store, "attachedEbsStatus/status").text == "not-applicable"
    assert names(q(store, "attachedEbsStatus")) == ["status"]
    [event] = list(q(store, "eventsSet"))
    assert names(event) == ["instanceEventId", "code", "description", "notBefore"]
    assert q(event, "instanceEventId").text == retire.event_id and q(event, "notBefore").text == iso(retire.not_before)
    # Instances without events have no eventsSet at all; all 12 in us-east-1 and the us-west-2 one (unsigned).
    items = wire.describe()
    assert sorted(items) == sorted(EAST + [WEST]) and list(items) == sorted(items)
    assert q(items[ASG], "eventsSet") is None
    assert q(items[WEST], "availabilityZoneId").text == "usw2-az3"
    assert q(items[MORE[0]], "availabilityZoneId").text == "use1-az2"


def test_get_with_query_string_and_protocol_errors(wire):
    response = wire.raw("GET", query={"Action": "DescribeInstanceStatus", "Version": "2016-11-15",
                                      "InstanceId.1": EBS})
    assert response.status_code == 200 and EBS in response.text
    assert error(wire.call(action=None)) == ("MissingAction", "The request must contain the parameter Action")
    assert error(wire.raw("GET")) == ("MissingAction", "The request must contain the parameter Action")
    assert error(wire.call("DescribeInstances")) == (
        "InvalidAction", "The action DescribeInstances is not valid for this web service.")
    assert error(wire.call(version=None)) == ("MissingParameter", "The request must contain the parameter Version")
    assert error(wire.call(version="2014-10-01")) == (
        "NoSuchVersion", "The requested version (2014-10-01) of service AmazonEC2 does not exist")
    assert error(wire.call(InstanceIds_1=EBS)) == ("UnknownParameter", "The parameter InstanceIds.1 is not recognized")
    assert error(wire.call(dryRun="true")) == ("UnknownParameter", "The parameter dryRun is not recognized")
    assert error(wire.call("ModifyInstanceEventStartTime", MaxResults=5)) == (
        "UnknownParameter", "The parameter MaxResults is not recognized")
    assert error(wire.call(DryRun="maybe"))[0] == "InvalidParameterValue"
    # Signing parameters (SigV2, presigned SigV4) are not unknown parameters.
    response = wire.call(**{"AWSAccessKeyId": "x", "SignatureVersion": "2", "X-Amz-Date": "20260420T221158Z"})
    assert response.status_code == 200
    assert error(wire.raw("PUT", content=b"Action=DescribeInstanceStatus"), 405)[0] == "MethodNotAllowed"
    # Any path serves the API (an endpoint URL may carry a path).
    assert wire.raw(data={"Action": "DescribeInstanceStatus", "Version": "2016-11-15"}, path="/prefix/").status_code \
        == 200


def test_instance_ids(wire):
    assert error(wire.call(InstanceId_1="i-123")) == ("InvalidInstanceID.Malformed", 'Invalid id: "i-123"')
    assert error(wire.call(InstanceId_1=EBS, InstanceId_2="web-1")) == (
        "InvalidInstanceID.Malformed", 'Invalid id: "web-1"')
    assert error(wire.call(InstanceId_1="i-0eeeeeeeeeeeeeee5")) == (
        "InvalidInstanceID.NotFound", "The instance ID 'i-0eeeeeeeeeeeeeee5' does not exist")
    assert error(wire.call(InstanceId_1="i-0eeeeeeeeeeeeeee5", InstanceId_2=EBS, InstanceId_3="i-1a2b3c4d")) == (
        "InvalidInstanceID.NotFound", "The instance IDs 'i-0eeeeeeeeeeeeeee5, i-1a2b3c4d' do not exist")
    many = {f"InstanceId_{n}": f"i-{n:017x}" for n in range(1, 102)}
    assert error(wire.call(**many)) == (
        "InvalidRequest", "101 exceeds the maximum number of instance IDs that can be specificied (100). Please "
        "specify fewer than 100 instance IDs.")
    assert list(wire.describe(InstanceId_1=EBS, InstanceId_2=EBS, InstanceId_3=SPOT)) == [EBS, SPOT]
    assert error(wire.call(InstanceId_1=EBS, MaxResults=5)) == (
        "InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")


def test_filters_on_the_wire(wire):
    reboot = schedule(wire.service, "system-reboot", EBS)
    maintenance = schedule(wire.service, "system-maintenance", SPOT, notice=timedelta(hours=2))
    canceled = schedule(wire.service, "instance-reboot", STORE, notice=timedelta(hours=3))
    wire.service.perform(lambda engine: engine.cancel_ec2(canceled.event_id))

    def ids(*filters, **more):
        params = dict(more)
        for n, (name, *values) in enumerate(filters, 1):
            params[f"Filter_{n}_Name"] = name
            for m, value in enumerate(values, 1):
                params[f"Filter_{n}_Value_{m}"] = value
        return sorted(wire.describe(**params))

    assert ids(("event.code", "system-reboot", "system-maintenance")) == [EBS, SPOT]  # OR within a filter
    assert ids(("event.code", "system-reboot", "system-maintenance"), ("availability-zone", "us-east-1a")) == \
        [EBS, SPOT]
    assert ids(("event.code", "system-reboot"), ("event.instance-event-id", maintenance.event_id)) == []  # AND
    assert ids(("event.description", "[Canceled] *")) == [STORE]  # shown descriptions, wildcards
    assert ids(("event.description", "*scheduled for a reboot")) == [EBS, STORE]
    assert ids(("event.description", r"\[Canceled\] The instance is scheduled for a reboot")) == [STORE]
    assert ids(("event.description", "The instance is scheduled for a reboo?")) == [EBS]
    assert ids(("event.description", "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*z")) == []
    assert ids(("event.description", "**The*instance*is*?*")) == [EBS, STORE, SPOT]
    assert ids(("event.not-before", iso(reboot.not_before))) == [EBS]
    assert ids(("event.not-before", "2026-05-04T22:11:58Z")) == [EBS]  # compared as an instant
    assert ids(("event.not-before", "2026-05-04T23:11:58+01:00")) == [EBS]
    assert ids(("event.not-before", "2026-05-04*")) == [EBS]
    assert ids(("event.not-after", iso(maintenance.not_after))) == [SPOT]
    assert ids(("event.not-before-deadline", iso(reboot.not_before_deadline))) == [EBS]
    assert ids(("event.not-before-deadline", "yesterday")) == []
    assert ids(("availability-zone-id", "use1-az2")) == MORE
    assert ids(("availability-zone", "us-east-1?"), ("instance-state-code", "16")) == EAST
    assert ids(("operator.managed", "true")) == [] and ids(("operator.principal", "*")) == []
    assert ids(("event.code", "instance-stop")) == []
    assert ids(("event.code",)) == []  # a filter without values matches nothing
    assert error(wire.call(Filter_1_Name="tag:Name", Filter_1_Value_1="db")) == (
        "InvalidParameterValue", "The filter 'tag:Name' is invalid")
    assert error(wire.call(Filter_1_Name="event.code", Filter_2_Value_1="x")) == (
        "MissingParameter", "The request must contain the parameter Filter.2.Name")
    assert error(wire.call(Filter_1_Name="Event.Code", Filter_1_Value_1="x"))[0] == "InvalidParameterValue"


def test_max_results_and_next_token(wire):
    for value, message in (("4", "Value ( 4 ) for parameter maxResults is invalid. Expecting a value greater than 5."),
                           ("1001", "Value ( 1001 ) for parameter maxResults is invalid. Expecting a value less than "
                                    "or equal to 1000."),
                           ("five", "Value (five) for parameter maxResults is invalid. Expecting an integer.")):
        assert error(wire.call(MaxResults=value)) == ("InvalidParameterValue", message)
    first = ET.fromstring(wire.call(MaxResults=5).content)
    token = q(first, "nextToken").text
    assert ET.fromstring(wire.call(MaxResults=5).content).find(f"{{{NAMESPACE}}}nextToken").text == token  # stable
    second = wire.describe(MaxResults=5, NextToken=token)
    assert list(second) == sorted(EAST + [WEST])[5:10]
    assert list(wire.describe(MaxResults=1000, NextToken=token)) == sorted(EAST + [WEST])[5:]
    assert list(wire.describe(NextToken="")) == sorted(EAST + [WEST])  # an empty token is no token
    invalid = ("InvalidNextToken", "The specified NextToken is not valid.")
    assert error(wire.call(MaxResults=5, NextToken="garbage!")) == invalid
    assert error(wire.call(MaxResults=5, NextToken=base64.urlsafe_b64encode(b"1|i-0|x|y").decode())) == invalid
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    forged = base64.urlsafe_b64encode(raw.replace(raw.split("|")[1], "i-00000000000000000").encode()).decode()
    assert error(wire.call(MaxResults=5, NextToken=forged)) == invalid
    # A token belongs to its query: the same filters and IncludeAllInstances.
    assert error(wire.call(MaxResults=5, NextToken=token, IncludeAllInstances="true")) == invalid
    assert error(wire.call(MaxResults=5, NextToken=token, Filter_1_Name="availability-zone",
                           Filter_1_Value_1="us-east-1a")) == invalid


def test_status_checks_follow_the_impact(wire):
    reboot = schedule(wire.service, "system-reboot", EBS, notice=timedelta(minutes=10))
    schedule(wire.service, "system-maintenance", SPOT, notice=timedelta(minutes=10))
    wire.service.advance_clock(timedelta(minutes=11))  # both in progress (reboot 5 min, maintenance 2 min)
    items = wire.describe(InstanceId_1=EBS, InstanceId_2=SPOT)
    ebs, spot = items[EBS], items[SPOT]
    assert q(ebs, "systemStatus/status").text == "impaired"
    assert names(q(ebs, "systemStatus/details/item")) == ["name", "status", "impairedSince"]
    assert q(ebs, "systemStatus/details/item/status").text == "failed"
    assert q(ebs, "systemStatus/details/item/impairedSince").text == iso(T0 + timedelta(minutes=10))
    assert q(ebs, "instanceStatus/status").text == "initializing"  # the reboot: the OS is coming up
    assert q(ebs, "instanceStatus/details/item/status").text == "initializing"
    assert q(ebs, "attachedEbsStatus/status").text == "ok"
    assert q(ebs, "eventsSet/item/description").text == reboot.description  # active while in progress
    assert q(spot, "instanceStatus/status").text == "impaired"  # maintenance: unreachable, no reboot
    assert q(spot, "instanceStatus/details/item/status").text == "failed"
    ids = lambda name, value: sorted(wire.describe(Filter_1_Name=name, Filter_1_Value_1=value))  # noqa: E731
    assert ids("system-status.status", "impaired") == [EBS, SPOT]
    assert ids("system-status.reachability", "failed") == [EBS, SPOT]
    assert ids("instance-status.status", "initializing") == [EBS]
    assert ids("instance-status.reachability", "failed") == [SPOT]
    wire.service.advance_clock(timedelta(minutes=5))
    ebs = wire.describe(InstanceId_1=EBS)[EBS]
    assert [q(ebs, f"{check}/status").text for check in ("systemStatus", "instanceStatus")] == ["ok", "ok"]
    assert q(ebs, "eventsSet/item/description").text == "[Completed] The instance is scheduled for a reboot"


def test_completed_and_canceled_events_stay_a_week(wire):
    done = schedule(wire.service, "instance-reboot", EBS, notice=timedelta(minutes=1))
    gone = schedule(wire.service, "system-reboot", EBS, notice=timedelta(days=1))
    wire.service.perform(lambda engine: engine.cancel_ec2(gone.event_id))
    wire.service.advance_clock(timedelta(minutes=2))  # the reboot is done (30 s)
    events = list(q(wire.describe(InstanceId_1=EBS)[EBS], "eventsSet"))
    assert [(q(e, "instanceEventId").text, q(e, "description").text) for e in events] == [
        (done.event_id, "[Completed] The instance is scheduled for a reboot"),
        (gone.event_id, "[Canceled] The instance is scheduled for a reboot")]
    wire.service.advance_clock(timedelta(days=7) - timedelta(minutes=1))  # a week after the cancellation
    assert len(q(wire.describe(InstanceId_1=EBS)[EBS], "eventsSet")) == 1  # the completion is 90 s younger
    wire.service.advance_clock(timedelta(minutes=1))
    assert q(wire.describe(InstanceId_1=EBS)[EBS], "eventsSet") is None


def test_stopped_and_terminated_instances(wire):
    schedule(wire.service, "instance-retirement", EBS, STORE, notice=timedelta(minutes=5))
    wire.service.advance_clock(timedelta(minutes=5))
    assert EBS not in wire.describe() and STORE not in wire.describe()  # running instances only
    assert wire.describe(InstanceId_1=EBS) == {}  # known, but not running: no error, no item
    items = wire.describe(IncludeAllInstances="true")
    ebs, store = items[EBS], items[STORE]
    assert (q(ebs, "instanceState/code").text, q(ebs, "instanceState/name").text) == ("80", "stopped")
    assert (q(store, "instanceState/code").text, q(store, "instanceState/name").text) == ("48", "terminated")
    for item in (ebs, store):
        for check in ("systemStatus", "instanceStatus", "attachedEbsStatus"):
            assert names(q(item, check)) == ["status"] and q(item, f"{check}/status").text == "not-applicable"
    assert sorted(wire.describe(IncludeAllInstances="true", Filter_1_Name="instance-state-name",
                                Filter_1_Value_1="stopped", Filter_1_Value_2="terminated")) == [EBS, STORE]
    assert list(wire.describe(IncludeAllInstances="true", Filter_1_Name="instance-state-code",
                              Filter_1_Value_1="48")) == [STORE]
    # A terminated instance is visible for an hour, then it no longer exists.
    wire.service.advance_clock(timedelta(minutes=60))
    assert STORE in wire.describe(IncludeAllInstances="true", InstanceId_1=STORE)
    wire.service.advance_clock(timedelta(seconds=1))
    assert STORE not in wire.describe(IncludeAllInstances="true")
    assert error(wire.call(IncludeAllInstances="true", InstanceId_1=STORE))[0] == "InvalidInstanceID.NotFound"
    assert EBS in wire.describe(IncludeAllInstances="true")  # stopped instances stay


def test_auto_scaling_replacement_appears(wire):
    schedule(wire.service, "instance-retirement", ASG, notice=timedelta(minutes=1))
    wire.service.advance_clock(timedelta(minutes=1))
    [replacement] = [s.instance_id for s in wire.service.engine.ec2_states.values() if s.origin == ASG]
    running = wire.describe()
    assert replacement in running and ASG not in running
    assert q(running[replacement], "instanceState/name").text == "running"
    assert q(wire.describe(IncludeAllInstances="true")[ASG], "instanceState/name").text == "terminated"


def test_the_signature_region_scopes_the_instances(wire):
    signed = {"Authorization": "AWS4-HMAC-SHA256 Credential=x/20260420/us-west-2/ec2/aws4_request, "
                               "SignedHeaders=host;x-amz-date, Signature=abc"}
    assert list(wire.describe(headers=signed)) == [WEST]
    assert error(wire.call(headers=signed, InstanceId_1=EBS))[0] == "InvalidInstanceID.NotFound"
    assert list(wire.describe(**{"X-Amz-Credential": "x/20260420/us-west-2/ec2/aws4_request"})) == [WEST]
    assert WEST not in wire.describe(headers={"Authorization": signed["Authorization"].replace("us-west-2",
                                                                                                "us-east-1")})


def test_modify_instance_event_start_time_wire(wire):
    event = schedule(wire.service, "system-reboot", EBS)
    new = T0 + timedelta(days=2)
    params = {"InstanceId": EBS, "InstanceEventId": event.event_id, "NotBefore": "2026-04-22T22:11:58Z"}
    for missing in params:
        given = {k: v for k, v in params.items() if k != missing}
        assert error(wire.call("ModifyInstanceEventStartTime", **given)) == (
            "MissingParameter", f"The request must contain the parameter {missing}")
    assert error(wire.call("ModifyInstanceEventStartTime", **{**params, "InstanceId": "i-bad"})) == (
        "InvalidInstanceID.Malformed", 'Invalid id: "i-bad"')
    assert error(wire.call("ModifyInstanceEventStartTime", **{**params, "NotBefore": "next tuesday"}))[0] == \
        "InvalidParameterValue"
    assert error(wire.call("ModifyInstanceEventStartTime", DryRun="true", **params), 412) == (
        "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
    assert wire.service.engine.ec2_events[event.event_id].not_before == event.not_before  # nothing changed
    response = wire.call("ModifyInstanceEventStartTime", **params)
    assert response.status_code == 200 and response.headers["content-type"] == "text/xml;charset=UTF-8"
    root = ET.fromstring(response.content)
    assert root.tag == f"{{{NAMESPACE}}}ModifyInstanceEventStartTimeResponse"
    assert names(root) == ["requestId", "event"]
    assert [child.text for child in q(root, "event")] == [
        event.event_id, "system-reboot", "The instance is scheduled for a reboot", iso(new),
        iso(new + timedelta(hours=2)), iso(event.not_before_deadline)]
    assert wire.service.engine.ec2_events[event.event_id].not_before == new  # committed
    assert q(wire.describe(InstanceId_1=EBS)[EBS], "eventsSet/item/notBefore").text == iso(new)
    code, message = error(wire.call("ModifyInstanceEventStartTime", **{**params, "NotBefore": iso(T0)}))
    assert code == "InvalidInstanceEventStartTime" and "at least 60 minutes from now" in message
    assert error(wire.call("ModifyInstanceEventStartTime", **{**params, "InstanceEventId": "instance-event-x"}))[0] \
        == "InvalidInstanceEventIDNotFound"


@pytest.mark.parametrize("request_args", [
    {"content": b"\xff\xfe\x00garbage", "headers": {"content-type": "application/x-www-form-urlencoded"}},
    {"content": b'{"Action": "DescribeInstanceStatus"}', "headers": {"content-type": "application/json"}},
    {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&Filter.1.Name=%00%ff"},
    {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&InstanceId.1=%00"},
    {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&InstanceId.99999999=i-1"},
    {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&MaxResults=99999999999999999999999"},
    {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&NextToken=%%%%"},
    {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&NextToken=" + b"A" * 5000},
    {"content": b"Action=ModifyInstanceEventStartTime&Version=2016-11-15&InstanceId=i-0aaaaaaaaaaaaaaa1"
                b"&InstanceEventId=%00&NotBefore=9999-12-31T23:59:59Z"},
    {"content": b"Action=ModifyInstanceEventStartTime&Version=2016-11-15&InstanceId=i-0aaaaaaaaaaaaaaa1"
                b"&InstanceEventId=e&NotBefore=0001-01-01T00:00:00-23:59"},
    {"content": b"Action=%E2%98%83&Version=2016-11-15"},
    {"content": b"&&&==&Action"},
    {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&" + b"&".join(b"x%d=1" % n for n in range(10001))},
])
def test_malformed_requests_are_400_never_500(wire, request_args):
    response = wire.raw(**request_args)
    assert 400 <= response.status_code < 500, response.text
    ET.fromstring(response.content)  # still well-formed XML
    assert error(response, response.status_code)


def test_describe_is_linear_in_the_fleet(tmp_path, monkeypatch):
    count = 2000
    fleet = "hosts: [{name: h1}, {name: h2}]\nec2_instances:\n" + "".join(
        f"  - {{id: i-{n:017x}, host: h{1 + n % 2}}}\n" for n in range(1, count + 1))
    service = open_service(tmp_path / "big.db", fleet)
    ids = tuple(f"i-{n:017x}" for n in range(1, count + 1, 4))
    service.perform(lambda engine: engine.schedule_ec2(Ec2Request(Ec2Code.SYSTEM_REBOOT, ids)))
    wire = Wire(service)
    api = wire.app.state.ec2
    built = []
    view = api._view
    monkeypatch.setattr(api, "_view", lambda instance_id, now: built.append(instance_id) or view(instance_id, now))
    started = time.perf_counter()
    first = ET.fromstring(wire.call().content)  # no MaxResults: pages of 1000
    elapsed = time.perf_counter() - started
    assert len(q(first, "instanceStatusSet")) == 1000 and len(built) == 1000
    token = q(first, "nextToken").text
    built.clear()
    assert len(wire.describe(MaxResults=1000, NextToken=token)) == 1000 and len(built) == 1000
    # Each instance is looked at once per request, and a token resumes by bisection, not by a scan from the start.
    built.clear()
    assert list(wire.describe(MaxResults=5, NextToken=token)) == [f"i-{n:017x}" for n in range(1001, 1006)]
    assert built == [f"i-{n:017x}" for n in range(1001, 1006)]
    built.clear()
    matched = wire.describe(MaxResults=1000, Filter_1_Name="event.code", Filter_1_Value_1="system-reboot")
    assert len(matched) == 500 and len(built) == count
    assert elapsed < 2.0, elapsed  # measured: about 0.01 s
    service.store.close()


def test_availability_zone_ids():
    assert [availability_zone_id(z) for z in ("us-east-1a", "eu-central-1c", "ap-southeast-2b", "us-gov-west-1a",
                                              "us-west-2-lax-1a", "weird")] == [
        "use1-az1", "euc1-az3", "apse2-az2", "usgw1-az1", "usw2-lax1-az1", "weird-az1"]


# --------------------------------------------------------------------------------------- boto3 over real uvicorn
class Ec2Server:
    """The app on a real uvicorn server, in a thread with its own event loop, on a free loopback port."""

    def __init__(self, service: Maintenance):
        import uvicorn

        self.service = service
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_ec2_app(service), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> Ec2Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/", timeout=1).status_code == 400:  # MissingAction: it answers
                    return self
            except httpx.TransportError:
                time.sleep(0.02)
        raise RuntimeError("the EC2 API server did not start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def client(self, region: str = "us-east-1"):
        import boto3
        from botocore.config import Config

        return boto3.client("ec2", endpoint_url=self.url, region_name=region, aws_access_key_id="x",
                            aws_secret_access_key="y", config=Config(retries={"max_attempts": 1}))


@pytest.fixture
def ec2(tmp_path):
    import boto3  # noqa: F401  (a test dependency: fail, do not skip, when it is missing)

    service = open_service(tmp_path / "boto.db")
    server = Ec2Server(service).start()
    yield server
    server.stop()
    service.store.close()


def client_error(call, *args, **kwargs):
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as raised:
        call(*args, **kwargs)
    return raised.value.response


def statuses(client, **kwargs) -> dict[str, dict]:
    return {s["InstanceId"]: s for s in client.describe_instance_status(**kwargs)["InstanceStatuses"]}


def test_boto3_describe_with_and_without_ids(ec2):
    event = schedule(ec2.service, "system-reboot", EBS)
    client = ec2.client()
    everything = statuses(client)
    assert sorted(everything) == EAST  # the client signs for us-east-1: us-west-2's instance is elsewhere
    [shown] = statuses(client, InstanceIds=[EBS])[EBS]["Events"]
    assert shown == {"InstanceEventId": event.event_id, "Code": "system-reboot",
                     "Description": "The instance is scheduled for a reboot", "NotBefore": event.not_before,
                     "NotAfter": event.not_after, "NotBeforeDeadline": event.not_before_deadline}
    ebs = everything[EBS]
    assert ebs["InstanceState"] == {"Code": 16, "Name": "running"} and ebs["Operator"] == {"Managed": False}
    assert ebs["AvailabilityZone"] == "us-east-1a" and ebs["AvailabilityZoneId"] == "use1-az1"
    assert ebs["SystemStatus"] == {"Status": "ok", "Details": [{"Name": "reachability", "Status": "passed"}]}
    assert "Events" not in everything[SPOT]
    assert sorted(statuses(ec2.client("us-west-2"))) == [WEST]
    error = client_error(client.describe_instance_status, InstanceIds=["i-0eeeeeeeeeeeeeee5"])
    assert error["Error"] == {"Code": "InvalidInstanceID.NotFound",
                              "Message": "The instance ID 'i-0eeeeeeeeeeeeeee5' does not exist"}
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400 and UUID.match(error["ResponseMetadata"]["RequestId"])
    assert client_error(client.describe_instance_status, InstanceIds=["nope"])["Error"]["Code"] == \
        "InvalidInstanceID.Malformed"
    # The waiter on InstanceStatus works against it.
    client.get_waiter("instance_status_ok").wait(InstanceIds=[EBS], WaiterConfig={"Delay": 0, "MaxAttempts": 1})


def test_boto3_include_all_instances_after_a_retirement(ec2):
    event = schedule(ec2.service, "instance-retirement", EBS, notice=timedelta(hours=1))
    client = ec2.client()
    ec2.service.advance_clock(timedelta(hours=1, minutes=2))  # stopped at NotBefore, completed a minute later
    assert EBS not in statuses(client)
    assert statuses(client, InstanceIds=[EBS]) == {}
    stopped = statuses(client, IncludeAllInstances=True)[EBS]
    assert stopped["InstanceState"] == {"Code": 80, "Name": "stopped"}
    for check in ("SystemStatus", "InstanceStatus", "AttachedEbsStatus"):
        assert stopped[check] == {"Status": "not-applicable"}
    assert stopped["Events"] == [{"InstanceEventId": event.event_id, "Code": "instance-retirement",
                                  "Description": "[Completed] The instance is running on degraded hardware",
                                  "NotBefore": event.not_before}]
    assert statuses(client, InstanceIds=[EBS], IncludeAllInstances=True)[EBS]["InstanceState"]["Name"] == "stopped"


def test_boto3_every_filter_family(ec2):
    reboot = schedule(ec2.service, "system-reboot", EBS)
    schedule(ec2.service, "instance-stop", MORE[0], notice=timedelta(days=2))
    schedule(ec2.service, "system-maintenance", SPOT, notice=timedelta(minutes=1))
    ec2.service.advance_clock(timedelta(minutes=1, seconds=30))  # SPOT's maintenance is in progress
    client = ec2.client()

    def ids(*filters):
        return sorted(statuses(client, Filters=[{"Name": name, "Values": list(values)} for name, *values in filters]))

    assert ids(("availability-zone", "us-east-1b")) == MORE
    assert ids(("availability-zone-id", "use1-az1")) == sorted([EBS, STORE, ASG, SPOT])
    assert ids(("event.code", "system-reboot", "instance-stop")) == sorted([EBS, MORE[0]])
    assert ids(("event.description", "*degraded hardware")) == [MORE[0]]
    assert ids(("event.instance-event-id", reboot.event_id)) == [EBS]
    assert ids(("event.not-before", iso(reboot.not_before))) == [EBS]
    assert ids(("event.not-after", iso(reboot.not_after))) == [EBS]
    assert ids(("event.not-before-deadline", iso(reboot.not_before_deadline))) == [EBS]
    assert ids(("instance-state-name", "running"), ("availability-zone", "us-east-1a")) == \
        sorted([EBS, STORE, ASG, SPOT])
    assert ids(("instance-state-code", "16")) == EAST
    assert ids(("instance-status.status", "impaired")) == [SPOT]
    assert ids(("instance-status.reachability", "passed")) == sorted(set(EAST) - {SPOT})
    assert ids(("system-status.status", "impaired")) == [SPOT]
    assert ids(("system-status.reachability", "failed")) == [SPOT]
    assert ids(("attached-ebs-status.status", "not-applicable")) == [STORE]
    assert ids(("operator.managed", "false")) == EAST
    error = client_error(client.describe_instance_status, Filters=[{"Name": "tag:Name", "Values": ["db"]}])
    assert error["Error"] == {"Code": "InvalidParameterValue", "Message": "The filter 'tag:Name' is invalid"}


def test_boto3_paginator(ec2):
    client = ec2.client()
    pages = list(client.get_paginator("describe_instance_status").paginate(PaginationConfig={"PageSize": 5}))
    assert [len(page["InstanceStatuses"]) for page in pages] == [5, 5, 2]
    assert [s["InstanceId"] for page in pages for s in page["InstanceStatuses"]] == EAST
    assert "NextToken" in pages[0] and "NextToken" not in pages[-1]
    first = client.describe_instance_status(MaxResults=5)
    error = client_error(client.describe_instance_status, MaxResults=5, NextToken=first["NextToken"] + "x")
    assert error["Error"]["Code"] == "InvalidNextToken"
    filtered = client.get_paginator("describe_instance_status").paginate(
        Filters=[{"Name": "availability-zone", "Values": ["us-east-1b"]}], PaginationConfig={"PageSize": 5})
    assert [s["InstanceId"] for page in filtered for s in page["InstanceStatuses"]] == MORE


def test_boto3_max_results_with_instance_ids_is_refused(ec2):
    client = ec2.client()
    error = client_error(client.describe_instance_status, InstanceIds=[EBS], MaxResults=5)
    assert error["Error"] == {"Code": "InvalidParameterCombination",
                              "Message": "The parameter instancesSet cannot be used with the parameter maxResults"}
    assert client_error(client.describe_instance_status, MaxResults=4)["Error"]["Code"] == "InvalidParameterValue"


def test_boto3_dry_run(ec2):
    event = schedule(ec2.service, "system-reboot", EBS)
    client = ec2.client()
    for call, kwargs in ((client.describe_instance_status, {}),
                         (client.modify_instance_event_start_time,
                          {"InstanceId": EBS, "InstanceEventId": event.event_id, "NotBefore": T0 + timedelta(days=1)})):
        error = client_error(call, DryRun=True, **kwargs)
        assert error["Error"] == {"Code": "DryRunOperation",
                                  "Message": "Request would have succeeded, but DryRun flag is set."}
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert ec2.service.engine.ec2_events[event.event_id].not_before == event.not_before


def test_boto3_modify_instance_event_start_time_and_its_refusals(ec2):
    client = ec2.client()
    reboot = schedule(ec2.service, "system-reboot", EBS)
    stop = schedule(ec2.service, "instance-stop", MORE[0], notice=timedelta(days=2))
    soon = schedule(ec2.service, "instance-reboot", MORE[1], notice=timedelta(minutes=4))
    new = T0 + timedelta(days=3, hours=1)
    moved = client.modify_instance_event_start_time(InstanceId=EBS, InstanceEventId=reboot.event_id, NotBefore=new)
    assert moved["Event"] == {"InstanceEventId": reboot.event_id, "Code": "system-reboot",
                              "Description": "The instance is scheduled for a reboot", "NotBefore": new,
                              "NotAfter": new + timedelta(hours=2), "NotBeforeDeadline": reboot.not_before_deadline}
    assert statuses(client, InstanceIds=[EBS])[EBS]["Events"][0]["NotBefore"] == new

    def refused(instance_id, event_id, not_before):
        return client_error(client.modify_instance_event_start_time, InstanceId=instance_id,
                            InstanceEventId=event_id, NotBefore=not_before)["Error"]

    for instance_id, event_id, when, reason in (
            (EBS, reboot.event_id, T0 + timedelta(minutes=30), "at least 60 minutes from now"),
            (EBS, reboot.event_id, reboot.not_before_deadline + timedelta(seconds=1), "after the event's deadline"),
            (MORE[0], stop.event_id, T0 + timedelta(days=1), "no deadline"),
            (MORE[1], soon.event_id, T0 + timedelta(hours=2), "within 5 minutes")):
        error = refused(instance_id, event_id, when)
        assert error["Code"] == "InvalidInstanceEventStartTime" and reason in error["Message"], error
    ec2.service.advance_clock(timedelta(minutes=4))  # soon's reboot starts
    assert "already started" in refused(MORE[1], soon.event_id, T0 + timedelta(hours=2))["Message"]
    assert refused(EBS, "instance-event-0123456789abcdef0", new)["Code"] == "InvalidInstanceEventIDNotFound"
    assert refused(MORE[0], reboot.event_id, new)["Code"] == "InvalidInstanceEventIDNotFound"  # another's event
    assert refused("i-0eeeeeeeeeeeeeee5", reboot.event_id, new) == {
        "Code": "InvalidInstanceID.NotFound", "Message": "The instance ID 'i-0eeeeeeeeeeeeeee5' does not exist"}
    assert refused("i-xyz", reboot.event_id, new)["Code"] == "InvalidInstanceID.Malformed"
    assert refused(WEST, reboot.event_id, new)["Code"] == "InvalidInstanceID.NotFound"  # in another region
    assert ec2.service.engine.ec2_events[reboot.event_id].not_before == new  # refusals changed nothing


# ---------------------------------------------------------------------------------------------------- the aws CLI
def aws(server: Ec2Server, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    import awscli  # noqa: F401  (a test dependency: fail, do not skip, when it is missing)

    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y", AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=str(tmp_path / "no-config"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-creds"),
               AWS_EC2_METADATA_DISABLED="true", AWS_PAGER="")
    return subprocess.run([sys.executable, "-m", "awscli", "ec2", *args, "--endpoint-url", server.url,
                           "--output", "json"], env=env, capture_output=True, text=True, timeout=60)


def test_aws_cli(ec2, tmp_path):
    event = schedule(ec2.service, "system-reboot", EBS)
    done = aws(ec2, tmp_path, "describe-instance-status", "--instance-ids", EBS)
    assert done.returncode == 0, done.stderr
    [status] = json.loads(done.stdout)["InstanceStatuses"]
    assert status["InstanceId"] == EBS and status["InstanceState"] == {"Code": 16, "Name": "running"}
    assert status["Events"] == [{"InstanceEventId": event.event_id, "Code": "system-reboot",
                                 "Description": "The instance is scheduled for a reboot",
                                 "NotBefore": "2026-05-04T22:11:58.000Z", "NotAfter": "2026-05-05T00:11:58.000Z",
                                 "NotBeforeDeadline": "2026-05-25T22:11:58.000Z"}]
    listed = aws(ec2, tmp_path, "describe-instance-status", "--filters", "Name=availability-zone,Values=us-east-1b",
                 "--page-size", "5")  # the CLI follows NextToken itself
    assert listed.returncode == 0, listed.stderr
    assert [s["InstanceId"] for s in json.loads(listed.stdout)["InstanceStatuses"]] == MORE
    moved = aws(ec2, tmp_path, "modify-instance-event-start-time", "--instance-id", EBS, "--instance-event-id",
                event.event_id, "--not-before", "2026-04-25T10:00:00Z")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["Event"]["NotBefore"] == "2026-04-25T10:00:00.000Z"
    assert ec2.service.engine.ec2_events[event.event_id].not_before == datetime(2026, 4, 25, 10, tzinfo=timezone.utc)
    refused = aws(ec2, tmp_path, "modify-instance-event-start-time", "--instance-id", EBS, "--instance-event-id",
                  event.event_id, "--not-before", "2026-04-20T22:30:00Z")
    assert refused.returncode != 0 and "(InvalidInstanceEventStartTime)" in refused.stderr
