"""The EC2 Query API (DescribeInstanceStatus, ModifyInstanceEventStartTime; the AWS page "Scheduled events for your
instances", the EC2 API Reference):
the wire in-process over httpx's ASGI transport (exact XML elements and error codes), then real boto3 and the aws CLI
against a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from forewarn.app.runtime import Maintenance
from forewarn.aws.changes import Ec2EventChanged
from forewarn.aws.component import Ec2Component, Ec2Request
from forewarn.aws.ec2_api.app import create_ec2_app
from forewarn.aws.ec2_api.protocol import NAMESPACE
from forewarn.aws.model import Ec2Code, availability_zone_id
from forewarn.aws.windows import TimeRange
from forewarn.fleet.file import parse_fleet
from helpers import T0, free_port, open_store

EBS = "i-0aaaaaaaaaaaaaaa1"
STORE = "i-0bbbbbbbbbbbbbbb2"
ASG = "i-0ccccccccccccccc3"
SPOT = "i-0ddddddddddddddd4"
MORE = [f"i-0e{n:015x}" for n in range(1, 9)]  # 8 more: 12 instances in us-east-1
WEST = "i-0fffffffffffffff9"  # us-west-2
FLEET = (
    f"""
hosts: [{{name: h1}}, {{name: h2}}, {{name: h3}}]
ec2_instances:
  - {{id: {EBS}, host: h1, name: db}}
  - {{id: {STORE}, host: h1, root_device: instance-store}}
  - {{id: {ASG}, host: h2, auto_scaling_group: web-asg}}
  - {{id: {SPOT}, host: h3, spot: true}}
"""
    + "".join(f"  - {{id: {iid}, host: h2, availability_zone: us-east-1b}}\n" for iid in MORE)
    + f"  - {{id: {WEST}, host: h3, availability_zone: us-west-2c}}\n"
)
EAST = sorted([EBS, STORE, ASG, SPOT] + MORE)
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def open_service(path, fleet: str = FLEET) -> Maintenance:
    return Maintenance.open(open_store(str(path)), parse_fleet(fleet), "manual", 1.0, T0, "seed")


def schedule(service: Maintenance, code: str, *instances: str, **fields):
    changes = service.perform(
        lambda engine: engine.component(Ec2Component).schedule_ec2(Ec2Request(Ec2Code(code), instances, **fields))
    )
    events = [c.event for c in changes if isinstance(c, Ec2EventChanged)]
    return events[0] if len(events) == 1 else events


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


# ---------------------------------------------------------------------------------------------- in-process wire
class Wire:
    """The app over a service with a manual clock, called synchronously over httpx's ASGI transport."""

    def __init__(self, service: Maintenance):
        self.service = service
        self.app = create_ec2_app(service)

    def raw(
        self, method: str = "POST", data=None, query=None, headers=None, content=None, path: str = "/"
    ) -> httpx.Response:
        async def run():
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://ec2.test") as client:
                return await client.request(method, path, data=data, params=query, headers=headers, content=content)

        return asyncio.run(run())

    def call(
        self, action: str | None = "DescribeInstanceStatus", version: str | None = "2016-11-15", headers=None, **params
    ) -> httpx.Response:
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
        return {
            q(item, "instanceId").text: item
            for item in root.iterfind(f"{{{NAMESPACE}}}instanceStatusSet/{{{NAMESPACE}}}item")
        }


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
    assert response.text.startswith(
        '<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstanceStatusResponse '
        'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
    )
    root = ET.fromstring(response.content)
    assert names(root) == ["requestId", "instanceStatusSet"]  # no nextToken on the last page
    assert UUID.match(q(root, "requestId").text) and q(root, "requestId").text == response.headers["x-amzn-requestid"]
    ebs, store = list(q(root, "instanceStatusSet"))
    assert names(ebs) == [
        "instanceId",
        "availabilityZone",
        "availabilityZoneId",
        "operator",
        "instanceState",
        "systemStatus",
        "instanceStatus",
        "attachedEbsStatus",
        "eventsSet",
    ]
    assert (q(ebs, "instanceId").text, q(ebs, "availabilityZone").text, q(ebs, "availabilityZoneId").text) == (
        EBS,
        "us-east-1a",
        "use1-az1",
    )
    assert q(ebs, "operator/managed").text == "false"
    assert (q(ebs, "instanceState/code").text, q(ebs, "instanceState/name").text) == ("16", "running")
    for check in ("systemStatus", "instanceStatus", "attachedEbsStatus"):
        assert names(q(ebs, check)) == ["status", "details"]
        assert q(ebs, f"{check}/status").text == "ok"
        assert names(q(ebs, f"{check}/details/item")) == ["name", "status"]
        assert (q(ebs, f"{check}/details/item/name").text, q(ebs, f"{check}/details/item/status").text) == (
            "reachability",
            "passed",
        )
    [event] = list(q(ebs, "eventsSet"))
    assert names(event) == ["instanceEventId", "code", "description", "notBefore", "notAfter", "notBeforeDeadline"]
    assert [child.text for child in event] == [
        reboot.event_id,
        "system-reboot",
        "The instance is scheduled for a reboot",
        "2026-05-04T22:11:58.000Z",
        "2026-05-05T00:11:58.000Z",
        "2026-05-25T22:11:58.000Z",
    ]
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
    response = wire.raw("GET", query={"Action": "DescribeInstanceStatus", "Version": "2016-11-15", "InstanceId.1": EBS})
    assert response.status_code == 200 and EBS in response.text
    assert error(wire.call(action=None)) == ("MissingAction", "The request must contain the parameter Action")
    assert error(wire.raw("GET")) == ("MissingAction", "The request must contain the parameter Action")
    assert error(wire.call("DescribeInstances")) == (
        "InvalidAction",
        "The action DescribeInstances is not valid for this web service.",
    )
    assert error(wire.call(version=None)) == ("MissingParameter", "The request must contain the parameter Version")
    assert error(wire.call(version="2014-10-01")) == (
        "NoSuchVersion",
        "The requested version (2014-10-01) of service AmazonEC2 does not exist",
    )
    assert error(wire.call(InstanceIds_1=EBS)) == ("UnknownParameter", "The parameter InstanceIds.1 is not recognized")
    assert error(wire.call(dryRun="true")) == ("UnknownParameter", "The parameter dryRun is not recognized")
    assert error(wire.call("ModifyInstanceEventStartTime", MaxResults=5)) == (
        "UnknownParameter",
        "The parameter MaxResults is not recognized",
    )
    assert error(wire.call(DryRun="maybe"))[0] == "InvalidParameterValue"
    # Signing parameters (SigV2, presigned SigV4) are not unknown parameters.
    response = wire.call(**{"AWSAccessKeyId": "x", "SignatureVersion": "2", "X-Amz-Date": "20260420T221158Z"})
    assert response.status_code == 200
    assert error(wire.raw("PUT", content=b"Action=DescribeInstanceStatus"), 405)[0] == "MethodNotAllowed"
    # Any path serves the API (an endpoint URL may carry a path).
    assert (
        wire.raw(data={"Action": "DescribeInstanceStatus", "Version": "2016-11-15"}, path="/prefix/").status_code == 200
    )


def test_instance_ids(wire):
    assert error(wire.call(InstanceId_1="i-123")) == ("InvalidInstanceID.Malformed", 'Invalid id: "i-123"')
    assert error(wire.call(InstanceId_1=EBS, InstanceId_2="web-1")) == (
        "InvalidInstanceID.Malformed",
        'Invalid id: "web-1"',
    )
    assert error(wire.call(InstanceId_1="i-0eeeeeeeeeeeeeee5")) == (
        "InvalidInstanceID.NotFound",
        "The instance ID 'i-0eeeeeeeeeeeeeee5' does not exist",
    )
    assert error(wire.call(InstanceId_1="i-0eeeeeeeeeeeeeee5", InstanceId_2=EBS, InstanceId_3="i-1a2b3c4d")) == (
        "InvalidInstanceID.NotFound",
        "The instance IDs 'i-0eeeeeeeeeeeeeee5, i-1a2b3c4d' do not exist",
    )
    many = {f"InstanceId_{n}": f"i-{n:017x}" for n in range(1, 102)}
    assert error(wire.call(**many)) == (
        "InvalidRequest",
        "101 exceeds the maximum number of instance IDs that can be specificied (100). Please "
        "specify fewer than 100 instance IDs.",
    )
    assert list(wire.describe(InstanceId_1=EBS, InstanceId_2=EBS, InstanceId_3=SPOT)) == [EBS, SPOT]
    assert error(wire.call(InstanceId_1=EBS, MaxResults=5)) == (
        "InvalidParameterCombination",
        "The parameter instancesSet cannot be used with the parameter maxResults",
    )


def test_filters_on_the_wire(wire):
    reboot = schedule(wire.service, "system-reboot", EBS)
    maintenance = schedule(wire.service, "system-maintenance", SPOT, notice=timedelta(hours=2))
    canceled = schedule(wire.service, "instance-reboot", STORE, notice=timedelta(hours=3))
    wire.service.perform(lambda engine: engine.component(Ec2Component).cancel_ec2(canceled.event_id))

    def ids(*filters, **more):
        params = dict(more)
        for n, (name, *values) in enumerate(filters, 1):
            params[f"Filter_{n}_Name"] = name
            for m, value in enumerate(values, 1):
                params[f"Filter_{n}_Value_{m}"] = value
        return sorted(wire.describe(**params))

    assert ids(("event.code", "system-reboot", "system-maintenance")) == [EBS, SPOT]  # OR within a filter
    assert ids(("event.code", "system-reboot", "system-maintenance"), ("availability-zone", "us-east-1a")) == [
        EBS,
        SPOT,
    ]
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
        "InvalidParameterValue",
        "The filter 'tag:Name' is invalid",
    )
    assert error(wire.call(Filter_1_Name="event.code", Filter_2_Value_1="x")) == (
        "MissingParameter",
        "The request must contain the parameter Filter.2.Name",
    )
    assert error(wire.call(Filter_1_Name="Event.Code", Filter_1_Value_1="x"))[0] == "InvalidParameterValue"


