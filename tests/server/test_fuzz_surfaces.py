"""Fuzzing the wire surfaces of real servers: generated IMDS POST bodies, ARM bodies (VM PATCH/PUT, acknowledge
single and list, Resource Graph requests with random KQL), and EC2 Query API parameters (random actions and values,
unsigned mode). Every answer must be below 500 and in its surface's own error shape, and the server must live on.

Bounded for ``make test`` (FOREWARN_FUZZ_EXAMPLES examples per test, default 40); a longer run:
``FOREWARN_FUZZ_EXAMPLES=2000 pytest tests/server/test_fuzz_surfaces.py -s`` (``-s`` prints the outcomes by status).
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import xml.etree.ElementTree as ET
from collections import Counter
from urllib.parse import quote, urlencode

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import Server

EXAMPLES = int(os.environ.get("FOREWARN_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
CENTRAL = "{scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}"
AZURE_FLEET = f"""
default_vm: solo
defaults: {{subscription: {SUB}, resource_group: rg, location: westeurope}}
hosts: [{{name: h1}}, {{name: h2}}]
availability_sets:
  - {{name: db, scheduled_events_policy: {CENTRAL}}}
vms:
  - {{name: solo, host: h1, scheduled_events_policy: {CENTRAL}}}
  - {{name: db-0, host: h1, availability_set: db}}
  - {{name: db-1, host: h2, availability_set: db}}
scale_sets:
  - {{name: web, instances: 2, hosts: [h1, h2], scheduled_events_policy: {CENTRAL}}}
