"""Event Grid's MaintenanceResources system topic: the model (pure), and end to end against a real ``forewarn serve``
and a real webhook process (tests/eventgrid_receiver.py): handshakes, delivery through the event lifecycle, headers,
filters, batching, retries on the manual clock, dead letters, time to live, duplicates, and no loss across kill -9.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from eventgrid_helpers import API, FLEET, OTHER_SUB, SUB, Arm, Webhook, wait_for
from forewarn.azure.arm.wire import ArmError
from forewarn.azure.eventgrid import filters
from forewarn.azure.eventgrid.delivery import EventGridDelivery, batches, dead_letter_event, retry_delay
from forewarn.azure.eventgrid.events import as_cloud_event, scheduled_event_emitted
from forewarn.azure.eventgrid.model import (
    AdvancedFilter,
    EventSubscription,
    SubscriptionFilter,
    parse_subscription_body,
    parse_topic_body,
)
from forewarn.azure.eventgrid.settings import EventGridSettings
from forewarn.azure.model import Event, EventSource, EventStatus, EventType
from forewarn.azure.vms import VM
from forewarn.core.ids import derived_guid
from forewarn.store import Delivery
from helpers import ROOT, T0, Server, free_port, open_store

EVENT_TYPE = "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted"
GROUP_ID = f"/subscriptions/{SUB}/resourceGroups/contoso-rg/providers/Microsoft.Compute"


def status_of(event: dict) -> str:
    return event["data"]["resourceInfo"]["properties"]["EventStatus"]


def event_id_of(event: dict) -> str:
    return event["data"]["resourceInfo"]["properties"]["EventId"]


def write_event_grid_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "eventgrid.yaml"
    path.write_text(text)
    return path


def deliveries(server: Server) -> list[dict]:
    return [d for d in requests.get(f"{server.control}/v1/deliveries", timeout=10).json() if d["kind"] == "eventgrid"]


# ============================================================================================= pure: rendering
def _event(status=EventStatus.SCHEDULED, resources=("myvmss_1", "myvmss_2")) -> Event:
    return Event(
        event_id="3DA1B9AA-5204-4335-8C33-C54E315DCFFE",
        seq=1,
        operation_id="op",
        scope="s",
        event_type=EventType.FREEZE,
        source=EventSource.PLATFORM,
        resources=resources,
        description="Virtual machine is being paused.",
        duration_seconds=5,
        not_before=datetime(2025, 9, 19, 18, 29, 47, tzinfo=UTC),
        impact_window=timedelta(minutes=5),
        status=status,
        created_at=T0,
        central=True,
    )


def _vmss_vm() -> VM:
    return VM(
        name="myvmss_1",
        host="h",
        subscription_id=SUB,
        resource_group="rg-name",
        location="eastus",
        zone="",
        size="Standard_D2s_v3",
        fault_domain=0,
        update_domain=0,
        spot=False,
        vm_id="x",
        scale_set="myvmss",
        instance_id="1",
    )


def test_the_event_grid_event_has_the_documented_sample_shape():
    now = datetime(2017, 6, 26, 18, 41, 0, 958410, tzinfo=UTC)
    event = scheduled_event_emitted(
        _event(EventStatus.STARTED), _vmss_vm(), "started", now, "seed", EventGridSettings()
    )
    assert list(event) == ["id", "topic", "subject", "data", "eventType", "dataVersion", "metadataVersion", "eventTime"]
    resource_id = (
        f"/subscriptions/{SUB}/resourceGroups/rg-name/providers/Microsoft.Compute/virtualMachineScaleSets/"
        "myvmss/providers/microsoft.maintenance/scheduledevents/3DA1B9AA-5204-4335-8C33-C54E315DCFFE"
    )
    assert event["topic"] == f"/subscriptions/{SUB}" and event["subject"] == resource_id
    assert event["id"] == derived_guid("seed", "eventgrid", "3DA1B9AA-5204-4335-8C33-C54E315DCFFE", "started").lower()
    info = event["data"]["resourceInfo"]
    assert list(info) == ["id", "name", "type", "location", "properties"]
    assert (info["id"], info["name"], info["type"], info["location"]) == (
        resource_id,
        "3DA1B9AA-5204-4335-8C33-C54E315DCFFE",
        "microsoft.maintenance/scheduledEvents",
        "eastus",
    )
    assert info["properties"] == {
        "DurationInSeconds": 5,
        "Description": "Virtual machine is being paused.",
        "EventId": "3DA1B9AA-5204-4335-8C33-C54E315DCFFE",
        "EventSource": "Platform",
        "EventStatus": "Started",
        "EventType": "Freeze",
        "NotBefore": "",
        "Resources": ["myvmss_1", "myvmss_2"],
        "ResourceType": "VirtualMachine",
        "ScheduledEventApiVersion": "2020-07-01",
    }
    assert list(info["properties"])[:3] == ["DurationInSeconds", "Description", "EventId"]
    assert event["data"]["apiVersion"] == "2024-07-01" and list(event["data"]) == ["resourceInfo", "apiVersion"]
    assert (event["eventType"], event["dataVersion"], event["metadataVersion"]) == (EVENT_TYPE, "3.0", "1")
    assert event["eventTime"] == "2017-06-26T18:41:00.9584100Z"
    scheduled = scheduled_event_emitted(_event(), _vmss_vm(), "scheduled", now, "seed", EventGridSettings())
    assert scheduled["data"]["resourceInfo"]["properties"]["NotBefore"] == "Fri, 19 Sep 2025 18:29:47 GMT"
    assert scheduled["id"] != event["id"]
    cloud = as_cloud_event(event)
    assert list(cloud) == ["id", "source", "subject", "type", "time", "specversion", "data"]
    assert (cloud["source"], cloud["type"], cloud["specversion"]) == (f"/subscriptions/{SUB}", EVENT_TYPE, "1.0")


def test_the_mock_sample_variant_is_a_setting():
    settings = EventGridSettings(data_version="1", api_version="2020-03-01", subject_style="vm", arn_extras=True)
    event = scheduled_event_emitted(_event(), _vmss_vm(), "scheduled", T0, "seed", settings)
    assert (
        event["subject"] == f"/subscriptions/{SUB}/resourcegroups/rg-name/providers/microsoft.compute/"
        "virtualmachines/myvmss_1"
    )
    assert event["dataVersion"] == "1" and event["data"]["apiVersion"] == "2020-03-01"
    assert event["data"]["resourceInfo"]["tags"] == {}
    assert event["data"]["operationalInfo"] == {"resourceEventTime": "2026-04-20T22:11:58.0000000Z"}


# ============================================================================================ pure: ARM bodies
TOPIC_ID = f"/subscriptions/{SUB}/resourceGroups/g/providers/Microsoft.EventGrid/systemTopics/t"


def _body(**properties) -> dict:
    destination = properties.pop("destination", {"endpointUrl": "https://example.com/hook?code=secret"})
    return {"properties": {"destination": {"endpointType": "WebHook", "properties": destination}, **properties}}


def _string_filters(count: int, values: int = 1) -> list:
    return [{"operatorType": "StringIn", "key": "subject", "values": ["x"] * values}] * count


@pytest.mark.parametrize(
    "properties, fragment",
    [
        ({"destination": {"endpointUrl": "not a url"}}, "Supplied URL is invalid"),
        ({"destination": {"endpointUrl": "https://x", "maxEventsPerBatch": 0}}, "between 1 and 5000"),
        ({"destination": {"endpointUrl": "https://x", "maxEventsPerBatch": 5001}}, "between 1 and 5000"),
        ({"destination": {"endpointUrl": "https://x", "preferredBatchSizeInKilobytes": 1025}}, "between 1 and 1024"),
        (
            {
                "destination": {
                    "endpointUrl": "https://x",
                    "deliveryAttributeMappings": [
                        {"name": f"h{i}", "type": "Static", "properties": {"value": "v"}} for i in range(11)
                    ],
                }
            },
            "At most 10",
        ),
        (
            {
                "destination": {
                    "endpointUrl": "https://x",
                    "deliveryAttributeMappings": [
                        {"name": "AEG-custom", "type": "Static", "properties": {"value": "v"}}
                    ],
                }
            },
            "reserved prefix",
        ),
        (
            {
                "destination": {
                    "endpointUrl": "https://x",
                    "deliveryAttributeMappings": [{"name": "h", "type": "Static", "properties": {}}],
                }
            },
            "needs properties.value",
        ),
        (
            {
                "destination": {
                    "endpointUrl": "https://x",
                    "deliveryAttributeMappings": [{"name": "h", "type": "Dynamic", "properties": {}}],
                }
            },
            "needs properties.sourceField",
        ),
        (
            {
                "destination": {
                    "endpointUrl": "https://x",
                    "deliveryAttributeMappings": [{"name": "h", "type": "Other", "properties": {}}],
                }
            },
            "Static or Dynamic",
        ),
        ({"eventDeliverySchema": "CustomInputSchema"}, "not supported"),
        (
            {"filter": {"advancedFilters": [{"operatorType": "StringLike", "key": "subject", "values": ["x"]}]}},
            "not valid",
        ),
        ({"filter": {"advancedFilters": _string_filters(26)}}, "At most 25 advanced filters"),
        ({"filter": {"advancedFilters": _string_filters(2, 13)}}, "at most 25 values in total"),
        (
            {"filter": {"advancedFilters": [{"operatorType": "StringIn", "key": "subject", "values": ["x" * 513]}]}},
            "512 characters",
        ),
        (
            {"filter": {"advancedFilters": [{"operatorType": "NumberIn", "key": "data.a", "values": ["1"]}]}},
            "numeric values",
        ),
        (
            {"filter": {"advancedFilters": [{"operatorType": "NumberInRange", "key": "data.a", "values": [[5, 1]]}]}},
            "low <= high",
        ),
        (
            {"filter": {"advancedFilters": [{"operatorType": "BoolEquals", "key": "data.a", "value": "true"}]}},
            "boolean",
        ),
        ({"filter": {"advancedFilters": [{"operatorType": "StringIn", "key": "data..a", "values": ["x"]}]}}, "key"),
        ({"retryPolicy": {"maxDeliveryAttempts": 31}}, "between 1 and 30"),
        ({"retryPolicy": {"eventTimeToLiveInMinutes": 0}}, "between 1 and 1440"),
        ({"retryPolicy": {"maxDeliveryAttempts": "3"}}, "integer"),
        (
            {
                "deadLetterDestination": {
                    "endpointType": "StorageBlob",
                    "properties": {
                        "resourceId": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct",
                        "blobContainerName": "Bad_Name",
                    },
                }
            },
            "Blob container name",
        ),
        (
            {
                "deadLetterDestination": {
                    "endpointType": "StorageBlob",
                    "properties": {"resourceId": "/not/a/storage/account", "blobContainerName": "dl"},
                }
            },
            "storage account id",
        ),
        ({"expirationTimeUtc": "2020-01-01T00:00:00Z"}, "must be in the future"),
        ({"deliveryWithResourceIdentity": {"identity": {"type": "SystemAssigned"}}}, "not emulated"),
    ],
)
def test_refused_subscription_bodies_get_arm_400s(properties, fragment):
    with pytest.raises(ArmError) as refused:
        parse_subscription_body(_body(**properties), TOPIC_ID, "sub-1", T0)
    assert refused.value.status == 400 and refused.value.code == "InvalidRequest"
    assert (
        refused.value.message.startswith("Invalid event subscription request: ") and fragment in refused.value.message
    )


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 6000)
    | st.floats(allow_nan=True)
    | st.text(max_size=6)
    | st.sampled_from(["WebHook", "StorageBlob", "StringIn", "Static", "Dynamic", "https://x/y"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "destination",
                    "endpointType",
                    "properties",
                    "endpointUrl",
                    "maxEventsPerBatch",
                    "filter",
                    "advancedFilters",
                    "operatorType",
                    "key",
                    "value",
                    "values",
                    "retryPolicy",
                    "deliveryAttributeMappings",
                    "name",
                    "type",
                    "deadLetterDestination",
                    "labels",
                    "includedEventTypes",
                    "eventDeliverySchema",
                    "expirationTimeUtc",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(properties=_JSON)
def test_property_any_body_is_parsed_or_refused_with_an_arm_error(properties):
    try:
        parsed = parse_subscription_body({"properties": properties}, TOPIC_ID, "sub-1", T0)
    except ArmError as error:
        assert error.status == 400
    else:
        assert EventSubscription.from_record(json.loads(json.dumps(parsed.to_record()))) == parsed


def test_names_topics_and_missing_members_are_checked():
    for name in ("ab", "has_underscore", "x" * 65):
        with pytest.raises(ArmError):
            parse_subscription_body(_body(), TOPIC_ID, name, T0)
    with pytest.raises(ArmError, match="'destination' is required"):
        parse_subscription_body({"properties": {}}, TOPIC_ID, "sub-1", T0)
    with pytest.raises(ArmError) as missing:
        parse_topic_body({"properties": {}}, SUB)
    assert missing.value.code == "LocationRequired"
    for body in (
        {
            "location": "westeurope",
            "properties": {
                "source": f"/subscriptions/{SUB}",
                "topicType": "Microsoft.ResourceNotifications.MaintenanceResources",
            },
        },
        {
            "location": "global",
            "properties": {
                "source": f"/subscriptions/{OTHER_SUB}",
                "topicType": "Microsoft.ResourceNotifications.MaintenanceResources",
            },
        },
        {
            "location": "global",
            "properties": {"source": f"/subscriptions/{SUB}", "topicType": "Microsoft.Storage.StorageAccounts"},
        },
    ):
        with pytest.raises(ArmError) as refused:
            parse_topic_body(body, SUB)
        assert refused.value.status == 400


def test_a_full_subscription_survives_the_store_and_hides_secrets_in_arm():
    body = _body(
        destination={
            "endpointUrl": "https://example.com/hook?code=secret",
            "maxEventsPerBatch": 10,
            "preferredBatchSizeInKilobytes": 128,
            "deliveryAttributeMappings": [
                {"name": "x-static", "type": "Static", "properties": {"value": "v1"}},
                {"name": "x-secret", "type": "Static", "properties": {"value": "s", "isSecret": True}},
                {
                    "name": "x-status",
                    "type": "Dynamic",
                    "properties": {"sourceField": "data.resourceInfo.properties.EventStatus"},
                },
            ],
        },
        filter={
            "includedEventTypes": [EVENT_TYPE],
            "subjectBeginsWith": "/subscriptions/",
            "isSubjectCaseSensitive": True,
            "enableAdvancedFilteringOnArrays": True,
            "advancedFilters": [
                {
                    "operatorType": "StringIn",
                    "key": "data.resourceInfo.properties.EventStatus",
                    "values": ["Scheduled"],
                },
                {"operatorType": "NumberInRange", "key": "data.x", "values": [[1, 2]]},
                {"operatorType": "BoolEquals", "key": "data.b", "value": False},
                {"operatorType": "IsNotNull", "key": "data.resourceInfo"},
            ],
        },
        eventDeliverySchema="cloudeventschemav1_0",
        labels=["a"],
        retryPolicy={"maxDeliveryAttempts": 3, "eventTimeToLiveInMinutes": 60},
        deadLetterDestination={
            "endpointType": "StorageBlob",
            "properties": {
                "resourceId": f"/subscriptions/{SUB}/resourceGroups/g/providers/Microsoft.Storage/"
                "storageAccounts/deadletters",
                "blobContainerName": "dl-container",
            },
        },
        expirationTimeUtc="2030-01-01T00:00:00Z",
    )
    parsed = parse_subscription_body(body, TOPIC_ID, "Sub-1", T0)
    assert parsed.schema == "CloudEventSchemaV1_0"
    assert EventSubscription.from_record(json.loads(json.dumps(parsed.to_record()))) == parsed
    arm = parsed.to_arm(T0)
    destination = arm["properties"]["destination"]["properties"]
    assert destination["endpointBaseUrl"] == "https://example.com/hook" and "endpointUrl" not in destination
    assert destination["deliveryAttributeMappings"][1] == {
        "name": "x-secret",
        "type": "Static",
        "properties": {"isSecret": True},
    }
    assert arm["properties"]["provisioningState"] == "Succeeded"
    assert arm["type"] == "Microsoft.EventGrid/systemTopics/eventSubscriptions"


# ================================================================================================= pure: filters
SAMPLE = {
    "id": "1",
    "subject": "/subscriptions/A/resourceGroups/G/providers/Microsoft.Compute/virtualMachines/V",
    "eventType": EVENT_TYPE,
    "dataVersion": "3.0",
    "data": {
        "resourceInfo": {
            "properties": {
                "EventStatus": "Scheduled",
                "DurationInSeconds": 5,
                "Resources": ["vm-1", "vm-2"],
                "Flag": True,
                "Empty": None,
            }
        }
    },
}


def _passes(operator, key, values=(), arrays=False):
    return filters.matches(
        SubscriptionFilter(advanced=(AdvancedFilter(operator, key, tuple(values)),), arrays=arrays),
        SAMPLE,
        "EventGridSchema",
    )


@pytest.mark.parametrize(
    "operator, key, values, expected",
    [
        ("StringIn", "data.resourceInfo.properties.EventStatus", ["scheduled"], True),  # case-insensitive
        ("StringIn", "DATA.RESOURCEINFO.properties.eventstatus", ["Scheduled"], True),  # keys too
        ("StringNotIn", "data.resourceInfo.properties.EventStatus", ["Started", "Completed"], True),
        ("StringNotIn", "data.resourceInfo.properties.EventStatus", ["Scheduled"], False),
        ("StringContains", "subject", ["microsoft.compute"], True),
        ("StringNotContains", "subject", ["availabilitySets"], True),
        ("StringBeginsWith", "subject", ["/subscriptions/a"], True),
        ("StringNotBeginsWith", "subject", ["/subscriptions/a"], False),
        ("StringEndsWith", "subject", ["/v"], True),
        ("StringNotEndsWith", "subject", ["/w"], True),
        ("StringIn", "eventtype", [EVENT_TYPE.lower()], True),
        ("NumberIn", "data.resourceInfo.properties.DurationInSeconds", [5], True),
        ("NumberNotIn", "data.resourceInfo.properties.DurationInSeconds", [5], False),
        ("NumberLessThan", "data.resourceInfo.properties.DurationInSeconds", [6], True),
        ("NumberGreaterThan", "data.resourceInfo.properties.DurationInSeconds", [5], False),
        ("NumberLessThanOrEquals", "data.resourceInfo.properties.DurationInSeconds", [5], True),
        ("NumberGreaterThanOrEquals", "data.resourceInfo.properties.DurationInSeconds", [5], True),
        ("NumberInRange", "data.resourceInfo.properties.DurationInSeconds", [(0, 1), (5, 9)], True),
        ("NumberNotInRange", "data.resourceInfo.properties.DurationInSeconds", [(0, 4)], True),
        ("BoolEquals", "data.resourceInfo.properties.Flag", [True], True),
        ("NumberIn", "data.resourceInfo.properties.Flag", [1], False),  # a boolean is not a number
        ("StringIn", "data.resourceInfo.properties.DurationInSeconds", ["5"], False),  # nor a number a string
        ("IsNullOrUndefined", "data.resourceInfo.properties.Empty", [], True),
        ("IsNullOrUndefined", "data.nothing.here", [], True),
        ("IsNotNull", "data.resourceInfo.properties.Empty", [], False),
        ("IsNotNull", "data.resourceInfo", [], True),
        # A missing key fails everything but NumberNotIn and StringNotIn ("Understand event filtering for Event Grid
        # subscriptions").
        ("StringIn", "data.nothing", ["x"], False),
        ("StringNotIn", "data.nothing", ["x"], True),
        ("NumberNotIn", "data.nothing", [1], True),
        ("NumberNotInRange", "data.nothing", [(1, 2)], False),
        ("StringNotContains", "data.nothing", ["x"], False),
        ("BoolEquals", "data.nothing", [True], False),
        # Arrays only with enableAdvancedFilteringOnArrays.
        ("StringIn", "data.resourceInfo.properties.Resources", ["VM-2"], False),
    ],
)
def test_advanced_filter_operators(operator, key, values, expected):
    assert _passes(operator, key, values) is expected


def test_arrays_are_searched_only_when_enabled():
    key = "data.resourceInfo.properties.Resources"
    assert _passes("StringIn", key, ["VM-2"], arrays=True)
    assert not _passes("StringNotIn", key, ["vm-2"], arrays=True)  # one element matches: the Not fails
    assert _passes("StringNotIn", key, ["vm-3"], arrays=True)
    assert not _passes("StringNotIn", key, ["vm-3"], arrays=False)


def test_event_types_and_subjects():
    subject = SAMPLE["subject"]
    assert filters.matches(SubscriptionFilter(included_event_types=(EVENT_TYPE.upper(),)), SAMPLE, "EventGridSchema")
    assert not filters.matches(
        SubscriptionFilter(included_event_types=("Microsoft.Storage.BlobCreated",)), SAMPLE, "EventGridSchema"
    )
    assert filters.matches(SubscriptionFilter(subject_begins_with=subject[:20].upper()), SAMPLE, "EventGridSchema")
    assert not filters.matches(
        SubscriptionFilter(subject_begins_with=subject[:20].upper(), subject_case_sensitive=True),
        SAMPLE,
        "EventGridSchema",
    )
    assert filters.matches(SubscriptionFilter(subject_ends_with="/v"), SAMPLE, "EventGridSchema")
    cloud = {"type": EVENT_TYPE, "subject": subject, "source": "/subscriptions/A", "data": SAMPLE["data"]}
    assert filters.matches(
        SubscriptionFilter(
            included_event_types=(EVENT_TYPE,), advanced=(AdvancedFilter("StringIn", "source", ("/subscriptions/a",)),)
        ),
        cloud,
        "CloudEventSchemaV1_0",
    )


_NEGATIONS = [
    ("StringIn", "StringNotIn"),
    ("StringContains", "StringNotContains"),
    ("StringBeginsWith", "StringNotBeginsWith"),
    ("StringEndsWith", "StringNotEndsWith"),
]


@given(
    value=st.text(max_size=8),
    wanted=st.lists(st.text(max_size=4), min_size=1, max_size=4),
    pair=st.sampled_from(_NEGATIONS),
    arrays=st.booleans(),
)
def test_property_a_not_operator_is_the_negation_on_present_strings(value, wanted, pair, arrays):
    positive, negative = pair
    event = {"data": {"v": value}}
    yes = filters.passes(AdvancedFilter(positive, "data.v", tuple(wanted)), filters.lookup(event, "data.v"), arrays)
    no = filters.passes(AdvancedFilter(negative, "data.v", tuple(wanted)), filters.lookup(event, "data.v"), arrays)
    assert yes != no
    # Case never matters for string comparisons.
    upper = filters.passes(AdvancedFilter(positive, "data.v", tuple(w.upper() for w in wanted)), value.lower(), arrays)
    assert upper == filters.passes(
        AdvancedFilter(positive, "data.v", tuple(w.lower() for w in wanted)), value.upper(), arrays
    )


@given(values=st.lists(st.integers(-5, 5), max_size=4), wanted=st.lists(st.integers(-5, 5), min_size=1, max_size=4))
def test_property_number_filters_on_arrays_match_any_and_not_in_means_none(values, wanted):
    event_value = filters.lookup({"data": {"v": values}}, "data.v")
    any_in = filters.passes(AdvancedFilter("NumberIn", "data.v", tuple(wanted)), event_value, True)
    none_in = filters.passes(AdvancedFilter("NumberNotIn", "data.v", tuple(wanted)), event_value, True)
    assert any_in == any(v in wanted for v in values)
    assert none_in == (not any_in)


# ================================================================================= pure: retries and batching
def test_the_retry_schedule_with_its_minimums_and_jitter():
    expected = [10, 30, 60, 300, 600, 1800, 3600, 10800, 21600, 43200, 43200]
    for attempt, seconds in enumerate(expected, start=1):
        delay = retry_delay(attempt, 500, "7").total_seconds()
        assert seconds <= delay <= seconds * 1.1
    assert retry_delay(1, 404, "7") >= timedelta(minutes=5)
    assert retry_delay(1, 408, "7") >= timedelta(minutes=2)
    assert retry_delay(1, 503, "7") >= timedelta(seconds=30)
    assert retry_delay(3, 503, "7") == retry_delay(3, 503, "7")  # deterministic


def _delivery(number: int, attempts: int = 0, size: int = 10) -> Delivery:
    return Delivery(number, "sub", "x" * size, attempts, T0, T0, "eventgrid", "pending", None, T0)


def test_batches_respect_count_size_and_attempts():
    rows = [_delivery(i) for i in range(7)]
    assert [len(b) for b in batches(rows, 1, 64)] == [1] * 7
    assert [len(b) for b in batches(rows, 3, 64)] == [3, 3, 1]
    big = [_delivery(i, size=600) for i in range(4)]
    assert [len(b) for b in batches(big, 10, 1)] == [1, 1, 1, 1]  # each is over 1 KB with the next: alone
    mixed = [_delivery(1, 0), _delivery(2, 1), _delivery(3, 0)]
    assert [[d.delivery_id for d in b] for b in batches(mixed, 10, 64)] == [[1, 3], [2]]


def test_dead_letter_events_carry_the_reason_fields():
    delivery = Delivery(
        4,
        "sub",
        json.dumps({"id": "e", "data": {}}),
        3,
        T0,
        T0,
        "eventgrid",
        "dead-lettering",
        json.dumps(
            {
                "deadLetterReason": "MaxDeliveryAttemptsExceeded",
                "deliveryAttempts": 3,
                "lastDeliveryOutcome": "Busy",
                "lastHttpStatusCode": 503,
                "lastDeliveryAttemptTime": "2026-04-20T22:13:00.0000000Z",
            }
        ),
        T0,
    )
    event = dead_letter_event(delivery, cloud=False)
    assert event == {
        "id": "e",
        "data": {},
        "deadLetterReason": "MaxDeliveryAttemptsExceeded",
        "deliveryAttempts": 3,
        "lastDeliveryOutcome": "Busy",
        "lastHttpStatusCode": 503,
        "publishTime": "2026-04-20T22:11:58.0000000Z",
        "lastDeliveryAttemptTime": "2026-04-20T22:13:00.0000000Z",
    }
    assert set(dead_letter_event(delivery, cloud=True)) >= {
        "deadletterreason",
        "deliveryattempts",
        "lastdeliveryoutcome",
        "publishtime",
    }


def test_the_dead_letter_path_is_laid_out_like_the_blob():
    class Engine:
        seed = "seed"

    class Service:
        def settled_engine(self):
            return Engine()

    subscription = parse_subscription_body(
        _body(
            deadLetterDestination={
                "endpointType": "StorageBlob",
                "properties": {
                    "resourceId": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct",
                    "blobContainerName": "dead",
                },
            }
        ),
        TOPIC_ID,
        "My-Sub",
        T0,
    )
    policy = EventGridDelivery(Service(), None, EventGridSettings(dead_letter_dir=Path("/dl")))
    path = policy.dead_letter_path(subscription, [_delivery(5)], datetime(2026, 3, 4, 5, 6, tzinfo=UTC))
    assert path.parent == Path("/dl/dead/MY-SUB/2026/3/4/5")
    assert path.name == derived_guid("seed", "deadletter", 5).lower() + ".json"


def test_an_outbox_created_before_kinds_gains_the_columns(store_url):
    """Both databases: a store whose outbox predates delivery kinds is migrated in place, its messages kept."""
    create = (
        "CREATE TABLE forewarn_outbox (id {id}, target TEXT NOT NULL, payload TEXT NOT NULL, status TEXT NOT NULL, "
        "attempts INTEGER NOT NULL, next_at TEXT NOT NULL, expires_at TEXT NOT NULL, last_error TEXT, "
        "created_at TEXT NOT NULL)"
    )
    insert = (
        "INSERT INTO forewarn_outbox (target, payload, status, attempts, next_at, expires_at, created_at) "
        "VALUES ('http://x', '{{}}', 'pending', 0, {m}, {m}, {m})"
    )
    if store_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as connection:
            connection.execute(create.format(id="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"))
            connection.execute(insert.format(m="%s"), (T0.isoformat(),) * 3)
    else:
        import sqlite3

        connection = sqlite3.connect(store_url)
        connection.execute(create.format(id="INTEGER PRIMARY KEY AUTOINCREMENT"))
        connection.execute(insert.format(m="?"), (T0.isoformat(),) * 3)
        connection.commit()
        connection.close()
    store = open_store(store_url)
    [old] = store.due_deliveries(T0)
    assert (old.kind, old.detail, old.status, old.target) == ("webhook", None, "pending", "http://x")
    store.close()
    open_store(store_url).close()  # migrating twice changes nothing


def test_the_registry_is_durable_on_both_databases(store_url):
    from forewarn.azure.eventgrid.model import SystemTopic
    from forewarn.azure.eventgrid.registry import EventGridRegistry

    store = open_store(store_url)
    registry = EventGridRegistry.load(store)
    topic = SystemTopic(SUB, "events-rg", "maintenance", "metric", {"team": "ops"})
    registry.put_topic(topic)
    subscription = parse_subscription_body(_body(), topic.id, "hook", T0)
    registry.put_subscription(subscription)
    store.close()
    again = EventGridRegistry.load(open_store(store_url))
    assert again.topic_of_source(SUB.upper()) == topic and again.subscriptions_of(topic.key) == [subscription]
    assert [s.key for s in again.delete_topic(topic.key)] == [subscription.key]
    again.store.close()
    emptied = EventGridRegistry.load(open_store(store_url))
    assert emptied.topics == {} and emptied.subscriptions == {}
    emptied.store.close()


# ================================================================================== end to end: handshakes, ARM
@pytest.fixture
def webhook(tmp_path):
    hook = Webhook(tmp_path).start()
    yield hook
    hook.stop()


def test_handshakes_and_the_arm_provider(tmp_path, webhook):
    server = Server(tmp_path, FLEET).start()
    arm = Arm(server)
    try:
        # ARM's checks before anything else: api-version, subscription, one topic per source.
        missing = requests.get(arm.topic_url(), timeout=10)
        assert missing.status_code == 400 and missing.json()["error"]["code"] == "MissingApiVersionParameter"
        unknown = arm.put_topic(sub="99999999-9999-9999-9999-999999999999")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "SubscriptionNotFound"
        assert arm.get(arm.topic_url()).status_code == 404
        created = arm.put_topic()
        assert created.status_code == 201, created.text
        topic = created.json()
        assert topic["properties"]["provisioningState"] == "Succeeded" and topic["location"] == "global"
        assert topic["properties"]["topicType"] == "Microsoft.ResourceNotifications.MaintenanceResources"
        assert arm.put_topic().status_code == 200  # an update
        second = arm.put_topic(name="another")
        assert second.status_code == 400 and "one system topic" in second.json()["error"]["message"]
        listed = arm.get(f"{server.arm}/subscriptions/{SUB}/providers/Microsoft.EventGrid/systemTopics").json()
        assert [t["name"] for t in listed["value"]] == ["maintenance"]
        by_group = arm.get(arm.topic_url().rsplit("/", 1)[0]).json()
        assert [t["id"] for t in by_group["value"]] == [topic["id"]]
        bad = requests.put(arm.subscription_url("broken"), params={"api-version": API}, data=b"{not json", timeout=10)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "InvalidRequestContent"
        for odd in (
            [],
            "text",
            {"properties": None},
            {"properties": {"destination": []}},
            {"properties": {"destination": {"endpointType": "WebHook", "properties": {"endpointUrl": 7}}}},
            {"properties": {"filter": {"advancedFilters": [None]}, "destination": {}}},
        ):
            answer = requests.put(arm.subscription_url("odd"), params={"api-version": API}, json=odd, timeout=10)
            assert answer.status_code == 400 and set(answer.json()["error"]) >= {"code", "message"}, answer.text
        for odd in ({"location": "global", "properties": {"source": 5}}, {"location": 1}, {"tags": "x"}):
            answer = requests.put(arm.topic_url("odd"), params={"api-version": API}, json=odd, timeout=10)
            assert answer.status_code == 400, answer.text
        assert requests.head(arm.topic_url(), params={"api-version": API}, timeout=10).status_code == 405
        assert arm.get(arm.topic_url(), **{"api-version": "2018-01-01"}).status_code == 400

        # Synchronous handshake: the validation event, answered with the code.
        made = arm.put_subscription("sync-hook", webhook.url("/sync?code=k"))
        assert made.status_code == 201 and made.json()["properties"]["provisioningState"] == "Succeeded", made.text
        [validation] = webhook.requests("/sync", kind="SubscriptionValidation")
        headers = validation["headers"]
        assert (headers["aeg-subscription-name"], headers["aeg-delivery-count"], headers["aeg-metadata-version"]) == (
            "SYNC-HOOK",
            "0",
            "1",
        )
        [sent] = json.loads(validation["body"])
        assert sent["eventType"] == "Microsoft.EventGrid.SubscriptionValidationEvent" and sent["subject"] == ""
        assert sent["topic"] == f"/subscriptions/{SUB}"
        assert made.json()["properties"]["destination"]["properties"]["endpointBaseUrl"] == webhook.url("/sync")
        assert arm.put_subscription("sync-hook", webhook.url("/sync?code=k")).status_code == 200  # unchanged
        assert len(webhook.requests("/sync", kind="SubscriptionValidation")) == 1  # ... so no new handshake
        full = requests.post(f"{arm.subscription_url('sync-hook')}/getFullUrl", params={"api-version": API}, timeout=10)
        assert full.json() == {"endpointUrl": webhook.url("/sync?code=k")}
        patched = requests.patch(
            arm.subscription_url("sync-hook"), params={"api-version": API}, json={"labels": ["ops"]}, timeout=10
        )
        assert patched.status_code == 200 and patched.json()["properties"]["labels"] == ["ops"]
        assert len(webhook.requests("/sync", kind="SubscriptionValidation")) == 1  # same endpoint: no handshake
        moved = requests.patch(
            arm.subscription_url("sync-hook"),
            params={"api-version": API},
            timeout=40,
            json={"destination": {"endpointType": "WebHook", "properties": {"endpointUrl": webhook.url("/sync2")}}},
        )
        assert moved.status_code == 200 and moved.json()["properties"]["labels"] == ["ops"]
        assert len(webhook.requests("/sync2", kind="SubscriptionValidation")) == 1  # a new endpoint proves itself

        # The validationUrl handshake: 200 without the code, then a GET of the URL within 5 minutes.
        webhook.control("/manual", handshake="manual")
        waiting = arm.put_subscription("manual-hook", webhook.url("/manual"))
        assert (
            waiting.status_code == 201 and waiting.json()["properties"]["provisioningState"] == "AwaitingManualAction"
        )
        [validation] = webhook.requests("/manual", kind="SubscriptionValidation")
        url = json.loads(validation["body"])[0]["data"]["validationUrl"]
        assert url.startswith(f"{server.arm}/eventgrid/eventsubscriptions/manual-hook/validate?id=")
        server.advance("4m")
        visited = requests.get(url, timeout=10)
        assert visited.status_code == 200 and "successfully validated" in visited.text
        state = arm.get(arm.subscription_url("manual-hook")).json()["properties"]["provisioningState"]
        assert state == "Succeeded"
        # ... and one that is visited too late fails.
        webhook.control("/late", handshake="manual")
        assert arm.put_subscription("late-hook", webhook.url("/late")).status_code == 201
        [validation] = webhook.requests("/late", kind="SubscriptionValidation")
        server.advance("6m")
        assert arm.get(arm.subscription_url("late-hook")).json()["properties"]["provisioningState"] == "Failed"
        too_late = requests.get(json.loads(validation["body"])[0]["data"]["validationUrl"], timeout=10)
        assert too_late.status_code == 400 and too_late.json()["error"]["code"] == "Url validation"
        assert "Http GET is expected on the validation url" in too_late.json()["error"]["message"]

        # A refused handshake refuses the PUT with Event Grid's error, and leaves nothing.
        webhook.control("/refuse", handshake="refuse")
        refused = arm.put_subscription("refused-hook", webhook.url("/refuse"))
        error = refused.json()["error"]
        assert refused.status_code == 400 and error["code"] == "Url validation"
        assert error["message"] == (
            f"Webhook validation handshake failed for {webhook.url('/refuse')}. Http POST "
            "request failed with response code Forbidden. For troublehooting, visit "
            "https://aka.ms/esvalidation."
        )
        assert arm.get(arm.subscription_url("refused-hook")).status_code == 404
        nobody = arm.put_subscription("nobody", f"http://127.0.0.1:{free_port()}/x")
        assert nobody.status_code == 400 and "response code Unknown" in nobody.json()["error"]["message"]

        # CloudEvents: the OPTIONS abuse-protection handshake.
        cloud = arm.put_subscription("cloud-hook", webhook.url("/cloud"), eventDeliverySchema="CloudEventSchemaV1_0")
        assert cloud.status_code == 201, cloud.text
        [options] = [r for r in webhook.requests("/cloud", kind=None) if r["method"] == "OPTIONS"]
        assert options["headers"]["webhook-request-origin"] == "eventgrid.azure.net"
        webhook.control("/closed", allowed_origin=None)
        closed = arm.put_subscription("closed-hook", webhook.url("/closed"), eventDeliverySchema="CloudEventSchemaV1_0")
        assert (
            closed.status_code == 400
            and "Http OPTIONS request failed with response code MethodNotAllowed" in closed.json()["error"]["message"]
        )
        # The documented way to skip the handshake (tests).
        skipped = arm.put_subscription("skipped", webhook.url("/never-called"), skip=True)
        assert skipped.status_code == 201 and not webhook.requests("/never-called", kind=None)

        names = [s["name"] for s in arm.get(f"{arm.topic_url()}/eventSubscriptions").json()["value"]]
        assert names == ["cloud-hook", "late-hook", "manual-hook", "skipped", "sync-hook"]
        assert (
            requests.delete(arm.subscription_url("late-hook"), params={"api-version": API}, timeout=10).status_code
            == 200
        )
        assert (
            requests.delete(arm.subscription_url("late-hook"), params={"api-version": API}, timeout=10).status_code
            == 204
        )
        # Deleting the topic deletes its subscriptions; it survives nothing, and all is durable until then.
        server.stop()
        server.start()
        assert arm.get(arm.subscription_url("sync-hook")).json()["properties"]["provisioningState"] == "Succeeded"
        assert requests.delete(arm.topic_url(), params={"api-version": API}, timeout=10).status_code == 200
        assert arm.get(arm.subscription_url("sync-hook")).status_code == 404
    finally:
        server.stop()


# ===================================================================== end to end: the lifecycle, headers, SDKs
def test_the_lifecycle_is_delivered_with_event_grid_headers_and_parses_with_the_sdks(tmp_path, webhook):
    from azure.core.messaging import CloudEvent
    from azure.eventgrid import EventGridEvent

    server = Server(tmp_path, FLEET).start()
    arm = Arm(server)
    try:
        assert arm.put_topic().status_code == 201
        attributes = [
            {"name": "x-team", "type": "Static", "properties": {"value": "ops"}},
            {"name": "x-secret", "type": "Static", "properties": {"value": "s3cret", "isSecret": True}},
            {
                "name": "x-event-status",
                "type": "Dynamic",
                "properties": {"sourceField": "data.resourceInfo.properties.EventStatus"},
            },
        ]
        made = arm.put_subscription("eg-all", webhook.url("/eg"), destination={"deliveryAttributeMappings": attributes})
        assert made.status_code == 201, made.text
        assert (
            "value"
            not in made.json()["properties"]["destination"]["properties"]["deliveryAttributeMappings"][1]["properties"]
        )
        revealed = requests.post(
            f"{arm.subscription_url('eg-all')}/getDeliveryAttributes", params={"api-version": API}, timeout=10
        ).json()
        assert revealed["value"][1]["properties"] == {"value": "s3cret", "isSecret": True}
        assert (
            arm.put_subscription("ce-all", webhook.url("/ce"), eventDeliverySchema="CloudEventSchemaV1_0").status_code
            == 201
        )

        [reboot] = server.schedule(type="Reboot", vms=["central-vm"], notice="10m")
        server.schedule(type="Reboot", vms=["plain-vm"], notice="10m")  # not opted in: never published
        [canceled] = server.schedule(type="Freeze", vms=["ha-1"], notice="30m")
        server.post(f"/v1/events/{canceled['event_id']}/cancel", expect=200)
        server.advance("10m")  # Started
        server.advance("11m")  # the impact window is over: Completed
        assert wait_for(lambda: len(webhook.events("/eg")) == 5 and len(webhook.events("/ce")) == 5)

        delivered = webhook.events("/eg")
        by_event = {}
        for event in delivered:
            by_event.setdefault(event_id_of(event), []).append(status_of(event))
        # Event Grid does not guarantee order, and requests to one subscription go out concurrently.
        assert {key: sorted(statuses) for key, statuses in by_event.items()} == {
            reboot["event_id"]: ["Completed", "Scheduled", "Started"],
            canceled["event_id"]: ["Canceled", "Scheduled"],
        }
        assert len({event["id"] for event in delivered}) == 5
        for record in webhook.requests("/eg"):
            body = json.loads(record["body"])
            assert isinstance(body, list) and len(body) == 1  # always an array; one event without batching
            headers = record["headers"]
            assert headers["aeg-event-type"] == "Notification" and headers["aeg-subscription-name"] == "EG-ALL"
            assert (headers["aeg-delivery-count"], headers["aeg-data-version"], headers["aeg-metadata-version"]) == (
                "0",
                "3.0",
                "1",
            )
            assert headers["content-type"] == "application/json; charset=utf-8"
            assert (headers["x-team"], headers["x-secret"]) == ("ops", "s3cret")
            assert headers["x-event-status"] == status_of(body[0])
        first = next(e for e in delivered if event_id_of(e) == reboot["event_id"] and status_of(e) == "Scheduled")
        started = next(e for e in delivered if status_of(e) == "Started")
        assert first["id"] == derived_guid("test", "eventgrid", reboot["event_id"], "scheduled").lower()
        assert first["subject"] == (
            f"{GROUP_ID}/virtualMachines/central-vm/providers/microsoft.maintenance/"
            f"scheduledevents/{reboot['event_id']}"
        )
        assert first["data"]["resourceInfo"]["location"] == "westeurope"
        assert first["data"]["resourceInfo"]["properties"]["NotBefore"] == "Mon, 20 Apr 2026 22:21:58 GMT"
        assert started["data"]["resourceInfo"]["properties"]["NotBefore"] == ""
        assert started["eventTime"] == "2026-04-20T22:21:58.0000000Z"
        ha = next(e for e in delivered if event_id_of(e) == canceled["event_id"])
        assert ha["subject"].startswith(f"{GROUP_ID}/availabilitySets/ha/providers/microsoft.maintenance/")
        for event in delivered:
            parsed = EventGridEvent.from_dict(event)
            assert parsed.event_type == EVENT_TYPE and parsed.data_version == "3.0" and parsed.id == event["id"]
            assert parsed.data["resourceInfo"]["properties"]["EventId"] == event_id_of(event)

        clouds = webhook.events("/ce")
        assert sorted(c["id"] for c in clouds) == sorted(e["id"] for e in delivered)  # one publication, one id
        for record in webhook.requests("/ce"):
            headers = record["headers"]
            assert headers["content-type"] == "application/cloudevents+json; charset=utf-8"
            assert (headers["aeg-metadata-version"], headers["aeg-data-version"], headers["origin"]) == (
                "1.0",
                "",
                "eventgrid.azure.net",
            )
            event = json.loads(record["body"])
            assert list(event) == ["id", "source", "subject", "type", "time", "specversion", "data"]
            parsed = CloudEvent.from_dict(event)
            assert (
                parsed.type == EVENT_TYPE and parsed.source == f"/subscriptions/{SUB}" and parsed.specversion == "1.0"
            )
        assert wait_for(lambda: {d["status"] for d in deliveries(server)} == {"delivered"})
    finally:
        server.stop()


# ======================================================================== end to end: filters and batching
def test_filters_and_batching(tmp_path, webhook):
    server = Server(tmp_path, FLEET).start()
    arm = Arm(server)
    status_key = "data.resourceInfo.properties.EventStatus"
    try:
        assert arm.put_topic().status_code == 201
        for name, path, properties in [
            ("other-types", "/other", {"filter": {"includedEventTypes": ["Microsoft.Storage.BlobCreated"]}}),
            ("all-types", "/all", {"filter": {"includedEventTypes": []}}),
            (
                "only-scheduled",
                "/scheduled",
                {
                    "filter": {
                        "advancedFilters": [{"operatorType": "StringIn", "key": status_key, "values": ["scheduled"]}]
                    }
                },
            ),
            ("avset", "/avset", {"filter": {"subjectBeginsWith": f"{GROUP_ID}/availabilitysets/".lower()}}),
            (
                "has-ha-1",
                "/ha1",
                {
                    "filter": {
                        "enableAdvancedFilteringOnArrays": True,
                        "advancedFilters": [
                            {
                                "operatorType": "StringIn",
                                "key": "data.resourceInfo.properties.Resources",
                                "values": ["HA-1"],
                            }
                        ],
                    }
                },
            ),
            (
                "missing-key",
                "/missing",
                {"filter": {"advancedFilters": [{"operatorType": "NumberIn", "key": "data.nothing", "values": [1]}]}},
            ),
        ]:
            made = arm.put_subscription(name, webhook.url(path), skip=True, **properties)
            assert made.status_code == 201, made.text
        batched = arm.put_subscription(
            "batched",
            webhook.url("/batch"),
            skip=True,
            destination={"maxEventsPerBatch": 10, "preferredBatchSizeInKilobytes": 64},
        )
        assert batched.status_code == 201

        # One command, five events: central-vm, ha on three hosts (all opted in), and plain-vm (not).
        events = server.schedule(type="Reboot", hosts=["host-01", "host-02", "host-03"], notice="15m")
        published = {e["event_id"] for e in events if e["resources"] != ["plain-vm"] and e["resources"] != ["far-vm"]}
        assert len(published) == 4
        # The first batch is sent before the clock moves: otherwise a slow sender finds both batches due at once.
        assert wait_for(lambda: len(webhook.events("/batch")) == 4)
        server.advance("15m")  # all four start
        assert wait_for(lambda: len(webhook.events("/all")) == 8 and len(webhook.events("/batch")) == 8)
        # Every subscription's deliveries are done (those of one subscription go out concurrently, in any order).
        assert wait_for(lambda: {d["status"] for d in deliveries(server)} == {"delivered"})
        assert {event_id_of(e) for e in webhook.events("/all")} == published
        assert webhook.requests("/other") == [] and webhook.requests("/missing") == []
        assert [status_of(e) for e in webhook.events("/scheduled")] == ["Scheduled"] * 4
        assert {e["subject"].split("/providers/")[1] for e in webhook.events("/avset")} == {
            "Microsoft.Compute/availabilitySets/ha"
        }
        assert len(webhook.events("/avset")) == 6
        [ha1] = {event_id_of(e) for e in webhook.events("/ha1")}
        assert next(e for e in events if e["event_id"] == ha1)["resources"] == ["ha-1"]
        # Batching: one request per command's worth of events, not one per event.
        requests_made = webhook.requests("/batch")
        assert [len(json.loads(r["body"])) for r in requests_made] == [4, 4]
        assert all(r["headers"]["aeg-delivery-count"] == "0" for r in requests_made)
    finally:
        server.stop()


# =================================================================== end to end: retries, dead letters, TTL
def test_retries_dead_letters_and_time_to_live_on_the_manual_clock(tmp_path, webhook):
    dead_letters = tmp_path / "dead"
    storage = f"/subscriptions/{SUB}/resourceGroups/contoso-rg/providers/Microsoft.Storage/storageAccounts/dlstore"

    def declared(name, path, **properties):
        properties.setdefault(
            "deadLetterDestination",
            {"endpointType": "StorageBlob", "properties": {"resourceId": storage, "blobContainerName": "deadletters"}},
        )
        body = {
            "destination": {"endpointType": "WebHook", "properties": {"endpointUrl": webhook.url(path)}},
            **properties,
        }
        return {"name": name, "skip_validation": True, "properties": body}

    subscriptions = [
        declared("retrier", "/retry"),
        declared("rejected", "/reject"),
        declared("exhausted", "/exhaust", retryPolicy={"maxDeliveryAttempts": 2}),
        declared("expiring", "/ttl", retryPolicy={"eventTimeToLiveInMinutes": 1}),
        declared("unauthorized", "/unauth", deadLetterDestination=None),
        declared("no-dead-letters", "/drop", deadLetterDestination=None),
        declared("slow", "/slow", deadLetterDestination=None),
    ]
    for item in subscriptions:
        if item["properties"]["deadLetterDestination"] is None:
            del item["properties"]["deadLetterDestination"]
    file = write_event_grid_file(
        tmp_path,
        json.dumps(
            {
                # Long enough for the receiver to answer on a machine a parallel suite saturates, short enough to
                # wait for "/slow". At 0.5 s, "/reject" (always 400) was once found retried, not dead-lettered: only
                # an attempt with no answer (a timeout, a lost connection) is retried there.
                "settings": {"dead_letter_delay": "1m", "delivery_timeout": "2s"},
                "system_topics": [
                    {
                        "name": "maintenance",
                        "subscription": SUB,
                        "resource_group": "events-rg",
                        "event_subscriptions": subscriptions,
                    }
                ],
            }
        ),
    )
    webhook.control("/retry", fail=2, fail_status=503)
    webhook.control("/reject", fail=-1, fail_status=400)
    webhook.control("/exhaust", fail=-1, fail_status=500)
    webhook.control("/ttl", fail=-1, fail_status=500)
    webhook.control("/unauth", fail=1, fail_status=401)
    webhook.control("/drop", fail=-1, fail_status=413)
    webhook.control("/slow", delay=3)  # answers after Event Grid stopped waiting (2 s here, 30 s by default)
    server = Server(
        tmp_path,
        FLEET,
        extra=[
            "--event-grid",
            str(file),
            "--event-grid-dead-letters",
            str(dead_letters),
            "--event-grid-no-retry",
            "400,413",
        ],
    ).start()
    try:
        [event] = server.schedule(type="Freeze", vms=["central-vm"], notice="1h")

        def by_name():
            return {d["target"].rsplit("/", 1)[1]: d for d in deliveries(server)}

        assert wait_for(lambda: all(d["attempts"] >= 1 for d in by_name().values()) and len(by_name()) == 7)
        state = by_name()
        assert state["slow"]["status"] == "pending" and state["slow"]["last_error"] == "no answer within 2 s"
        assert state["slow"]["detail"]["lastDeliveryOutcome"] == "TimedOut"
        webhook.control("/slow", delay=0)
        assert state["rejected"]["status"] == "dead-lettering" and state["rejected"]["attempts"] == 1
        assert state["no-dead-letters"]["status"] == "dropped"
        assert state["unauthorized"]["status"] == "pending"  # 401 is retried: --event-grid-no-retry 400,413
        assert not dead_letters.exists()  # written a minute after the last attempt, not before

        # Walk the clock in small steps, as the retry schedule goes: 10 s, 30 s (at least, after a 503), 1 m ...
        # After each step, wait until the sender has acted on everything due, so attempts happen at that step's time.
        for step in range(1, 17):
            server.advance("15s")
            now = T0 + timedelta(seconds=15 * step)
            assert wait_for(
                lambda now=now: (
                    not any(
                        d["status"] in ("pending", "dead-lettering") and datetime.fromisoformat(d["next_at"]) <= now
                        for d in deliveries(server)
                    )
                )
            )
        assert wait_for(lambda: by_name()["retrier"]["status"] == "delivered")
        assert wait_for(lambda: by_name()["expiring"]["status"] == "dead-lettered", timeout=5), by_name()["expiring"]
        retried = webhook.requests("/retry")
        assert [r["headers"]["aeg-delivery-count"] for r in retried] == ["0", "1", "2"]
        assert [r["status"] for r in retried] == [503, 503, 200]
        assert len({json.loads(r["body"])[0]["id"] for r in retried}) == 1  # a retry is the same event
        assert [r["status"] for r in webhook.requests("/unauth")] == [401, 200]
        assert by_name()["slow"]["status"] == "delivered"  # at least once: the slow answer's event came again
        assert [r["headers"]["aeg-delivery-count"] for r in webhook.requests("/slow")] == ["0", "1"]
        assert by_name()["exhausted"]["attempts"] == 2 and by_name()["exhausted"]["status"] == "dead-lettered"
        assert by_name()["no-dead-letters"]["attempts"] == 1  # dropped at once, never retried

        def dead_letter(name):
            [path] = list((dead_letters / "deadletters" / name.upper()).rglob("*.json"))
            return path, json.loads(path.read_text())

        path, [rejected] = dead_letter("rejected")
        assert path.parent.relative_to(dead_letters) == Path("deadletters/REJECTED/2026/4/20/22")
        assert event_id_of(rejected) == event["event_id"]
        assert rejected["deadLetterReason"] == "UndeliverableDueToHttpBadRequest"
        assert (rejected["deliveryAttempts"], rejected["lastDeliveryOutcome"], rejected["lastHttpStatusCode"]) == (
            1,
            "BadRequest",
            400,
        )
        assert rejected["publishTime"] == "2026-04-20T22:11:58.0000000Z"
        assert rejected["lastDeliveryAttemptTime"] == "2026-04-20T22:11:58.0000000Z"
        _, [exhausted] = dead_letter("exhausted")
        assert exhausted["deadLetterReason"] == "MaxDeliveryAttemptsExceeded" and exhausted["deliveryAttempts"] == 2
        assert exhausted["lastDeliveryOutcome"] == "Busy"
        _, [expired] = dead_letter("expiring")
        # The time to live (1 minute) is seen when the next attempt falls due, after the attempts made by then.
        assert expired["deadLetterReason"] == "TimeToLiveExceeded" and expired["deliveryAttempts"] == 3
        assert len(webhook.requests("/ttl")) == 3
    finally:
        server.stop()


# ======================================================================================= duplicates, restarts
ACCESS = f"""
principals:
  - {{name: reader, token: reader-token, roles: [{{role: Reader, scope: /subscriptions/{SUB}}}]}}
  - {{name: eventer, token: eventer-token, roles: [{{role: EventGrid Contributor, scope: /subscriptions/{SUB}}}]}}