def test_max_results_and_next_token(wire):
    for value, message in (
        ("4", "Value ( 4 ) for parameter maxResults is invalid. Expecting a value greater than 5."),
        ("1001", "Value ( 1001 ) for parameter maxResults is invalid. Expecting a value less than or equal to 1000."),
        ("five", "Value (five) for parameter maxResults is invalid. Expecting an integer."),
    ):
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
    assert (
        error(
            wire.call(MaxResults=5, NextToken=token, Filter_1_Name="availability-zone", Filter_1_Value_1="us-east-1a")
        )
        == invalid
    )


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
    wire.service.perform(lambda engine: engine.component(Ec2Component).cancel_ec2(gone.event_id))
    wire.service.advance_clock(timedelta(minutes=2))  # the reboot is done (30 s)
    events = list(q(wire.describe(InstanceId_1=EBS)[EBS], "eventsSet"))
    assert [(q(e, "instanceEventId").text, q(e, "description").text) for e in events] == [
        (done.event_id, "[Completed] The instance is scheduled for a reboot"),
        (gone.event_id, "[Canceled] The instance is scheduled for a reboot"),
    ]
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
    assert sorted(
        wire.describe(
            IncludeAllInstances="true",
            Filter_1_Name="instance-state-name",
            Filter_1_Value_1="stopped",
            Filter_1_Value_2="terminated",
        )
    ) == [EBS, STORE]
    assert list(
        wire.describe(IncludeAllInstances="true", Filter_1_Name="instance-state-code", Filter_1_Value_1="48")
    ) == [STORE]
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
    [replacement] = [
        s.instance_id
        for s in wire.service.settled_engine().component(Ec2Component).ec2_states.values()
        if s.origin == ASG
    ]
    running = wire.describe()
    assert replacement in running and ASG not in running
    assert q(running[replacement], "instanceState/name").text == "running"
    assert q(wire.describe(IncludeAllInstances="true")[ASG], "instanceState/name").text == "terminated"


def test_the_signature_region_scopes_the_instances(wire):
    signed = {
        "Authorization": "AWS4-HMAC-SHA256 Credential=x/20260420/us-west-2/ec2/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=abc"
    }
    assert list(wire.describe(headers=signed)) == [WEST]
    assert error(wire.call(headers=signed, InstanceId_1=EBS))[0] == "InvalidInstanceID.NotFound"
    assert list(wire.describe(**{"X-Amz-Credential": "x/20260420/us-west-2/ec2/aws4_request"})) == [WEST]
    assert WEST not in wire.describe(
        headers={"Authorization": signed["Authorization"].replace("us-west-2", "us-east-1")}
    )


def test_modify_instance_event_start_time_wire(wire):
    event = schedule(wire.service, "system-reboot", EBS)
    new = T0 + timedelta(days=2)
    params = {"InstanceId": EBS, "InstanceEventId": event.event_id, "NotBefore": "2026-04-22T22:11:58Z"}
    for missing in params:
        given = {k: v for k, v in params.items() if k != missing}
        assert error(wire.call("ModifyInstanceEventStartTime", **given)) == (
            "MissingParameter",
            f"The request must contain the parameter {missing}",
        )
    assert error(wire.call("ModifyInstanceEventStartTime", **{**params, "InstanceId": "i-bad"})) == (
        "InvalidInstanceID.Malformed",
        'Invalid id: "i-bad"',
    )
    assert (
        error(wire.call("ModifyInstanceEventStartTime", **{**params, "NotBefore": "next tuesday"}))[0]
        == "InvalidParameterValue"
    )
    assert error(wire.call("ModifyInstanceEventStartTime", DryRun="true", **params), 412) == (
        "DryRunOperation",
        "Request would have succeeded, but DryRun flag is set.",
    )
    assert (
        wire.service.settled_engine().component(Ec2Component).ec2_events[event.event_id].not_before == event.not_before
    )  # nothing changed
    response = wire.call("ModifyInstanceEventStartTime", **params)
    assert response.status_code == 200 and response.headers["content-type"] == "text/xml;charset=UTF-8"
    root = ET.fromstring(response.content)
    assert root.tag == f"{{{NAMESPACE}}}ModifyInstanceEventStartTimeResponse"
    assert names(root) == ["requestId", "event"]
    assert [child.text for child in q(root, "event")] == [
        event.event_id,
        "system-reboot",
        "The instance is scheduled for a reboot",
        iso(new),
        iso(new + timedelta(hours=2)),
        iso(event.not_before_deadline),
    ]
    assert (
        wire.service.settled_engine().component(Ec2Component).ec2_events[event.event_id].not_before == new
    )  # committed
    assert q(wire.describe(InstanceId_1=EBS)[EBS], "eventsSet/item/notBefore").text == iso(new)
    code, message = error(wire.call("ModifyInstanceEventStartTime", **{**params, "NotBefore": iso(T0)}))
    assert code == "InvalidInstanceEventStartTime" and "at least 60 minutes from now" in message
    assert (
        error(wire.call("ModifyInstanceEventStartTime", **{**params, "InstanceEventId": "instance-event-x"}))[0]
        == "InvalidInstanceEventIDNotFound"
    )