"""
INSTANCES = ["i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2", "i-0ccccccccccccccc3"]
EC2_FLEET = "hosts: [{name: h1}, {name: h2}]\nec2_instances:\n" + "".join(
    f"  - {{id: {iid}, host: h{1 + n % 2}}}\n" for n, iid in enumerate(INSTANCES)
)
RG = f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute"

OUTCOMES: Counter = Counter()  # (surface, status) -> answers


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    by_surface: dict[str, dict[int, int]] = {}
    for (surface, status), count in sorted(OUTCOMES.items()):
        by_surface.setdefault(surface, {})[status] = count
    print(f"\nfuzz outcomes ({EXAMPLES} examples a test):")
    for surface, statuses in by_surface.items():
        print(
            f"  {surface:<22} {sum(statuses.values()):>6} requests  "
            + "  ".join(f"{status}: {count}" for status, count in statuses.items())
        )


# ---------------------------------------------------------------------------------------------------- servers
@pytest.fixture(scope="module")
def azure(tmp_path_factory):
    server = Server(
        tmp_path_factory.mktemp("azure"), AZURE_FLEET, extra=["--resource-graph-query-timeout", "2s"]
    ).start()
    events = server.schedule(type="Freeze", vms=["solo"]) + server.schedule(type="Reboot", vms=["web_0"])
    server.event_ids = [event["event_id"] for event in events]
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ec2(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("ec2"), EC2_FLEET).start()
    requests.post(
        f"{server.control}/v1/ec2/events", json={"code": "system-reboot", "instances": INSTANCES[:1]}, timeout=10
    ).raise_for_status()
    yield server
    server.stop()


def alive(server: Server) -> None:
    assert server.process.poll() is None, "the server died"
    assert requests.get(f"{server.control}/healthz", timeout=10).status_code == 200


# Resource Graph allows 15 queries per 5 s per caller; loopback has a whole /8 of source addresses to spread over.
_SOURCES = itertools.cycle(f"127.0.0.{n}" for n in range(2, 250))


def send(base: str, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, bytes, str]:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30, source_address=(next(_SOURCES), 0))
    try:
        connection.request(method, path, body=body, headers={"content-length": str(len(body)), **(headers or {})})
        response = connection.getresponse()
        return response.status, response.read(), response.getheader("content-type", "")
    finally:
        connection.close()


# -------------------------------------------------------------------------------------------------- strategies
TEXT = st.text(max_size=30)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=20,
)
NESTED = st.builds(
    lambda depth, key: (('{"%s":' % key) * depth + "1" + "}" * depth).encode(),
    st.integers(0, 3000),
    st.sampled_from(["StartRequests", "value", "properties", "query", "a"]),
)
RAW = st.binary(max_size=200)


def json_body(structured):
    """Bodies as a client might get them wrong: the structured kind, any JSON value, deep nesting, raw bytes."""
    return st.one_of(
        structured.map(lambda value: json.dumps(value).encode()),
        JSON_VALUES.map(lambda value: json.dumps(value).encode()),
        NESTED,
        RAW,
    )


# ------------------------------------------------------------------------------------------------------- IMDS
def imds_body():
    event_id = st.one_of(TEXT, st.sampled_from(["", " ", "\u0000", "A" * 300]))
    request = st.fixed_dictionaries({"EventId": st.one_of(event_id, JSON_VALUES)})
    return json_body(st.fixed_dictionaries({"StartRequests": st.one_of(st.lists(request, max_size=5), JSON_VALUES)}))


@FUZZ
@given(
    body=imds_body(),
    version=st.sampled_from(["2020-07-01", "2019-08-01", "2017-08-01", "2017-03-01", "x", ""]),
    real_id=st.booleans(),
)
def test_imds_post_bodies(azure, body, version, real_id):
    if real_id:
        body = json.dumps({"StartRequests": [{"EventId": azure.event_ids[0].lower()}]}).encode()
    status, content, content_type = send(
        azure.imds,
        "POST",
        f"/metadata/scheduledevents?api-version={version}",
        body,
        {"Metadata": "true", "content-type": "application/json"},
    )
    OUTCOMES["imds POST", status] += 1
    assert status < 500, content
    if status >= 400:
        assert content_type.startswith("application/json")
        error = json.loads(content)
        # IMDS's shape; a bad api-version also lists the newest versions, as real IMDS does.
        assert isinstance(error.get("error"), str) and set(error) <= {"error", "newest-versions"}, content


def test_imds_still_serves_after_fuzzing(azure):
    assert azure.scheduled_events().status_code == 200
    alive(azure)


# -------------------------------------------------------------------------------------------------------- ARM
def arm_answer(surface: str, status: int, content: bytes, content_type: str) -> dict | list:
    OUTCOMES[surface, status] += 1
    assert status < 500, content
    assert content_type.startswith("application/json"), (status, content_type, content)
    answer = json.loads(content) if content else {}
    if status >= 400:
        assert set(answer) == {"error"}, content
        error = answer["error"]
        assert isinstance(error.get("code"), str) and error["code"], content
        assert isinstance(error.get("message"), str), content
    return answer


API_VERSIONS = st.sampled_from(
    ["2024-07-01", "2023-09-01", "2021-03-01", "2017-12-01", "2015-06-15", "2099-01-01", "1999-01-01", "garbage", ""]
)
VM_NAMES = st.sampled_from(["solo", "db-0", "web", "nope", "SOLO"])
POLICY = st.fixed_dictionaries(
    {},
    optional={
        "userInitiatedReboot": st.fixed_dictionaries({}, optional={"automaticallyApprove": JSON_VALUES}),
        "userInitiatedRedeploy": st.fixed_dictionaries({}, optional={"automaticallyApprove": JSON_VALUES}),
        "scheduledEventsAdditionalPublishingTargets": st.fixed_dictionaries(
            {}, optional={"eventGridAndResourceGraph": st.fixed_dictionaries({}, optional={"enable": JSON_VALUES})}
        ),
    },
)
VM_BODY = st.fixed_dictionaries(
    {},
    optional={
        "location": st.one_of(TEXT, JSON_VALUES),
        "tags": JSON_VALUES,
        "properties": st.one_of(
            JSON_VALUES,
            st.fixed_dictionaries(
                {},
                optional={
                    "scheduledEventsPolicy": st.one_of(POLICY, JSON_VALUES),
                    "scheduledEventsProfile": st.one_of(
                        JSON_VALUES,
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "terminateNotificationProfile": st.fixed_dictionaries(
                                    {},
                                    optional={
                                        "enable": JSON_VALUES,
                                        "notBeforeTimeout": st.one_of(TEXT, st.sampled_from(["PT5M", "PT15M", "P1D"])),
                                    },
                                ),
                                "osImageNotificationProfile": JSON_VALUES,
                            },
                        ),
                    ),
                    "hardwareProfile": JSON_VALUES,
                },
            ),
        ),
    },
)


@FUZZ
@given(method=st.sampled_from(["PATCH", "PUT"]), name=VM_NAMES, version=API_VERSIONS, body=json_body(VM_BODY))
def test_arm_vm_patch_and_put_bodies(azure, method, name, version, body):
    path = f"{RG}/virtualMachines/{name}?{urlencode({'api-version': version})}"
    status, content, content_type = send(azure.arm, method, path, body, {"content-type": "application/json"})
    answer = arm_answer(f"arm VM {method}", status, content, content_type)
    if status < 400:
        assert isinstance(answer, dict)


def event_id_strategy(azure):
    return st.one_of(
        st.sampled_from(azure.event_ids),
        TEXT.filter(lambda text: "/" not in text and "?" not in text and "#" not in text),
        st.just("%2F%00"),
    )


@FUZZ
@given(
    data=st.data(),
    owner=st.sampled_from(
        ["virtualMachines/solo", "virtualMachineScaleSets/web", "availabilitySets/db", "virtualMachines/nope"]
    ),
    version=st.sampled_from(["2023-10-01-preview", "2025-10-01-preview", "2020-01-01", ""]),
    body=json_body(st.fixed_dictionaries({}, optional={"value": JSON_VALUES})),
)
def test_arm_acknowledge_single_and_list(azure, data, owner, version, body):
    base = f"{RG}/{owner}/providers/Microsoft.Maintenance/scheduledevents"
    if data.draw(st.booleans(), label="single"):
        event_id = data.draw(event_id_strategy(azure), label="event id")
        path = f"{base}/{quote(event_id, safe='')}/acknowledge"
        surface = "arm acknowledge"
    else:
        ids = data.draw(st.lists(event_id_strategy(azure), max_size=5), label="ids")
        if ids and data.draw(st.booleans(), label="structured"):
            body = json.dumps({"value": ids}).encode()
        path = base
        surface = "arm acknowledge list"
    status, content, content_type = send(
        azure.arm, "POST", f"{path}?{urlencode({'api-version': version})}", body, {"content-type": "application/json"}
    )
    arm_answer(surface, status, content, content_type)


KQL_TOKENS = [
    "maintenanceresources",
    "Maintenanceresources",
    "|",
    "where",
    "project",
    "extend",
    "summarize",
    "count()",
    "count",
    "by",
    "join",
    "kind=inner",
    "kind=leftouter",
    "kind=leftsemi",
    "(",
    ")",
    "mv-expand",
    "union",
    "take",
    "limit",
    "order by",
    "sort by",
    "asc",
    "desc",
    "top",
    "distinct",
    "tostring(",
    "todatetime(",
    "parse_json(",
    "properties.EventStatus",
    "properties.NotBefore",
    "properties",
    "name",
    "id",
    "type",
    "zones",
    "==",
    "=~",
    "!=",
    "in~",
    "has",
    "contains",
    "'Scheduled'",
    '"x"',
    "and",
    "or",
    "not(",
    "ago(1d)",
    "now()",
    ",",
    "1",
    "-1",
    "99999999999999999999",
    "1e308",
    "let",
    "=",
    ";",
    ".show",
    "range",
    "datatable",
    "externaldata",
    "evaluate",
    "[",
    "]",
    "$left",
    "$right",
    "on",
    "//",
    "\\",
    "'",
    '"',
    "forewarn_maintenance_rows",
    "information_schema.tables",
    "read_csv('x')",
    "make_set(",
    "arg_max(",
    "split(",
    "iff(",
    "dynamic(",
    "strcat(",
    "repeat('a', 10)",
    "bag_keys(",
    "{",
    "}",
    "null",
    "true",
]
COLUMNS = [
    "name",
    "id",
    "type",
    "location",
    "resourceGroup",
    "subscriptionId",
    "zones",
    "properties.EventStatus",
    "properties.EventType",
    "properties.Resources",
    "properties.DurationInSeconds",
    "properties.NotBefore",
]
LITERALS = st.one_of(
    st.sampled_from(
        [
            "'Scheduled'",
            "'Freeze'",
            "1",
            "-1",
            "5.5",
            "true",
            "datetime(2026-04-20)",
            "ago(1h)",
            "now()",
            "dynamic(['a'])",
            "''",
        ]
    ),
    TEXT.map(lambda text: json.dumps(text)),
)
COLUMN = st.sampled_from(COLUMNS)
STAGES = st.one_of(
    st.builds(
        "where {} {} {}".format,
        COLUMN,
        st.sampled_from(["==", "!=", "=~", "has", "contains", ">", "<", "startswith", "in~"]),
        LITERALS,
    ),
    st.builds("project {}".format, st.lists(COLUMN, min_size=1, max_size=4).map(", ".join)),
    st.builds(
        "extend x = {}({})".format,
        st.sampled_from(
            ["tostring", "todatetime", "toint", "strlen", "tolower", "array_length", "isnull", "parse_json"]
        ),
        COLUMN,
    ),
    st.builds("summarize count() by {}".format, COLUMN.map(lambda column: f"tostring({column})")),
    st.builds(
        "order by {} {}".format, COLUMN.map(lambda column: f"tostring({column})"), st.sampled_from(["asc", "desc"])
    ),
    st.builds("take {}".format, st.integers(-3, 3000)),
    st.builds("top {} by name".format, st.integers(-3, 3000)),
    st.just("mv-expand r = properties.Resources"),
    st.just("join kind=inner (maintenanceresources | project id, s = tostring(properties.EventStatus)) on id"),
    st.just("union (maintenanceresources)"),
    st.just("distinct type"),
    st.just("count"),
)
STRUCTURED_KQL = st.builds(
    lambda table, stages: " | ".join([table, *stages]),
    st.sampled_from(["maintenanceresources", "MaintenanceResources", "resources"]),
    st.lists(STAGES, max_size=6),
)
KQL = st.one_of(
    STRUCTURED_KQL, st.lists(st.one_of(st.sampled_from(KQL_TOKENS), TEXT), min_size=0, max_size=25).map(" ".join)
)
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "$top": st.one_of(st.integers(-5, 2000), JSON_VALUES),
        "$skip": st.one_of(st.integers(-5, 5000), JSON_VALUES),
        "$skipToken": st.one_of(TEXT, st.just("eyJvZmZzZXQiOiAxLCAicXVlcnkiOiAieCJ9")),
        "resultFormat": st.one_of(st.sampled_from(["objectArray", "table", "TABLE", "csv"]), JSON_VALUES),
    },
)
FACET = st.fixed_dictionaries(
    {"expression": st.one_of(st.sampled_from(["properties.EventType", "type", "id"]), TEXT, JSON_VALUES)},
    optional={
        "options": st.one_of(
            JSON_VALUES,
            st.fixed_dictionaries(
                {},
                optional={
                    "sortBy": st.one_of(TEXT, st.just("count")),
                    "sortOrder": TEXT,
                    "$top": st.one_of(st.integers(-1, 2000), JSON_VALUES),
                    "filter": st.one_of(KQL, TEXT),
                },
            ),
        )
    },
)
ARG_BODY = st.fixed_dictionaries(
    {"query": st.one_of(KQL, JSON_VALUES)},
    optional={
        "subscriptions": st.one_of(st.lists(st.one_of(st.just(SUB), TEXT), max_size=3), JSON_VALUES),
        "options": st.one_of(OPTIONS, JSON_VALUES),
        "facets": st.one_of(st.lists(FACET, max_size=3), JSON_VALUES),
        "managementGroups": JSON_VALUES,
    },
)


@FUZZ
@given(body=json_body(ARG_BODY), version=st.sampled_from(["2022-10-01", "2021-03-01", "2024-04-01-preview", "x"]))
def test_resource_graph_request_bodies(azure, body, version):
    status, content, content_type = send(
        azure.arm,
        "POST",
        "/providers/Microsoft.ResourceGraph/resources?" + urlencode({"api-version": version}),
        body,
        {"content-type": "application/json"},
    )
    answer = arm_answer("resource graph", status, content, content_type)
    if status == 200:
        assert {"totalRecords", "count", "resultTruncated", "facets", "data"} <= set(answer)
    elif status == 400 and "details" in answer["error"]:
        assert all({"code", "message"} <= set(detail) for detail in answer["error"]["details"])


def test_arm_still_serves_after_fuzzing(azure):
    answer = requests.post(
        f"{azure.arm}/providers/Microsoft.ResourceGraph/resources",
        params={"api-version": "2022-10-01"},
        json={"query": "maintenanceresources | count"},
        timeout=30,
    )
    assert answer.status_code in (200, 429), answer.text
    alive(azure)


# -------------------------------------------------------------------------------------------------------- EC2
ACTIONS = [
    "DescribeInstanceStatus",
    "ModifyInstanceEventStartTime",
    "CreateInstanceEventWindow",
    "DescribeInstanceEventWindows",
    "ModifyInstanceEventWindow",
    "DeleteInstanceEventWindow",
    "AssociateInstanceEventWindow",
    "DisassociateInstanceEventWindow",
    "RegisterInstanceEventNotificationAttributes",
    "DeregisterInstanceEventNotificationAttributes",
    "DescribeInstanceEventNotificationAttributes",
]
PARAMETER_NAMES = [
    "InstanceId.1",
    "InstanceId.2",
    "Filter.1.Name",
    "Filter.1.Value.1",
    "Filter.2.Name",
    "Filter.2.Value.1",
    "MaxResults",
    "NextToken",
    "IncludeAllInstances",
    "InstanceEventId",
    "NotBefore",
    "DryRun",
    "Name",
    "CronExpression",
    "TimeRange.1.StartWeekDay",
    "TimeRange.1.StartHour",
    "TimeRange.1.EndWeekDay",
    "TimeRange.1.EndHour",
    "InstanceEventWindowId",
    "InstanceEventWindowId.1",
    "AssociationTarget.InstanceId.1",
    "AssociationTarget.InstanceTag.1.Key",
    "AssociationTarget.InstanceTag.1.Value",
    "AssociationTarget.DedicatedHostId.1",
    "TagSpecification.1.ResourceType",
    "TagSpecification.1.Tag.1.Key",
    "TagSpecification.1.Tag.1.Value",
    "InstanceTagAttribute.IncludeAllTagsOfInstance",
    "InstanceTagAttribute.InstanceTagKey.1",
    "InstanceId.0",
    "InstanceId.99999999999",
    "Filter.1.Value.0",
]
VALUES = st.one_of(
    TEXT,
    st.sampled_from(
        INSTANCES
        + [
            "true",
            "false",
            "0",
            "-1",
            "1000",
            "99999999999999999999",
            "2026-04-21T00:00:00Z",
            "2026-13-45T99:00:00Z",
            "monday",
            "instance-state-name",
            "event.code",
            "system-reboot",
            "* * * * *",
            "cron(0 0 * * ?)",
            "iew-0123456789abcdef0",
            "instance-status.reachability",
            "",
        ]
    ),
)


@FUZZ
@given(
    action=st.one_of(st.sampled_from(ACTIONS), TEXT),
    version=st.sampled_from(["2016-11-15", "2014-01-01", ""]),
    parameters=st.dictionaries(st.one_of(st.sampled_from(PARAMETER_NAMES), TEXT), VALUES, max_size=8),
    method=st.sampled_from(["POST", "GET"]),
    path=st.one_of(st.just("/"), TEXT.map(lambda text: "/" + quote(text))),
)
def test_ec2_query_api_parameters(ec2, action, version, parameters, method, path):
    form = urlencode({"Action": action, "Version": version, **parameters})
    if method == "POST":
        status, content, _ = send(
            ec2.ec2, "POST", path, form.encode(), {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}
        )
    else:
        status, content, _ = send(ec2.ec2, "GET", f"{path}?{form}")
    OUTCOMES["ec2 query api", status] += 1
    assert status < 500, content
    root = ET.fromstring(content)
    if status >= 400:
        assert root.tag == "Response", content
        assert root.findtext("Errors/Error/Code") and root.find("Errors/Error/Message") is not None, content
        assert root.findtext("RequestID"), content
    else:
        assert root.tag.endswith(f"}}{action}Response"), content


@FUZZ
@given(body=RAW, content_type=st.sampled_from(["application/x-www-form-urlencoded", "text/plain", ""]))
def test_ec2_query_api_raw_bodies(ec2, body, content_type):
    status, content, _ = send(ec2.ec2, "POST", "/", body, {"content-type": content_type} if content_type else {})
    OUTCOMES["ec2 query api raw", status] += 1
    assert status < 500, content
    root = ET.fromstring(content)
    assert root.tag == "Response" and root.findtext("Errors/Error/Code"), content


def test_ec2_still_serves_after_fuzzing(ec2):
    status, content, _ = send(
        ec2.ec2,
        "POST",
        "/",
        urlencode({"Action": "DescribeInstanceStatus", "Version": "2016-11-15"}).encode(),
        {"content-type": "application/x-www-form-urlencoded"},
    )
    assert status == 200, content
    alive(ec2)


# ------------------------------------------------------------------------------------------ found by fuzzing
def test_a_path_with_an_encoded_newline_is_answered_in_the_surfaces_shape(azure, ec2):
    """Starlette's path route does not match a newline: such paths got a plain-text 404 outside ARM's and EC2's
    shapes."""
    status, content, content_type = send(
        azure.arm,
        "POST",
        f"{RG}/virtualMachines/solo/providers/Microsoft."
        "Maintenance/scheduledevents/%0A/acknowledge?api-version=2023-10-01-preview",
    )
    assert arm_answer("arm acknowledge", status, content, content_type)["error"]["code"]
    status, content, _ = send(ec2.ec2, "GET", "/%0A?Action=DescribeInstanceStatus&Version=2016-11-15")
    assert status == 200 and ET.fromstring(content).tag.endswith("}DescribeInstanceStatusResponse"), content