"""


def test_duplicates_carry_the_same_id_and_access_control_applies(tmp_path, webhook):
    file = write_event_grid_file(
        tmp_path,
        json.dumps(
            {
                "system_topics": [
                    {
                        "name": "maintenance",
                        "subscription": SUB,
                        "resource_group": "events-rg",
                        "event_subscriptions": [
                            {
                                "name": "twice",
                                "skip_validation": True,
                                "properties": {
                                    "destination": {
                                        "endpointType": "WebHook",
                                        "properties": {"endpointUrl": webhook.url("/twice")},
                                    }
                                },
                            }
                        ],
                    }
                ]
            }
        ),
    )
    access = tmp_path / "access.yaml"
    access.write_text(ACCESS)
    server = Server(
        tmp_path, FLEET, extra=["--event-grid", str(file), "--event-grid-duplicates", "1", "--access", str(access)]
    ).start()
    arm = Arm(server)
    try:
        server.schedule(type="Reboot", vms=["central-vm"])
        assert wait_for(lambda: len(webhook.events("/twice")) == 2)
        first, second = webhook.events("/twice")
        assert first == second  # "an identical payload" with the same id ("Scheduled Events in Event Grid")

        def call(method, url, token=None, **kwargs):
            headers = {"authorization": f"Bearer {token}"} if token else {}
            return requests.request(method, url, params={"api-version": API}, headers=headers, timeout=10, **kwargs)

        assert call("GET", arm.topic_url()).status_code == 401
        assert call("GET", arm.subscription_url("twice"), "reader-token").status_code == 200
        denied = call("DELETE", arm.subscription_url("twice"), "reader-token")
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "AuthorizationFailed"
        assert "Microsoft.EventGrid/systemTopics/eventSubscriptions/delete" in denied.json()["error"]["message"]
        assert call("POST", f"{arm.subscription_url('twice')}/getFullUrl", "reader-token").status_code == 403
        assert call("DELETE", arm.subscription_url("twice"), "eventer-token").status_code == 200
    finally:
        server.stop()


def test_nothing_is_lost_while_the_consumer_is_down_across_kill_9(tmp_path):
    hook = Webhook(tmp_path)  # not started: the consumer is down
    file = write_event_grid_file(
        tmp_path,
        json.dumps(
            {
                "system_topics": [
                    {
                        "name": "maintenance",
                        "subscription": SUB,
                        "resource_group": "events-rg",
                        "event_subscriptions": [
                            {
                                "name": "durable",
                                "skip_validation": True,
                                "properties": {
                                    "destination": {
                                        "endpointType": "WebHook",
                                        "properties": {"endpointUrl": hook.url("/durable"), "maxEventsPerBatch": 1},
                                    }
                                },
                            }
                        ],
                    }
                ]
            }
        ),
    )
    server = Server(tmp_path, FLEET, extra=["--event-grid", str(file)]).start()
    try:
        events = server.schedule(type="Reboot", vms=["central-vm", "ha-0"], notice="5m")
        assert len(events) == 2
        server.advance("5m")  # both start: four publications, none deliverable
        assert wait_for(lambda: len(deliveries(server)) == 4 and all(d["attempts"] >= 1 for d in deliveries(server)))
        server.kill()  # kill -9, the consumer still down
        server.start()
        assert [d["status"] for d in deliveries(server)] == ["pending"] * 4
        hook.start()
        server.advance("11m")  # retries fall due; the events also complete (two more publications)
        assert wait_for(lambda: len(hook.events("/durable")) == 6)
        received = hook.events("/durable")
        assert len({e["id"] for e in received}) == 6
        statuses = sorted(status_of(e) for e in received)
        assert statuses == ["Completed", "Completed", "Scheduled", "Scheduled", "Started", "Started"]
        # Outcomes are recorded once their group is done, just after the last answer came.
        assert wait_for(lambda: {d["status"] for d in deliveries(server)} == {"delivered"})
    finally:
        server.stop()
        hook.stop()


def test_the_fleet_file_can_declare_event_grid_too(tmp_path, webhook):
    section = {
        "system_topics": [
            {
                "name": "maintenance",
                "subscription": SUB,
                "resource_group": "events-rg",
                "event_subscriptions": [
                    {
                        "name": "from-fleet",
                        "skip_validation": True,
                        "properties": {
                            "destination": {
                                "endpointType": "WebHook",
                                "properties": {"endpointUrl": webhook.url("/from-fleet")},
                            }
                        },
                    }
                ],
            }
        ]
    }
    fleet = FLEET + "event_grid: " + json.dumps(section) + "\n"
    server = Server(tmp_path, fleet).start()
    try:
        server.schedule(type="Reboot", vms=["central-vm"])
        assert wait_for(lambda: len(webhook.events("/from-fleet")) == 1)
        assert status_of(webhook.events("/from-fleet")[0]) == "Scheduled"
    finally:
        server.stop()
    file = write_event_grid_file(tmp_path, json.dumps(section))
    both = subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", *Server(tmp_path, fleet).args, "--event-grid", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},  # this tree's forewarn, not the installed one
    )
    assert both.returncode == 1 and "keep one" in both.stderr
    bad = FLEET + "event_grid: {system_topics: [{name: x}]}\n"
    refused = subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", *Server(tmp_path, bad).args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert refused.returncode == 1 and "event_grid" in refused.stderr