@pytest.mark.parametrize(
    "request_args",
    [
        {"content": b"\xff\xfe\x00garbage", "headers": {"content-type": "application/x-www-form-urlencoded"}},
        {"content": b'{"Action": "DescribeInstanceStatus"}', "headers": {"content-type": "application/json"}},
        {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&Filter.1.Name=%00%ff"},
        {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&InstanceId.1=%00"},
        {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&InstanceId.99999999=i-1"},
        {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&MaxResults=99999999999999999999999"},
        {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&NextToken=%%%%"},
        {"content": b"Action=DescribeInstanceStatus&Version=2016-11-15&NextToken=" + b"A" * 5000},
        {
            "content": b"Action=ModifyInstanceEventStartTime&Version=2016-11-15&InstanceId=i-0aaaaaaaaaaaaaaa1"
            b"&InstanceEventId=%00&NotBefore=9999-12-31T23:59:59Z"
        },
        {
            "content": b"Action=ModifyInstanceEventStartTime&Version=2016-11-15&InstanceId=i-0aaaaaaaaaaaaaaa1"
            b"&InstanceEventId=e&NotBefore=0001-01-01T00:00:00-23:59"
        },
        {"content": b"Action=%E2%98%83&Version=2016-11-15"},
        {"content": b"&&&==&Action"},
        {
            "content": b"Action=DescribeInstanceStatus&Version=2016-11-15&"
            + b"&".join(b"x%d=1" % n for n in range(10001))
        },
    ],
)
def test_malformed_requests_are_400_never_500(wire, request_args):
    response = wire.raw(**request_args)
    assert 400 <= response.status_code < 500, response.text
    ET.fromstring(response.content)  # still well-formed XML
    assert error(response, response.status_code)


def test_describe_is_linear_in_the_fleet(tmp_path, monkeypatch):
    count = 2000
    fleet = "hosts: [{name: h1}, {name: h2}]\nec2_instances:\n" + "".join(
        f"  - {{id: i-{n:017x}, host: h{1 + n % 2}}}\n" for n in range(1, count + 1)
    )
    service = open_service(tmp_path / "big.db", fleet)
    ids = tuple(f"i-{n:017x}" for n in range(1, count + 1, 4))
    service.perform(lambda engine: engine.component(Ec2Component).schedule_ec2(Ec2Request(Ec2Code.SYSTEM_REBOOT, ids)))
    wire = Wire(service)
    api = wire.app.state.ec2
    built = []
    item = api.status_item
    monkeypatch.setattr(
        api, "status_item", lambda instance_id, *rest: built.append(instance_id) or item(instance_id, *rest)
    )
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


def test_a_cached_item_is_rendered_again_when_its_instance_changes(tmp_path):
    fleet = "hosts: [{name: h1}]\nec2_instances:\n  - {id: i-00000000000000001, host: h1}\n"
    service = open_service(tmp_path / "cache.db", fleet)
    wire = Wire(service)
    first = wire.call().content
    assert wire.call().content.split(b"<instanceStatusSet>")[1] == first.split(b"<instanceStatusSet>")[1]
    [event] = [
        change.event
        for change in service.perform(
            lambda engine: engine.component(Ec2Component).schedule_ec2(
                Ec2Request(Ec2Code.SYSTEM_REBOOT, ("i-00000000000000001",))
            )
        )
        if hasattr(change, "event")
    ]
    listed = wire.call().content
    assert event.event_id.encode() in listed and b"<eventsSet>" in listed
    assert b"[Canceled]" not in listed
    service.perform(lambda engine: engine.component(Ec2Component).cancel_ec2(event.event_id))
    assert b"<description>[Canceled] " in wire.call().content  # the event changed: its instance's item too
    service.store.close()


def test_availability_zone_ids():
    assert [
        availability_zone_id(z)
        for z in ("us-east-1a", "eu-central-1c", "ap-southeast-2b", "us-gov-west-1a", "us-west-2-lax-1a", "weird")
    ] == ["use1-az1", "euc1-az3", "apse2-az2", "usgw1-az1", "usw2-lax1-az1", "weird-az1"]


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

        return boto3.client(
            "ec2",
            endpoint_url=self.url,
            region_name=region,
            aws_access_key_id="x",
            aws_secret_access_key="y",
            config=Config(retries={"max_attempts": 1}),
        )


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
    assert shown == {
        "InstanceEventId": event.event_id,
        "Code": "system-reboot",
        "Description": "The instance is scheduled for a reboot",
        "NotBefore": event.not_before,
        "NotAfter": event.not_after,
        "NotBeforeDeadline": event.not_before_deadline,
    }
    ebs = everything[EBS]
    assert ebs["InstanceState"] == {"Code": 16, "Name": "running"} and ebs["Operator"] == {"Managed": False}
    assert ebs["AvailabilityZone"] == "us-east-1a" and ebs["AvailabilityZoneId"] == "use1-az1"
    assert ebs["SystemStatus"] == {"Status": "ok", "Details": [{"Name": "reachability", "Status": "passed"}]}
    assert "Events" not in everything[SPOT]
    assert sorted(statuses(ec2.client("us-west-2"))) == [WEST]
    error = client_error(client.describe_instance_status, InstanceIds=["i-0eeeeeeeeeeeeeee5"])
    assert error["Error"] == {
        "Code": "InvalidInstanceID.NotFound",
        "Message": "The instance ID 'i-0eeeeeeeeeeeeeee5' does not exist",
    }
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400 and UUID.match(error["ResponseMetadata"]["RequestId"])
    assert (
        client_error(client.describe_instance_status, InstanceIds=["nope"])["Error"]["Code"]
        == "InvalidInstanceID.Malformed"
    )
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
    assert stopped["Events"] == [
        {
            "InstanceEventId": event.event_id,
            "Code": "instance-retirement",
            "Description": "[Completed] The instance is running on degraded hardware",
            "NotBefore": event.not_before,
        }
    ]
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
    assert ids(("instance-state-name", "running"), ("availability-zone", "us-east-1a")) == sorted(
        [EBS, STORE, ASG, SPOT]
    )
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
        Filters=[{"Name": "availability-zone", "Values": ["us-east-1b"]}], PaginationConfig={"PageSize": 5}
    )
    assert [s["InstanceId"] for page in filtered for s in page["InstanceStatuses"]] == MORE


def test_boto3_max_results_with_instance_ids_is_refused(ec2):
    client = ec2.client()
    error = client_error(client.describe_instance_status, InstanceIds=[EBS], MaxResults=5)
    assert error["Error"] == {
        "Code": "InvalidParameterCombination",
        "Message": "The parameter instancesSet cannot be used with the parameter maxResults",
    }
    assert client_error(client.describe_instance_status, MaxResults=4)["Error"]["Code"] == "InvalidParameterValue"


def test_boto3_dry_run(ec2):
    event = schedule(ec2.service, "system-reboot", EBS)
    client = ec2.client()
    for call, kwargs in (
        (client.describe_instance_status, {}),
        (
            client.modify_instance_event_start_time,
            {"InstanceId": EBS, "InstanceEventId": event.event_id, "NotBefore": T0 + timedelta(days=1)},
        ),
    ):
        error = client_error(call, DryRun=True, **kwargs)
        assert error["Error"] == {
            "Code": "DryRunOperation",
            "Message": "Request would have succeeded, but DryRun flag is set.",
        }
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert (
        ec2.service.settled_engine().component(Ec2Component).ec2_events[event.event_id].not_before == event.not_before
    )


def test_boto3_modify_instance_event_start_time_and_its_refusals(ec2):
    client = ec2.client()
    reboot = schedule(ec2.service, "system-reboot", EBS)
    stop = schedule(ec2.service, "instance-stop", MORE[0], notice=timedelta(days=2))
    soon = schedule(ec2.service, "instance-reboot", MORE[1], notice=timedelta(minutes=4))
    new = T0 + timedelta(days=3, hours=1)
    moved = client.modify_instance_event_start_time(InstanceId=EBS, InstanceEventId=reboot.event_id, NotBefore=new)
    assert moved["Event"] == {
        "InstanceEventId": reboot.event_id,
        "Code": "system-reboot",
        "Description": "The instance is scheduled for a reboot",
        "NotBefore": new,
        "NotAfter": new + timedelta(hours=2),
        "NotBeforeDeadline": reboot.not_before_deadline,
    }
    assert statuses(client, InstanceIds=[EBS])[EBS]["Events"][0]["NotBefore"] == new

    def refused(instance_id, event_id, not_before):
        return client_error(
            client.modify_instance_event_start_time,
            InstanceId=instance_id,
            InstanceEventId=event_id,
            NotBefore=not_before,
        )["Error"]

    for instance_id, event_id, when, reason in (
        (EBS, reboot.event_id, T0 + timedelta(minutes=30), "at least 60 minutes from now"),
        (EBS, reboot.event_id, reboot.not_before_deadline + timedelta(seconds=1), "after the event's deadline"),
        (MORE[0], stop.event_id, T0 + timedelta(days=1), "no deadline"),
        (MORE[1], soon.event_id, T0 + timedelta(hours=2), "within 5 minutes"),
    ):
        error = refused(instance_id, event_id, when)
        assert error["Code"] == "InvalidInstanceEventStartTime" and reason in error["Message"], error
    ec2.service.advance_clock(timedelta(minutes=4))  # soon's reboot starts
    assert "already started" in refused(MORE[1], soon.event_id, T0 + timedelta(hours=2))["Message"]
    assert refused(EBS, "instance-event-0123456789abcdef0", new)["Code"] == "InvalidInstanceEventIDNotFound"
    assert refused(MORE[0], reboot.event_id, new)["Code"] == "InvalidInstanceEventIDNotFound"  # another's event
    assert refused("i-0eeeeeeeeeeeeeee5", reboot.event_id, new) == {
        "Code": "InvalidInstanceID.NotFound",
        "Message": "The instance ID 'i-0eeeeeeeeeeeeeee5' does not exist",
    }
    assert refused("i-xyz", reboot.event_id, new)["Code"] == "InvalidInstanceID.Malformed"
    assert refused(WEST, reboot.event_id, new)["Code"] == "InvalidInstanceID.NotFound"  # in another region
    assert (
        ec2.service.settled_engine().component(Ec2Component).ec2_events[reboot.event_id].not_before == new
    )  # refusals changed nothing


# ---------------------------------------------------------------------------------------------------- the aws CLI
def aws(server: Ec2Server, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    import awscli  # noqa: F401  (a test dependency: fail, do not skip, when it is missing)

    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID="x",
        AWS_SECRET_ACCESS_KEY="y",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-creds"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_PAGER="",
    )
    return subprocess.run(
        [sys.executable, "-m", "awscli", "ec2", *args, "--endpoint-url", server.url, "--output", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_aws_cli(ec2, tmp_path):
    event = schedule(ec2.service, "system-reboot", EBS)
    done = aws(ec2, tmp_path, "describe-instance-status", "--instance-ids", EBS)
    assert done.returncode == 0, done.stderr
    [status] = json.loads(done.stdout)["InstanceStatuses"]
    assert status["InstanceId"] == EBS and status["InstanceState"] == {"Code": 16, "Name": "running"}
    assert status["Events"] == [
        {
            "InstanceEventId": event.event_id,
            "Code": "system-reboot",
            "Description": "The instance is scheduled for a reboot",
            "NotBefore": "2026-05-04T22:11:58.000Z",
            "NotAfter": "2026-05-05T00:11:58.000Z",
            "NotBeforeDeadline": "2026-05-25T22:11:58.000Z",
        }
    ]
    listed = aws(
        ec2,
        tmp_path,
        "describe-instance-status",
        "--filters",
        "Name=availability-zone,Values=us-east-1b",
        "--page-size",
        "5",
    )  # the CLI follows NextToken itself
    assert listed.returncode == 0, listed.stderr
    assert [s["InstanceId"] for s in json.loads(listed.stdout)["InstanceStatuses"]] == MORE
    moved = aws(
        ec2,
        tmp_path,
        "modify-instance-event-start-time",
        "--instance-id",
        EBS,
        "--instance-event-id",
        event.event_id,
        "--not-before",
        "2026-04-25T10:00:00Z",
    )
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["Event"]["NotBefore"] == "2026-04-25T10:00:00.000Z"
    assert ec2.service.settled_engine().component(Ec2Component).ec2_events[event.event_id].not_before == datetime(
        2026, 4, 25, 10, tzinfo=UTC
    )
    refused = aws(
        ec2,
        tmp_path,
        "modify-instance-event-start-time",
        "--instance-id",
        EBS,
        "--instance-event-id",
        event.event_id,
        "--not-before",
        "2026-04-20T22:30:00Z",
    )
    assert refused.returncode != 0 and "(InvalidInstanceEventStartTime)" in refused.stderr


# =================================================================================================== event windows
HOSTED = "i-0a000000000000001"  # on a Dedicated Host
TAGGED = "i-0a000000000000002"  # env=prod, team=web
HOST = "h-0123456789abcdef0"
WINDOW_FLEET = (
    FLEET
    + f"""  - {{id: {HOSTED}, host: h1, dedicated_host: {HOST}}}
  - {{id: {TAGGED}, host: h2, tags: {{env: prod, team: web}}}}
"""
)
WINDOW_ID = re.compile(r"^iew-[0-9a-f]{17}$")
SATURDAY = {
    "TimeRange_1_StartWeekDay": "saturday",
    "TimeRange_1_StartHour": 2,
    "TimeRange_1_EndWeekDay": "saturday",
    "TimeRange_1_EndHour": 8,
}
US_EAST_1 = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=x/20260420/us-east-1/ec2/aws4_request, "
    "SignedHeaders=host, Signature=0"
}


@pytest.fixture
def wwire(tmp_path):
    service = open_service(tmp_path / "windows.db", WINDOW_FLEET)
    yield Wire(service)
    service.store.close()


def window_of(response: httpx.Response, action: str) -> ET.Element:
    assert response.status_code == 200, response.text
    root = ET.fromstring(response.content)
    assert root.tag == f"{{{NAMESPACE}}}{action}Response"
    assert names(root) == ["requestId", "instanceEventWindow"] and UUID.match(q(root, "requestId").text)
    return q(root, "instanceEventWindow")


def targets(window: ET.Element) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    target = q(window, "associationTarget")
    assert names(target) == ["instanceIdSet", "tagSet", "dedicatedHostIdSet"]  # always all three
    return (
        [item.text for item in q(target, "instanceIdSet")],
        [(q(item, "key").text, q(item, "value").text) for item in q(target, "tagSet")],
        [item.text for item in q(target, "dedicatedHostIdSet")],
    )


def create(wire: Wire, name: str = "w", **params) -> str:
    """A new window: Saturdays 02:00-08:00 unless the parameters give a cron expression."""
    schedule = {} if "CronExpression" in params else SATURDAY
    window = window_of(
        wire.call("CreateInstanceEventWindow", Name=name, **schedule, **params), "CreateInstanceEventWindow"
    )
    return q(window, "instanceEventWindowId").text


def described(wire: Wire, **params) -> list[ET.Element]:
    response = wire.call("DescribeInstanceEventWindows", **params)
    assert response.status_code == 200, response.text
    return list(q(ET.fromstring(response.content), "instanceEventWindowSet"))


def described_ids(wire: Wire, *filters, **params) -> list[str]:
    for n, (name, *values) in enumerate(filters, 1):
        params[f"Filter_{n}_Name"] = name
        for m, value in enumerate(values, 1):
            params[f"Filter_{n}_Value_{m}"] = value
    return [q(item, "instanceEventWindowId").text for item in described(wire, **params)]


def test_create_instance_event_window_wire_shape(wwire, tmp_path):
    response = wwire.call(
        "CreateInstanceEventWindow",
        Name="nightly",
        TimeRange_1_StartWeekDay="monday",
        TimeRange_1_StartHour=2,
        TimeRange_1_EndWeekDay="wednesday",
        TimeRange_1_EndHour=8,
        TimeRange_2_StartWeekDay="thursday",
        TimeRange_2_StartHour=2,
        TimeRange_2_EndWeekDay="friday",
        TimeRange_2_EndHour=8,
        TagSpecification_1_ResourceType="instance-event-window",
        TagSpecification_1_Tag_1_Key="K1",
        TagSpecification_1_Tag_1_Value="V1",
        TagSpecification_1_Tag_2_Key="empty",
    )
    assert response.headers["content-type"] == "text/xml;charset=UTF-8"
    window = window_of(response, "CreateInstanceEventWindow")
    assert names(window) == ["instanceEventWindowId", "timeRangeSet", "name", "associationTarget", "state", "tagSet"]
    window_id = q(window, "instanceEventWindowId").text
    assert WINDOW_ID.match(window_id)
    assert [[child.text for child in item] for item in q(window, "timeRangeSet")] == [
        ["monday", "2", "wednesday", "8"],
        ["thursday", "2", "friday", "8"],
    ]
    assert [names(item) for item in q(window, "timeRangeSet")] == [
        ["startWeekDay", "startHour", "endWeekDay", "endHour"]
    ] * 2
    assert q(window, "name").text == "nightly" and q(window, "state").text == "creating"
    assert targets(window) == ([], [], [])
    assert [(q(i, "key").text, q(i, "value").text) for i in q(window, "tagSet")] == [("K1", "V1"), ("empty", None)]
    stored = wwire.service.settled_engine().component(Ec2Component).ec2_windows[window_id]
    assert stored.time_ranges == (TimeRange("monday", 2, "wednesday", 8), TimeRange("thursday", 2, "friday", 8))
    assert stored.tags == (("K1", "V1"), ("empty", ""))
    assert window_id in {w.window_id for w in wwire.service.store.load().records["aws"].windows}  # committed
    # A cron window: no timeRangeSet; the name may be left out.
    cron = window_of(
        wwire.call("CreateInstanceEventWindow", CronExpression="* 21-23 * * 2,3"), "CreateInstanceEventWindow"
    )
    assert names(cron) == ["instanceEventWindowId", "cronExpression", "associationTarget", "state", "tagSet"]
    assert q(cron, "cronExpression").text == "* 21-23 * * 2,3" and list(q(cron, "tagSet")) == []


def test_create_instance_event_window_refusals(wwire):
    def refused(**params):
        return error(wwire.call("CreateInstanceEventWindow", **params))

    assert refused(Name="w") == (
        "MissingParameter",
        "The request must contain the parameter TimeRange or CronExpression",
    )
    assert refused(CronExpression="* 0-4 * * 1", **SATURDAY) == (
        "InvalidParameterCombination",
        "The parameter TimeRange cannot be used with the parameter CronExpression",
    )
    partial = {key: value for key, value in SATURDAY.items() if key != "TimeRange_1_EndHour"}
    assert refused(**partial) == ("MissingParameter", "The request must contain the parameter TimeRange.1.EndHour")
    assert refused(**{**SATURDAY, "TimeRange_1_StartWeekDay": "Saturday"}) == (
        "InvalidParameterValue",
        "Value (Saturday) for parameter TimeRange.1.StartWeekDay is invalid. Expecting one "
        "of sunday, monday, tuesday, wednesday, thursday, friday, saturday.",
    )
    assert refused(**{**SATURDAY, "TimeRange_1_EndHour": "24"})[0] == "InvalidParameterValue"
    assert refused(**{**SATURDAY, "TimeRange_1_EndHour": "eight"})[0] == "InvalidParameterValue"
    assert refused(**{**SATURDAY, "TimeRange_1_EndHour": "3"}) == (
        "InvalidParameterValue",
        "each time range of an event window must be at least 2 hours",
    )
    assert refused(**{**SATURDAY, "TimeRange_1_EndHour": "5"}) == (
        "InvalidParameterValue",
        "the time ranges of an event window must add up to at least 4 hours",
    )
    assert refused(CronExpression="0 0-4 * * 1")[0] == "InvalidParameterValue"  # minutes must be *
    assert refused(CronExpression="* 21-23 * * 2") == (
        "InvalidParameterValue",
        "Invalid cron expression '* 21-23 * * 2': the window must add up to at least 4 hours",
    )
    assert refused(TagSpecification_1_ResourceType="instance", TagSpecification_1_Tag_1_Key="k", **SATURDAY) == (
        "InvalidParameterValue",
        "'instance' is not a valid taggable resource type for this operation.",
    )
    assert refused(TagSpecification_1_Tag_1_Key="k", **SATURDAY) == (
        "MissingParameter",
        "The request must contain the parameter TagSpecification.1.ResourceType",
    )
    assert refused(
        TagSpecification_1_ResourceType="instance-event-window", TagSpecification_1_Tag_1_Key="aws:x", **SATURDAY
    ) == ("InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
    assert (
        refused(
            TagSpecification_1_ResourceType="instance-event-window", TagSpecification_1_Tag_1_Value="v", **SATURDAY
        )[0]
        == "MissingParameter"
    )
    assert refused(TimeRanges_1_StartHour=2, **SATURDAY) == (
        "UnknownParameter",
        "The parameter TimeRanges.1.StartHour is not recognized",
    )
    assert error(wwire.call("CreateInstanceEventWindow", DryRun="true", **SATURDAY), 412)[0] == "DryRunOperation"
    assert wwire.service.settled_engine().component(Ec2Component).ec2_windows == {}  # nothing was created
    for n in range(200):
        wwire.service.perform(
            lambda engine, n=n: engine.component(Ec2Component).create_window(
                f"w{n}", (TimeRange("sunday", 0, "sunday", 4),)
            )
        )
    assert refused(**SATURDAY) == ("InvalidParameterValue", "at most 200 event windows per Region")


def test_associate_and_disassociate_on_the_wire(wwire):
    window_id = create(wwire)
    other = create(wwire, "other")

    def associate(**target):
        return wwire.call("AssociateInstanceEventWindow", InstanceEventWindowId=window_id, **target)

    window = window_of(
        associate(
            AssociationTarget_InstanceId_1=EBS, AssociationTarget_InstanceId_2=STORE, AssociationTarget_InstanceId_3=EBS
        ),
        "AssociateInstanceEventWindow",
    )
    assert q(window, "state").text == "creating" and targets(window) == ([EBS, STORE], [], [])
    assert names(window) == ["instanceEventWindowId", "timeRangeSet", "name", "associationTarget", "state", "tagSet"]
    # One kind of target per window; a target in one window only; instances on a Dedicated Host go by their host.
    assert error(
        associate(AssociationTarget_InstanceTag_1_Key="env", AssociationTarget_InstanceTag_1_Value="prod")
    ) == (
        "InvalidParameterCombination",
        f"event window {window_id} already has targets of another kind; a window has one kind of target",
    )
    assert (
        error(associate(AssociationTarget_InstanceId_1=ASG, AssociationTarget_DedicatedHostId_1=HOST))[0]
        == "InvalidParameterCombination"
    )
    assert error(
        wwire.call("AssociateInstanceEventWindow", InstanceEventWindowId=other, AssociationTarget_InstanceId_1=EBS)
    ) == (
        "InvalidParameterValue",
        f"{EBS} is already associated with event window {window_id}; a target belongs to one window only",
    )
    assert error(associate(AssociationTarget_InstanceId_1=HOSTED)) == (
        "InvalidParameterValue",
        f"instance {HOSTED} is on a Dedicated Host; associate the host instead",
    )
    assert error(associate(AssociationTarget_InstanceId_1="i-0eeeeeeeeeeeeeee5")) == (
        "InvalidInstanceID.NotFound",
        "The instance ID 'i-0eeeeeeeeeeeeeee5' does not exist",
    )
    assert error(associate(AssociationTarget_InstanceId_1="web-1")) == (
        "InvalidInstanceID.Malformed",
        'Invalid id: "web-1"',
    )
    assert (
        error(
            wwire.call(
                "AssociateInstanceEventWindow",
                InstanceEventWindowId=window_id,
                headers=US_EAST_1,
                AssociationTarget_InstanceId_1=WEST,
            )
        )[0]
        == "InvalidInstanceID.NotFound"
    )  # other region
    assert error(
        wwire.call(
            "AssociateInstanceEventWindow",
            InstanceEventWindowId=other,
            AssociationTarget_DedicatedHostId_1="h-0fffffffffffffff0",
        )
    ) == ("InvalidHostID.NotFound", "The host ID 'h-0fffffffffffffff0' does not exist")
    assert error(associate()) == ("MissingParameter", "The request must contain the parameter AssociationTarget")
    assert error(wwire.call("AssociateInstanceEventWindow", AssociationTarget_InstanceId_1=EBS)) == (
        "MissingParameter",
        "The request must contain the parameter InstanceEventWindowId",
    )
    assert error(
        wwire.call(
            "AssociateInstanceEventWindow",
            InstanceEventWindowId="iew-0123456789abcdef0",
            AssociationTarget_InstanceId_1=EBS,
        )
    ) == ("InvalidInstanceEventWindowId.NotFound", "The event window ID 'iew-0123456789abcdef0' does not exist")
    assert error(associate(AssociationTarget_InstanceTag_1_Value="prod")) == (
        "MissingParameter",
        "The request must contain the parameter AssociationTarget.InstanceTag.1.Key",
    )
    assert error(associate(AssociationTarget_InstanceId_1=ASG, DryRun="true"), 412)[0] == "DryRunOperation"
    assert wwire.service.settled_engine().component(Ec2Component).ec2_windows[window_id].instance_ids == (
        EBS,
        STORE,
    )  # refusals changed nothing
    # Tags (the request's InstanceTag is the answer's tagSet) and hosts, on the other window.
    tagged = window_of(
        wwire.call(
            "AssociateInstanceEventWindow",
            InstanceEventWindowId=other,
            AssociationTarget_InstanceTag_1_Key="env",
            AssociationTarget_InstanceTag_1_Value="prod",
            AssociationTarget_InstanceTag_2_Key="team",
            AssociationTarget_InstanceTag_2_Value="web",
        ),
        "AssociateInstanceEventWindow",
    )
    assert targets(tagged) == ([], [("env", "prod"), ("team", "web")], [])
    untagged = window_of(
        wwire.call(
            "DisassociateInstanceEventWindow",
            InstanceEventWindowId=other,
            AssociationTarget_InstanceTag_1_Key="env",
            AssociationTarget_InstanceTag_1_Value="prod",
        ),
        "DisassociateInstanceEventWindow",
    )
    assert targets(untagged) == ([], [("team", "web")], []) and q(untagged, "state").text == "creating"
    window = window_of(
        wwire.call(
            "DisassociateInstanceEventWindow", InstanceEventWindowId=window_id, AssociationTarget_InstanceId_1=EBS
        ),
        "DisassociateInstanceEventWindow",
    )
    assert targets(window) == ([STORE], [], [])
    assert error(wwire.call("DisassociateInstanceEventWindow", InstanceEventWindowId=window_id)) == (
        "MissingParameter",
        "The request must contain the parameter AssociationTarget",
    )
    assert (
        error(
            wwire.call(
                "DisassociateInstanceEventWindow",
                InstanceEventWindowId=window_id,
                AssociationTarget_InstanceId_1=STORE,
                DryRun="true",
            ),
            412,
        )[0]
        == "DryRunOperation"
    )
    third = create(wwire, "hosts")
    hosted = window_of(
        wwire.call(
            "AssociateInstanceEventWindow", InstanceEventWindowId=third, AssociationTarget_DedicatedHostId_1=HOST
        ),
        "AssociateInstanceEventWindow",
    )
    assert targets(hosted) == ([], [], [HOST])


def test_modify_and_delete_on_the_wire(wwire):
    window_id = create(wwire)
    modified = window_of(
        wwire.call(
            "ModifyInstanceEventWindow",
            InstanceEventWindowId=window_id,
            Name="n2",
            CronExpression="* 0-4,20-23 * * 1,5",
        ),
        "ModifyInstanceEventWindow",
    )
    assert names(modified) == [
        "instanceEventWindowId",
        "name",
        "cronExpression",
        "associationTarget",
        "state",
        "tagSet",
    ]  # the cron replaced the time ranges
    assert (q(modified, "name").text, q(modified, "state").text) == ("n2", "creating")
    back = window_of(
        wwire.call("ModifyInstanceEventWindow", InstanceEventWindowId=window_id, **SATURDAY),
        "ModifyInstanceEventWindow",
    )
    assert q(back, "cronExpression") is None and q(back, "name").text == "n2"  # the name stays
    assert (
        error(
            wwire.call(
                "ModifyInstanceEventWindow", InstanceEventWindowId=window_id, CronExpression="* 0-4 * * *", **SATURDAY
            )
        )[0]
        == "InvalidParameterCombination"
    )
    assert (
        error(wwire.call("ModifyInstanceEventWindow", InstanceEventWindowId=window_id, CronExpression="* 0-1 * * *"))[0]
        == "InvalidParameterValue"
    )
    assert error(wwire.call("ModifyInstanceEventWindow", Name="x")) == (
        "MissingParameter",
        "The request must contain the parameter InstanceEventWindowId",
    )
    assert error(wwire.call("ModifyInstanceEventWindow", InstanceEventWindowId="iew-00000000000000000", Name="x")) == (
        "InvalidInstanceEventWindowId.NotFound",
        "The event window ID 'iew-00000000000000000' does not exist",
    )
    assert (
        error(wwire.call("ModifyInstanceEventWindow", InstanceEventWindowId=window_id, Name="dry", DryRun="true"), 412)[
            0
        ]
        == "DryRunOperation"
    )
    assert wwire.service.settled_engine().component(Ec2Component).ec2_windows[window_id].name == "n2"
    # Delete: with targets only with ForceDelete; the answer says deleting; then the window is gone.
    wwire.call("AssociateInstanceEventWindow", InstanceEventWindowId=window_id, AssociationTarget_InstanceId_1=EBS)
    assert error(wwire.call("DeleteInstanceEventWindow", InstanceEventWindowId=window_id)) == (
        "InvalidParameterValue",
        f"event window {window_id} has associated targets; delete it with ForceDelete",
    )
    assert (
        error(
            wwire.call("DeleteInstanceEventWindow", InstanceEventWindowId=window_id, ForceDelete="true", DryRun="true"),
            412,
        )[0]
        == "DryRunOperation"
    )
    response = wwire.call("DeleteInstanceEventWindow", InstanceEventWindowId=window_id, ForceDelete="true")
    assert response.status_code == 200, response.text
    root = ET.fromstring(response.content)
    assert names(root) == ["requestId", "instanceEventWindowState"]
    assert names(q(root, "instanceEventWindowState")) == ["instanceEventWindowId", "state"]
    assert [c.text for c in q(root, "instanceEventWindowState")] == [window_id, "deleting"]
    assert window_id not in wwire.service.settled_engine().component(Ec2Component).ec2_windows
    assert window_id not in {w.window_id for w in wwire.service.store.load().records["aws"].windows}
    assert (
        error(wwire.call("DescribeInstanceEventWindows", InstanceEventWindowId_1=window_id))[0]
        == "InvalidInstanceEventWindowId.NotFound"
    )
    assert (
        error(wwire.call("DeleteInstanceEventWindow", InstanceEventWindowId=window_id))[0]
        == "InvalidInstanceEventWindowId.NotFound"
    )
    assert (
        error(wwire.call("DeleteInstanceEventWindow", InstanceEventWindowId=window_id, ForceDelete="yes"))[0]
        == "InvalidParameterValue"
    )


def test_describe_instance_event_windows_and_filters(wwire):
    by_id = create(
        wwire,
        "by-id",
        TagSpecification_1_ResourceType="instance-event-window",
        TagSpecification_1_Tag_1_Key="Owner",
        TagSpecification_1_Tag_1_Value="CMX",
    )
    by_tag = create(wwire, "by-tag", CronExpression="* 21-23 * * 2,3")
    by_host = create(
        wwire,
        "by-host",
        TagSpecification_1_ResourceType="instance-event-window",
        TagSpecification_1_Tag_1_Key="Owner",
        TagSpecification_1_Tag_1_Value="ops",
    )
    for window_id, target in (
        (by_id, {"AssociationTarget_InstanceId_1": TAGGED}),
        (by_tag, {"AssociationTarget_InstanceTag_1_Key": "env", "AssociationTarget_InstanceTag_1_Value": "prod"}),
        (by_host, {"AssociationTarget_DedicatedHostId_1": HOST}),
    ):
        assert wwire.call("AssociateInstanceEventWindow", InstanceEventWindowId=window_id, **target).status_code == 200
    everything = sorted([by_id, by_tag, by_host])
    items = described(wwire)
    assert [q(item, "instanceEventWindowId").text for item in items] == everything  # sorted by ID
    shown = {q(item, "instanceEventWindowId").text: item for item in items}
    assert {q(item, "state").text for item in items} == {"active"}
    assert names(shown[by_tag]) == [
        "instanceEventWindowId",
        "name",
        "cronExpression",
        "associationTarget",
        "state",
        "tagSet",
    ]
    assert targets(shown[by_tag]) == ([], [("env", "prod")], []) and list(q(shown[by_tag], "tagSet")) == []
    root = ET.fromstring(wwire.call("DescribeInstanceEventWindows").content)
    assert names(root) == ["requestId", "instanceEventWindowSet"]  # one page: no nextToken
    # By ID.
    assert described_ids(
        wwire, InstanceEventWindowId_1=by_host, InstanceEventWindowId_2=by_id, InstanceEventWindowId_3=by_host
    ) == sorted([by_id, by_host])
    assert error(wwire.call("DescribeInstanceEventWindows", InstanceEventWindowId_1="iew-00000000000000000")) == (
        "InvalidInstanceEventWindowId.NotFound",
        "The event window ID 'iew-00000000000000000' does not exist",
    )
    assert error(
        wwire.call(
            "DescribeInstanceEventWindows",
            InstanceEventWindowId_1="iew-00000000000000000",
            InstanceEventWindowId_2=by_id,
            InstanceEventWindowId_3="nope",
        )
    ) == ("InvalidInstanceEventWindowId.NotFound", "The event window IDs 'iew-00000000000000000, nope' do not exist")
    # Filters.
    assert described_ids(wwire, ("dedicated-host-id", HOST)) == [by_host]
    assert described_ids(wwire, ("event-window-name", "by-id", "by-tag")) == sorted([by_id, by_tag])
    assert described_ids(wwire, ("event-window-name", "by-*")) == everything
    assert described_ids(wwire, ("instance-id", TAGGED)) == [by_id]  # direct association wins
    assert described_ids(wwire, ("instance-id", HOSTED)) == [by_host]  # indirect: through its Dedicated Host
    assert described_ids(wwire, ("instance-id", EBS)) == []
    assert described_ids(wwire, ("instance-id", "i-0a00000000000000?")) == sorted([by_id, by_host])
    assert described_ids(wwire, ("instance-tag", "env=prod")) == [by_tag]
    assert described_ids(wwire, ("instance-tag-key", "env")) == [by_tag]
    assert described_ids(wwire, ("instance-tag-value", "prod")) == [by_tag]
    assert described_ids(wwire, ("tag:Owner", "CMX")) == [by_id]
    assert described_ids(wwire, ("tag:Owner", "CMX", "ops")) == sorted([by_id, by_host])
    assert described_ids(wwire, ("tag-key", "Owner"), ("tag-value", "ops")) == [by_host]  # AND between filters
    assert described_ids(wwire, ("tag-value", "CMX"), InstanceEventWindowId_1=by_host) == []
    # Once the window taking TAGGED by ID lets it go, TAGGED falls back to the window of its tag.
    wwire.call("DisassociateInstanceEventWindow", InstanceEventWindowId=by_id, AssociationTarget_InstanceId_1=TAGGED)
    assert described_ids(wwire, ("instance-id", TAGGED)) == [by_tag]
    for name in ("tag:", "instance-state-name", "Tag-Key"):
        assert error(wwire.call("DescribeInstanceEventWindows", Filter_1_Name=name, Filter_1_Value_1="x")) == (
            "InvalidParameterValue",
            f"The filter '{name}' is invalid",
        )
    assert error(wwire.call("DescribeInstanceEventWindows", DryRun="true"), 412)[0] == "DryRunOperation"
    assert error(wwire.call("DescribeInstanceEventWindows", InstanceEventWindowIds_1=by_id))[0] == "UnknownParameter"


def test_describe_instance_event_windows_paging(wwire):
    for n in range(45):
        wwire.service.perform(
            lambda engine, n=n: engine.component(Ec2Component).create_window(
                f"w{n:02}", (TimeRange("sunday", 0, "sunday", 4),)
            )
        )
    everything = sorted(wwire.service.settled_engine().component(Ec2Component).ec2_windows)
    for value, message in (
        ("19", "Value ( 19 ) for parameter maxResults is invalid. Expecting a value from 20 to 500."),
        ("501", "Value ( 501 ) for parameter maxResults is invalid. Expecting a value from 20 to 500."),
        ("x", "Value (x) for parameter maxResults is invalid. Expecting an integer."),
    ):
        assert error(wwire.call("DescribeInstanceEventWindows", MaxResults=value)) == ("InvalidParameterValue", message)
    assert error(wwire.call("DescribeInstanceEventWindows", MaxResults=20, InstanceEventWindowId_1=everything[0])) == (
        "InvalidParameterCombination",
        "The parameter instanceEventWindowIdSet cannot be used with the parameter maxResults",
    )
    seen, token, pages = [], None, []
    while True:
        params = {"MaxResults": 20} if token is None else {"MaxResults": 20, "NextToken": token}
        root = ET.fromstring(wwire.call("DescribeInstanceEventWindows", **params).content)
        page = [q(item, "instanceEventWindowId").text for item in q(root, "instanceEventWindowSet")]
        pages.append(len(page))
        seen += page
        token = q(root, "nextToken").text if q(root, "nextToken") is not None else None
        if token is None:
            break
    assert pages == [20, 20, 5] and seen == everything
    first = ET.fromstring(wwire.call("DescribeInstanceEventWindows", MaxResults=20).content)
    token = q(first, "nextToken").text
    assert (
        q(ET.fromstring(wwire.call("DescribeInstanceEventWindows", MaxResults=20).content), "nextToken").text == token
    )  # stable
    assert error(wwire.call("DescribeInstanceEventWindows", MaxResults=20, NextToken=token + "x")) == (
        "InvalidNextToken",
        "The specified NextToken is not valid.",
    )
    assert (
        error(
            wwire.call(
                "DescribeInstanceEventWindows",
                NextToken=token,
                Filter_1_Name="event-window-name",
                Filter_1_Value_1="w*",
            )
        )[0]
        == "InvalidNextToken"
    )  # another query's token
    status_token = q(ET.fromstring(wwire.call(MaxResults=5).content), "nextToken").text
    assert error(wwire.call("DescribeInstanceEventWindows", NextToken=status_token))[0] == "InvalidNextToken"
    # A filtered query pages over what matches.
    assert described_ids(wwire, ("event-window-name", "w4*"), MaxResults=500) == sorted(
        w
        for w in everything
        if wwire.service.settled_engine().component(Ec2Component).ec2_windows[w].name.startswith("w4")
    )


# -------------------------------------------------------------------------------------- notification attributes
def attributes_of(response: httpx.Response, action: str) -> tuple[list[str], str]:
    assert response.status_code == 200, response.text
    root = ET.fromstring(response.content)
    assert root.tag == f"{{{NAMESPACE}}}{action}Response" and names(root) == ["requestId", "instanceTagAttribute"]
    attribute = q(root, "instanceTagAttribute")
    assert names(attribute) == ["instanceTagKeySet", "includeAllTagsOfInstance"]
    return [item.text for item in q(attribute, "instanceTagKeySet")], q(attribute, "includeAllTagsOfInstance").text


def test_event_notification_attributes_on_the_wire(wwire):
    describe = "DescribeInstanceEventNotificationAttributes"
    register = "RegisterInstanceEventNotificationAttributes"
    deregister = "DeregisterInstanceEventNotificationAttributes"
    assert attributes_of(wwire.call(describe), describe) == ([], "false")
    assert "<instanceTagKeySet/>" in wwire.call(describe).text
    assert attributes_of(
        wwire.call(
            register,
            InstanceTagAttribute_InstanceTagKey_1="owner",
            InstanceTagAttribute_InstanceTagKey_2="project",
            InstanceTagAttribute_IncludeAllTagsOfInstance="false",
        ),
        register,
    ) == (["owner", "project"], "false")
    assert attributes_of(wwire.call(register, InstanceTagAttribute_InstanceTagKey_1="team"), register) == (
        ["owner", "project", "team"],
        "false",
    )
    assert attributes_of(wwire.call(describe), describe) == (["owner", "project", "team"], "false")
    assert attributes_of(wwire.call(deregister, InstanceTagAttribute_InstanceTagKey_1="project"), deregister) == (
        ["owner", "team"],
        "false",
    )
    assert wwire.service.store.load().records["aws"].notification_attributes.keys == ("owner", "team")  # committed
    assert error(
        wwire.call(
            register, InstanceTagAttribute_IncludeAllTagsOfInstance="true", InstanceTagAttribute_InstanceTagKey_1="x"
        )
    ) == (
        "InvalidParameterCombination",
        "The parameter IncludeAllTagsOfInstance=true cannot be used with the parameter InstanceTagKey",
    )
    assert error(wwire.call(register)) == (
        "MissingParameter",
        "The request must contain the parameter InstanceTagAttribute",
    )
    assert (
        error(wwire.call(register, InstanceTagAttribute_IncludeAllTagsOfInstance="false"))[0] == "InvalidParameterValue"
    )
    assert error(wwire.call(register, InstanceTagAttribute_InstanceTagKey_1=""))[0] == "InvalidParameterValue"
    assert (
        error(wwire.call(register, InstanceTagAttribute_IncludeAllTagsOfInstance="maybe"))[0] == "InvalidParameterValue"
    )
    assert error(wwire.call(deregister)) == (
        "MissingParameter",
        "The request must contain the parameter InstanceTagAttribute",
    )
    assert error(wwire.call(register, InstanceTagKey_1="x")) == (
        "UnknownParameter",
        "The parameter InstanceTagKey.1 is not recognized",
    )
    for action, params in (
        (register, {"InstanceTagAttribute_InstanceTagKey_1": "x"}),
        (deregister, {"InstanceTagAttribute_IncludeAllTagsOfInstance": "false"}),
        (describe, {}),
    ):
        assert error(wwire.call(action, DryRun="true", **params), 412)[0] == "DryRunOperation"
    assert attributes_of(wwire.call(describe), describe) == (["owner", "team"], "false")  # dry runs changed nothing
    assert attributes_of(wwire.call(register, InstanceTagAttribute_IncludeAllTagsOfInstance="true"), register) == (
        [],
        "true",
    )
    assert attributes_of(wwire.call(deregister, InstanceTagAttribute_IncludeAllTagsOfInstance="true"), deregister) == (
        [],
        "false",
    )
    wwire.call(register, InstanceTagAttribute_InstanceTagKey_1="a", InstanceTagAttribute_InstanceTagKey_2="b")
    # IncludeAllTagsOfInstance=false deregisters every key (the API reference).
    assert attributes_of(wwire.call(deregister, InstanceTagAttribute_IncludeAllTagsOfInstance="false"), deregister) == (
        [],
        "false",
    )


# ---------------------------------------------------------------------------------------- windows through boto3
@pytest.fixture
def wec2(tmp_path):
    import boto3  # noqa: F401

    service = open_service(tmp_path / "boto-windows.db", WINDOW_FLEET)
    server = Ec2Server(service).start()
    yield server
    server.stop()
    service.store.close()


def test_boto3_window_places_a_scheduled_reboot(wec2):
    client = wec2.client()
    created = client.create_instance_event_window(
        Name="weekend",
        TimeRanges=[{"StartWeekDay": "saturday", "StartHour": 2, "EndWeekDay": "saturday", "EndHour": 8}],
        TagSpecifications=[{"ResourceType": "instance-event-window", "Tags": [{"Key": "K1", "Value": "V1"}]}],
    )["InstanceEventWindow"]
    window_id = created["InstanceEventWindowId"]
    assert created == {
        "InstanceEventWindowId": window_id,
        "Name": "weekend",
        "State": "creating",
        "TimeRanges": [{"StartWeekDay": "saturday", "StartHour": 2, "EndWeekDay": "saturday", "EndHour": 8}],
        "AssociationTarget": {"InstanceIds": [], "Tags": [], "DedicatedHostIds": []},
        "Tags": [{"Key": "K1", "Value": "V1"}],
    }
    associated = client.associate_instance_event_window(
        InstanceEventWindowId=window_id, AssociationTarget={"InstanceIds": [EBS]}
    )
    assert associated["InstanceEventWindow"]["AssociationTarget"] == {
        "InstanceIds": [EBS],
        "Tags": [],
        "DedicatedHostIds": [],
    }
    assert associated["InstanceEventWindow"]["State"] == "creating"
    wec2.service.perform(
        lambda e: e.component(Ec2Component).schedule_ec2(
            Ec2Request(Ec2Code.SYSTEM_REBOOT, (EBS,), notice=timedelta(hours=1))
        )
    )
    [event] = statuses(client, InstanceIds=[EBS])[EBS]["Events"]
    assert T0.weekday() == 0  # Monday 2026-04-20 22:11:58: the next window opens Saturday 02:00
    assert event["NotBefore"] == datetime(2026, 4, 25, 2, tzinfo=UTC)
    assert event["NotBefore"].weekday() == 5 and 2 <= event["NotBefore"].hour < 8
    assert event["NotAfter"] == datetime(2026, 4, 25, 4, tzinfo=UTC)  # within the window's 08:00
    [shown] = client.describe_instance_event_windows(InstanceEventWindowIds=[window_id])["InstanceEventWindows"]
    assert shown["State"] == "active" and shown["AssociationTarget"]["InstanceIds"] == [EBS]


def test_boto3_event_window_actions_and_errors(wec2):
    from botocore.exceptions import ParamValidationError

    client = wec2.client()
    cron = client.create_instance_event_window(Name="cron", CronExpression="* 21-23 * * 2,3")["InstanceEventWindow"]
    assert cron["CronExpression"] == "* 21-23 * * 2,3" and "TimeRanges" not in cron
    window_id = cron["InstanceEventWindowId"]
    modified = client.modify_instance_event_window(
        InstanceEventWindowId=window_id, Name="n2", CronExpression="* 0-4,20-23 * * 1,5"
    )["InstanceEventWindow"]
    assert (modified["Name"], modified["CronExpression"], modified["State"]) == (
        "n2",
        "* 0-4,20-23 * * 1,5",
        "creating",
    )
    tagged = client.associate_instance_event_window(
        InstanceEventWindowId=window_id, AssociationTarget={"InstanceTags": [{"Key": "env", "Value": "prod"}]}
    )
    assert tagged["InstanceEventWindow"]["AssociationTarget"] == {
        "InstanceIds": [],
        "Tags": [{"Key": "env", "Value": "prod"}],
        "DedicatedHostIds": [],
    }
    hosts = client.create_instance_event_window(Name="hosts", CronExpression="* 0-4 * * 0,6")["InstanceEventWindow"]
    client.associate_instance_event_window(
        InstanceEventWindowId=hosts["InstanceEventWindowId"], AssociationTarget={"DedicatedHostIds": [HOST]}
    )

    def code(call, **kwargs):
        return client_error(call, **kwargs)["Error"]

    assert code(client.describe_instance_event_windows, InstanceEventWindowIds=["iew-00000000000000000"]) == {
        "Code": "InvalidInstanceEventWindowId.NotFound",
        "Message": "The event window ID 'iew-00000000000000000' does not exist",
    }
    assert (
        code(
            client.associate_instance_event_window,
            InstanceEventWindowId=window_id,
            AssociationTarget={"InstanceIds": [EBS]},
        )["Code"]
        == "InvalidParameterCombination"
    )
    assert (
        code(
            client.create_instance_event_window,
            Name="x",
            CronExpression="* 0-4 * * 1",
            TimeRanges=[{"StartWeekDay": "monday", "StartHour": 0, "EndWeekDay": "monday", "EndHour": 4}],
        )["Code"]
        == "InvalidParameterCombination"
    )
    assert code(
        client.associate_instance_event_window,
        InstanceEventWindowId=hosts["InstanceEventWindowId"],
        AssociationTarget={"DedicatedHostIds": ["h-0fffffffffffffff0"]},
    ) == {"Code": "InvalidHostID.NotFound", "Message": "The host ID 'h-0fffffffffffffff0' does not exist"}
    empty = client.create_instance_event_window(Name="e", CronExpression="* 0-4 * * 2")["InstanceEventWindow"]
    assert code(
        client.associate_instance_event_window,
        InstanceEventWindowId=empty["InstanceEventWindowId"],
        AssociationTarget={"InstanceIds": ["i-0eeeeeeeeeeeeeee5"]},
    ) == {"Code": "InvalidInstanceID.NotFound", "Message": "The instance ID 'i-0eeeeeeeeeeeeeee5' does not exist"}
    assert (
        code(
            client.associate_instance_event_window,
            InstanceEventWindowId=empty["InstanceEventWindowId"],
            AssociationTarget={"InstanceIds": [WEST]},
        )["Code"]
        == "InvalidInstanceID.NotFound"
    )  # us-west-2
    assert (
        code(client.create_instance_event_window, Name="x", CronExpression="* 0-1 * * *")["Code"]
        == "InvalidParameterValue"
    )
    assert (
        code(client.delete_instance_event_window, InstanceEventWindowId=window_id)["Code"] == "InvalidParameterValue"
    )  # targets: ForceDelete needed
    with pytest.raises(ParamValidationError):  # botocore checks MaxResults' range itself
        client.describe_instance_event_windows(MaxResults=19)
    for call, kwargs in (
        (client.create_instance_event_window, {"CronExpression": "* 0-4 * * 1,2"}),
        (client.modify_instance_event_window, {"InstanceEventWindowId": window_id, "Name": "x"}),
        (client.delete_instance_event_window, {"InstanceEventWindowId": window_id}),
        (client.describe_instance_event_windows, {}),
        (
            client.associate_instance_event_window,
            {
                "InstanceEventWindowId": window_id,
                "AssociationTarget": {"InstanceTags": [{"Key": "team", "Value": "web"}]},
            },
        ),
        (
            client.disassociate_instance_event_window,
            {
                "InstanceEventWindowId": window_id,
                "AssociationTarget": {"InstanceTags": [{"Key": "env", "Value": "prod"}]},
            },
        ),
    ):
        error = client_error(call, DryRun=True, **kwargs)
        assert error["Error"]["Code"] == "DryRunOperation" and error["ResponseMetadata"]["HTTPStatusCode"] == 412
    # Filters and paging through boto3.
    found = client.describe_instance_event_windows(Filters=[{"Name": "instance-id", "Values": [TAGGED, HOSTED]}])
    assert sorted(w["InstanceEventWindowId"] for w in found["InstanceEventWindows"]) == sorted(
        [window_id, hosts["InstanceEventWindowId"]]
    )
    for n in range(30):
        client.create_instance_event_window(Name=f"bulk{n}", CronExpression="* 0-4 * * 1,2")
    pages = list(client.get_paginator("describe_instance_event_windows").paginate(PaginationConfig={"PageSize": 20}))
    assert [len(page["InstanceEventWindows"]) for page in pages] == [20, 13]
    listed = [w["InstanceEventWindowId"] for page in pages for w in page["InstanceEventWindows"]]
    assert listed == sorted(wec2.service.settled_engine().component(Ec2Component).ec2_windows)
    # Disassociate, then delete: deleting, and gone.
    untied = client.disassociate_instance_event_window(
        InstanceEventWindowId=window_id, AssociationTarget={"InstanceTags": [{"Key": "env", "Value": "prod"}]}
    )
    assert untied["InstanceEventWindow"]["AssociationTarget"] == {"InstanceIds": [], "Tags": [], "DedicatedHostIds": []}
    deleted = client.delete_instance_event_window(InstanceEventWindowId=window_id)
    assert deleted["InstanceEventWindowState"] == {"InstanceEventWindowId": window_id, "State": "deleting"}
    assert (
        code(client.describe_instance_event_windows, InstanceEventWindowIds=[window_id])["Code"]
        == "InvalidInstanceEventWindowId.NotFound"
    )
    forced = client.delete_instance_event_window(InstanceEventWindowId=hosts["InstanceEventWindowId"], ForceDelete=True)
    assert forced["InstanceEventWindowState"]["State"] == "deleting"


def test_boto3_event_notification_attributes(wec2):
    client = wec2.client()
    assert client.describe_instance_event_notification_attributes()["InstanceTagAttribute"] == {
        "InstanceTagKeys": [],
        "IncludeAllTagsOfInstance": False,
    }
    registered = client.register_instance_event_notification_attributes(
        InstanceTagAttribute={"IncludeAllTagsOfInstance": False, "InstanceTagKeys": ["owner", "project"]}
    )
    assert registered["InstanceTagAttribute"] == {
        "InstanceTagKeys": ["owner", "project"],
        "IncludeAllTagsOfInstance": False,
    }
    assert wec2.service.settled_engine().component(Ec2Component).notification_attributes.keys == ("owner", "project")
    error = client_error(
        client.register_instance_event_notification_attributes,
        InstanceTagAttribute={"IncludeAllTagsOfInstance": True, "InstanceTagKeys": ["x"]},
    )
    assert error["Error"]["Code"] == "InvalidParameterCombination"
    assert (
        client_error(
            client.register_instance_event_notification_attributes,
            InstanceTagAttribute={"IncludeAllTagsOfInstance": False},
        )["Error"]["Code"]
        == "InvalidParameterValue"
    )
    assert (
        client_error(client.register_instance_event_notification_attributes, InstanceTagAttribute={})["Error"]["Code"]
        == "MissingParameter"
    )
    for call, kwargs in (
        (client.register_instance_event_notification_attributes, {"InstanceTagAttribute": {"InstanceTagKeys": ["x"]}}),
        (
            client.deregister_instance_event_notification_attributes,
            {"InstanceTagAttribute": {"IncludeAllTagsOfInstance": False}},
        ),
        (client.describe_instance_event_notification_attributes, {}),
    ):
        assert client_error(call, DryRun=True, **kwargs)["Error"]["Code"] == "DryRunOperation"
    everything = client.register_instance_event_notification_attributes(
        InstanceTagAttribute={"IncludeAllTagsOfInstance": True}
    )
    assert everything["InstanceTagAttribute"] == {"InstanceTagKeys": [], "IncludeAllTagsOfInstance": True}
    also = client.register_instance_event_notification_attributes(InstanceTagAttribute={"InstanceTagKeys": ["team"]})
    assert also["InstanceTagAttribute"] == {"InstanceTagKeys": ["team"], "IncludeAllTagsOfInstance": True}
    less = client.deregister_instance_event_notification_attributes(
        InstanceTagAttribute={"IncludeAllTagsOfInstance": True}
    )  # all tags no longer; the key stays registered
    assert less["InstanceTagAttribute"] == {"InstanceTagKeys": ["team"], "IncludeAllTagsOfInstance": False}
    client.deregister_instance_event_notification_attributes(InstanceTagAttribute={"InstanceTagKeys": ["team"]})
    client.register_instance_event_notification_attributes(InstanceTagAttribute={"InstanceTagKeys": ["a", "b"]})
    fewer = client.deregister_instance_event_notification_attributes(InstanceTagAttribute={"InstanceTagKeys": ["a"]})
    assert fewer["InstanceTagAttribute"]["InstanceTagKeys"] == ["b"]
    none = client.deregister_instance_event_notification_attributes(
        InstanceTagAttribute={"IncludeAllTagsOfInstance": False}
    )
    assert none["InstanceTagAttribute"] == {"InstanceTagKeys": [], "IncludeAllTagsOfInstance": False}


def test_aws_cli_create_instance_event_window(wec2, tmp_path):
    done = aws(
        wec2,
        tmp_path,
        "create-instance-event-window",
        "--name",
        "cli-window",
        "--time-ranges",
        "StartWeekDay=monday,StartHour=2,EndWeekDay=wednesday,EndHour=8",
        "--tag-specifications",
        "ResourceType=instance-event-window,Tags=[{Key=K1,Value=V1}]",
    )
    assert done.returncode == 0, done.stderr
    window = json.loads(done.stdout)["InstanceEventWindow"]
    assert WINDOW_ID.match(window["InstanceEventWindowId"])
    assert window == {
        "InstanceEventWindowId": window["InstanceEventWindowId"],
        "Name": "cli-window",
        "State": "creating",
        "TimeRanges": [{"StartWeekDay": "monday", "StartHour": 2, "EndWeekDay": "wednesday", "EndHour": 8}],
        "AssociationTarget": {"InstanceIds": [], "Tags": [], "DedicatedHostIds": []},
        "Tags": [{"Key": "K1", "Value": "V1"}],
    }
    assert (
        wec2.service.settled_engine().component(Ec2Component).ec2_windows[window["InstanceEventWindowId"]].name
        == "cli-window"
    )
    refused = aws(wec2, tmp_path, "create-instance-event-window", "--cron-expression", "* 0-1 * * *")
    assert refused.returncode != 0 and "(InvalidParameterValue)" in refused.stderr


# ------------------------------------------------------------------------------------------------ SigV4 checking
KEYS = {"AKIAFOREWARNTEST0001": "the-right-secret", "AKIAFOREWARNTEST0002": "another-secret"}


class SignedServer(Ec2Server):
    def __init__(self, service: Maintenance, credentials: dict[str, str]):
        super().__init__(service)
        import uvicorn

        config = uvicorn.Config(
            create_ec2_app(service, credentials), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def client(self, region: str = "us-east-1", key: str = "AKIAFOREWARNTEST0001", secret: str = "the-right-secret"):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "ec2",
            endpoint_url=self.url,
            region_name=region,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=Config(retries={"max_attempts": 1}),
        )


def signed_server(tmp_path, wall=time.time) -> tuple[SignedServer, Maintenance]:
    service = Maintenance.open(
        open_store(str(tmp_path / "signed.db")), parse_fleet(FLEET), "manual", 1.0, T0, "seed", wall=wall
    )
    return SignedServer(service, KEYS).start(), service


@pytest.fixture
def signed(tmp_path):
    import boto3  # noqa: F401

    server, service = signed_server(tmp_path)
    yield server
    server.stop()
    service.store.close()


def test_sigv4_right_key_wrong_secret_unknown_key(signed):
    schedule(signed.service, "system-reboot", EBS)
    assert sorted(statuses(signed.client())) == EAST  # the right key: served, region from the scope
    assert sorted(statuses(signed.client("us-west-2", "AKIAFOREWARNTEST0002", "another-secret"))) == [WEST]
    created = signed.client().create_instance_event_window(Name="signed", CronExpression="* 0-4 * * 1,2")
    assert created["InstanceEventWindow"]["State"] == "creating"
    wrong = client_error(signed.client(secret="not-the-secret").describe_instance_status)
    assert wrong["Error"] == {
        "Code": "SignatureDoesNotMatch",
        "Message": (
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
            "Access Key and signing method. Consult the service documentation for details."
        ),
    }
    assert wrong["ResponseMetadata"]["HTTPStatusCode"] == 403
    unknown = client_error(
        signed.client(key="AKIAUNKNOWNKEY000000").create_instance_event_window, Name="x", CronExpression="* 0-4 * * 1,2"
    )
    assert unknown["Error"] == {
        "Code": "AuthFailure",
        "Message": "AWS was not able to validate the provided access credentials",
    }
    assert unknown["ResponseMetadata"]["HTTPStatusCode"] == 401
    assert (
        len(signed.service.settled_engine().component(Ec2Component).ec2_windows) == 1
    )  # refused requests changed nothing


def test_sigv4_on_the_wire(signed):
    """Requests built by hand and signed with botocore: tampering, missing or malformed signatures, presigned URLs."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    body = "Action=DescribeInstanceStatus&Version=2016-11-15&InstanceId.1=" + EBS

    def sign(
        data: str = body, key: str = "AKIAFOREWARNTEST0001", secret: str = "the-right-secret", service: str = "ec2"
    ) -> AWSRequest:
        request = AWSRequest(
            "POST",
            signed.url + "/",
            data=data,
            headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8", "User-Agent": "forewarn-test"},
        )
        SigV4Auth(Credentials(key, secret), service, "us-east-1").add_auth(request)
        return request

    def send(request: AWSRequest, content=None, **headers) -> httpx.Response:
        sent = dict(request.headers.items())
        sent.update(headers)
        return httpx.post(
            request.url,
            content=request.body if content is None else content,
            headers={k: v for k, v in sent.items() if v is not None},
        )

    assert send(sign()).status_code == 200
    # The body or a signed header changed on the way: the signature no longer matches.
    assert error(send(sign(), content=body.replace(EBS, STORE).encode()), 403)[0] == "SignatureDoesNotMatch"
    assert (
        error(send(sign(), **{"Content-Type": "application/x-www-form-urlencoded"}), 403)[0] == "SignatureDoesNotMatch"
    )
    assert error(send(sign(service="s3")), 403)[0] == "SignatureDoesNotMatch"  # scoped to another service
    # An SDK that signs User-Agent (botocore does not) and sends X-Amz-Content-SHA256.
    request = AWSRequest(
        "POST",
        signed.url + "/",
        data=body,
        headers={
            "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
            "User-Agent": "other-sdk/1.0",
            "X-Amz-Content-SHA256": hashlib.sha256(body.encode()).hexdigest(),
        },
    )

    class SignsEverything(SigV4Auth):
        def headers_to_sign(self, request):
            headers = super().headers_to_sign(request)
            headers["user-agent"] = request.headers["User-Agent"]
            return headers

    SignsEverything(Credentials("AKIAFOREWARNTEST0001", "the-right-secret"), "ec2", "us-east-1").add_auth(request)
    assert "user-agent" in request.headers["Authorization"]
    assert send(request).status_code == 200
    assert error(send(request, **{"X-Amz-Content-SHA256": "0" * 64}), 403)[0] == "SignatureDoesNotMatch"
    # Unsigned, malformed, or another signature version.
    assert error(httpx.post(signed.url + "/", content=body)) == (
        "MissingParameter",
        "The request must contain the parameter AWSAccessKeyId",
    )
    code, message = error(
        send(
            sign(), Authorization="AWS4-HMAC-SHA256 Credential=AKIAFOREWARNTEST0001/20260420/us-east-1/ec2/aws4_request"
        )
    )
    assert code == "IncompleteSignature" and "Authorization header requires 'Signature' parameter." in message
    assert error(send(sign(), Authorization="AWS3 x"))[0] == "IncompleteSignature"
    assert error(send(sign(), **{"X-Amz-Date": None}))[0] == "IncompleteSignature"
    sigv2 = httpx.get(
        signed.url + "/",
        params={
            "Action": "DescribeInstanceStatus",
            "Version": "2016-11-15",
            "AWSAccessKeyId": "AKIAFOREWARNTEST0001",
            "Signature": "x",
            "SignatureVersion": "2",
        },
    )
    assert error(sigv2)[0] == "IncompleteSignature"
    # Presigned URLs (query-string SigV4): good, altered, unknown key.
    client = signed.client()
    url = client.generate_presigned_url("describe_instance_status", Params={"InstanceIds": [EBS]}, HttpMethod="GET")
    presigned = httpx.get(url)
    assert presigned.status_code == 200 and EBS in presigned.text
    assert error(httpx.get(url.replace(EBS, STORE)), 403)[0] == "SignatureDoesNotMatch"
    assert error(httpx.post(url), 403)[0] == "SignatureDoesNotMatch"  # signed for GET
    stranger = signed.client(key="AKIAUNKNOWNKEY000000").generate_presigned_url(
        "describe_instance_status", Params={}, HttpMethod="GET"
    )
    assert error(httpx.get(stranger), 401)[0] == "AuthFailure"


def test_sigv4_request_expired_against_the_wall_clock(tmp_path):
    """Timestamps are compared with the wall clock (the simulated clock is elsewhere): 15 minutes of skew."""
    server, service = signed_server(tmp_path, wall=lambda: time.time() + 3600)  # the client is an hour behind
    try:
        expired = client_error(server.client().describe_instance_status)
        assert expired["Error"] == {"Code": "RequestExpired", "Message": "Request has expired."}
        assert expired["ResponseMetadata"]["HTTPStatusCode"] == 400
        url = server.client().generate_presigned_url(
            "describe_instance_status", Params={}, HttpMethod="GET", ExpiresIn=60
        )
        assert error(httpx.get(url))[0] == "RequestExpired"
        # A presigned URL is good until it expires, however long ago it was signed.
        url = server.client().generate_presigned_url(
            "describe_instance_status", Params={}, HttpMethod="GET", ExpiresIn=7200
        )
        assert httpx.get(url).status_code == 200
    finally:
        server.stop()
        service.store.close()
    (tmp_path / "near").mkdir()
    server, service = signed_server(tmp_path / "near", wall=lambda: time.time() + 600)
    try:
        assert server.client().describe_instance_status()["InstanceStatuses"]  # 10 minutes: within the skew
    finally:
        server.stop()
        service.store.close()
    (tmp_path / "ahead").mkdir()
    server, service = signed_server(tmp_path / "ahead", wall=lambda: time.time() - 3600)  # the client is ahead
    try:
        assert client_error(server.client().describe_instance_status)["Error"]["Code"] == "RequestExpired"
        url = server.client().generate_presigned_url(
            "describe_instance_status", Params={}, HttpMethod="GET", ExpiresIn=7200
        )
        assert error(httpx.get(url))[0] == "RequestExpired"  # signed in the future
    finally:
        server.stop()
        service.store.close()


def test_credentials_need_botocore(tmp_path, monkeypatch):
    service = open_service(tmp_path / "nobotocore.db")
    try:
        create_ec2_app(service)  # no credentials: botocore is not needed
        for name in ("botocore.auth", "botocore.awsrequest", "botocore.compat", "botocore.credentials"):
            monkeypatch.setitem(sys.modules, name, None)  # importing it fails, as if it were not installed
        with pytest.raises(ImportError, match=re.escape("needs the extra: pip install 'forewarn[sigv4]'")):
            create_ec2_app(service, KEYS)
        create_ec2_app(service)
    finally:
        service.store.close()
