"""The Resource Graph query engine over maintenanceresources: real DuckDB, real duckdb-kql, no mocks."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forewarn.azure.resource_graph import (
    MaintenanceTable,
    QueryRequest,
    ResourceGraphError,
    run_query,
    scheduled_event_row,
)
from forewarn.azure.resource_graph.table import COLUMN_NAMES
from resource_graph_rows import NOT_BEFORE, SUB_A, SUB_B, event

NOW = datetime(2025, 9, 19, 18, 0, tzinfo=UTC)  # half an hour before NOT_BEFORE
EARLIER = datetime(2025, 9, 1, tzinfo=UTC)
SCHEDULED_EVENTS = 'maintenanceresources | where type == "microsoft.maintenance/scheduledevents"'
DOC_SORTED_PROJECTION = """Maintenanceresources
| where type == "microsoft.maintenance/scheduledevents"
| sort by tostring(properties.EventStatus), tostring(properties.EventId) asc
| project resourceGroup, zones, properties.EventStatus, properties.NotBefore, properties.Resources, properties.EventId, properties.TargetResourceId, properties.EventType, properties.Description"""


# Another type in the same table ("Resource Graph sample queries for Impacted resources"), which the documented
# queries filter out.
NOISE = {
    "id": f"/subscriptions/{SUB_A}/providers/microsoft.maintenance/updates/pyn_-zl8",
    "name": "PYN_-ZL8",
    "type": "microsoft.maintenance/updates",
    "tenantId": "tenant-1",
    "kind": "",
    "location": "global",
    "resourceGroup": "",
    "subscriptionId": SUB_A,
    "managedBy": "",
    "sku": None,
    "plan": None,
    "properties": {"value": [{"notificationId": "PYN_-ZL8"}]},
    "tags": {},
    "identity": None,
    "zones": None,
    "extendedLocation": None,
}

EVENTS = [
    event(1, "Scheduled", zones=["1"]),
    event(2, "Started", group="RG2", event_type="Reboot"),
    event(3, "Completed"),
    event(4, "Canceled", subscription=SUB_B),
]


@pytest.fixture(scope="module")
def table() -> MaintenanceTable:
    table = MaintenanceTable()
    table.upsert([*EVENTS, NOISE], changed_at=EARLIER)
    return table


def query(table: MaintenanceTable, kql: str, **options) -> dict:
    options.setdefault("now", NOW)
    return run_query(table, QueryRequest(kql, **options))


def refusal(table: MaintenanceTable, kql: str, **options) -> dict:
    with pytest.raises(ResourceGraphError) as raised:
        query(table, kql, **options)
    assert raised.value.status == 400
    body = raised.value.body()
    assert body["error"]["code"] == "BadRequest"
    assert all({"code", "message"} <= set(detail) for detail in body["error"]["details"])
    return body["error"]["details"][-1]


# --- rows ----------------------------------------------------------------------------------------------------


def test_row_has_the_arg_shape():
    row = event(7, zones=["2"])
    assert list(row) == [
        "id",
        "name",
        "type",
        "tenantId",
        "kind",
        "location",
        "resourceGroup",
        "subscriptionId",
        "managedBy",
        "sku",
        "plan",
        "properties",
        "tags",
        "identity",
        "zones",
        "extendedLocation",
    ]
    assert list(row["properties"]) == [
        "EventId",
        "EventStatus",
        "EventType",
        "EventSource",
        "NotBefore",
        "DurationInSeconds",
        "Description",
        "ResourceType",
        "Resources",
        "TargetResourceId",
    ]
    assert row["id"] == (
        f"/subscriptions/{SUB_A}/resourcegroups/rg1/providers/microsoft.compute/virtualmachines/vm7"
        "/providers/microsoft.maintenance/scheduledevents/e7"
    )
    assert row["name"] == "E7" and row["type"] == "microsoft.maintenance/scheduledevents"
    assert row["properties"]["TargetResourceId"].endswith("/Microsoft.Compute/virtualMachines/vm7")
    assert (row["kind"], row["managedBy"], row["sku"], row["tags"], row["zones"]) == ("", "", None, {}, ["2"])


def test_row_refuses_an_unknown_resource_type_or_a_target_outside_its_subscription():
    with pytest.raises(ValueError):
        scheduled_event_row(**{**_row_arguments(), "resource_type": "Disk"})
    with pytest.raises(ValueError):
        scheduled_event_row(**{**_row_arguments(), "subscription_id": SUB_B})


def _row_arguments() -> dict:
    return {
        "event_id": "E1",
        "status": "Scheduled",
        "event_type": "Freeze",
        "source": "Platform",
        "not_before": "",
        "duration_seconds": 5,
        "description": "",
        "resources": ["vmss_1"],
        "subscription_id": SUB_A,
        "resource_group": "rg",
        "location": "eastus",
        "resource_type": "VirtualMachine",
        "target_resource_id": f"/subscriptions/{SUB_A}/resourceGroups/rg/providers/Microsoft.Compute"
        "/virtualMachineScaleSets/vmss",
    }


# --- Microsoft's documented queries ("Scheduled Events Using Azure Resource Graph") ----------------------------


def test_documented_query_returns_every_scheduled_event_as_arg_rows(table):
    body = query(table, SCHEDULED_EVENTS)
    assert (body["totalRecords"], body["count"], body["resultTruncated"], body["facets"]) == (4, 4, "false", [])
    assert "$skipToken" not in body
    assert sorted(body["data"], key=lambda row: row["name"]) == EVENTS  # objects, not JSON text; key order kept
    assert all(list(row) == list(COLUMN_NAMES) for row in body["data"])  # no hidden column


def test_documented_sorted_projection_with_a_capital_m(table):
    body = query(table, DOC_SORTED_PROJECTION)
    assert list(body["data"][0]) == [
        "resourceGroup",
        "zones",
        "properties_EventStatus",
        "properties_NotBefore",
        "properties_Resources",
        "properties_EventId",
        "properties_TargetResourceId",
        "properties_EventType",
        "properties_Description",
    ]
    # sort's default is descending; the last key says asc
    assert [row["properties_EventStatus"] for row in body["data"]] == ["Started", "Scheduled", "Completed", "Canceled"]
    first = body["data"][1]
    assert first["zones"] == ["1"] and first["properties_Resources"] == ["vm1", "vm1b"]
    assert first["properties_NotBefore"] == NOT_BEFORE
    assert first["properties_TargetResourceId"] == EVENTS[0]["properties"]["TargetResourceId"]


# --- queries a user is likely to write ("Scheduled Events Using Azure Resource Graph") -------------------------

LIKELY = [
    (
        f"{SCHEDULED_EVENTS} | summarize count() by tostring(properties.EventType) | order by properties_EventType asc",
        [{"properties_EventType": "Freeze", "count_": 3}, {"properties_EventType": "Reboot", "count_": 1}],
    ),
    ('maintenanceresources | where properties.EventStatus =~ "scheduled" | project name', [{"name": "E1"}]),
    ('maintenanceresources | where resourceGroup in~ ("rg2") | project name', [{"name": "E2"}]),
    (
        'maintenanceresources | where name == "E2" | mv-expand vm = properties.Resources | project name, vm = tostring(vm)',
        [{"name": "E2", "vm": "vm2"}, {"name": "E2", "vm": "vm2b"}],
    ),
    ('maintenanceresources | where id has "vm3" | project name', [{"name": "E3"}]),
    (
        'maintenanceresources | where name == "E1" | extend vmName = tostring(split(id, "/")[8]) | project vmName',
        [{"vmName": "vm1"}],
    ),
    (
        (
            "maintenanceresources | where isnotempty(resourceGroup) | summarize arg_max(name, id) by resourceGroup "
            "| project resourceGroup, name | order by resourceGroup asc"
        ),
        [{"resourceGroup": "RG2", "name": "E2"}, {"resourceGroup": "rg1", "name": "E4"}],
    ),
    (
        (
            "maintenanceresources | where isnotempty(resourceGroup) "
            "| summarize types = make_set(tostring(properties.EventType)) by resourceGroup | order by resourceGroup asc"
        ),
        [{"resourceGroup": "RG2", "types": ["Reboot"]}, {"resourceGroup": "rg1", "types": ["Freeze"]}],
    ),
    (
        (
            'maintenanceresources | where name in ("E1", "E2") '
            '| extend pending = iff(properties.EventStatus == "Scheduled", "yes", "no") | project name, pending '
            "| order by name asc"
        ),
        [{"name": "E1", "pending": "yes"}, {"name": "E2", "pending": "no"}],
    ),
    (
        'maintenanceresources | where name == "E3" | parse id with * "/virtualmachines/" vm "/providers/" * | project vm',
        [{"vm": "vm3"}],
    ),
    (
        'maintenanceresources | where name == "E3" | project-rename eventName = name | project eventName',
        [{"eventName": "E3"}],
    ),
    ("maintenanceresources | top 1 by name | project name", [{"name": "PYN_-ZL8"}]),
    (
        "maintenanceresources | distinct subscriptionId | order by subscriptionId asc",
        [{"subscriptionId": SUB_A}, {"subscriptionId": SUB_B}],
    ),
    ("maintenanceresources | count", [{"Count": 5}]),
    (
        (
            'maintenanceresources | where name == "E1" | union (maintenanceresources | where name == "E2") | project name '
            "| order by name asc"
        ),
        [{"name": "E1"}, {"name": "E2"}],
    ),
    (
        (
            'maintenanceresources | where name startswith "E" | project id, name '
            "| join kind=leftouter (Maintenanceresources | project id, status = tostring(properties.EventStatus)) on id "
            "| project name, status | order by name asc"
        ),
        [
            {"name": "E1", "status": "Scheduled"},
            {"name": "E2", "status": "Started"},
            {"name": "E3", "status": "Completed"},
            {"name": "E4", "status": "Canceled"},
        ],
    ),
    # duckdb-kql alone answers NULL here (RFC 1123 inside a dynamic value); see query._parse_rfc1123_dynamic
    (
        "maintenanceresources | where todatetime(properties.NotBefore) between (now() .. 1h) | project name",
        [{"name": "E1"}],
    ),
    (
        (
            "MAINTENANCERESOURCES | where tostring(properties.EventStatus) in ('Started', 'Canceled') | project name "
            "| order by name asc"
        ),
        [{"name": "E2"}, {"name": "E4"}],
    ),
]


@pytest.mark.parametrize(("kql", "expected"), LIKELY, ids=[kql[:60] for kql, _ in LIKELY])
def test_likely_query(table, kql, expected):
    assert query(table, kql)["data"] == expected


def test_now_and_ago_follow_the_request_clock(table):
    kql = "maintenanceresources | where todatetime(properties.NotBefore) > ago(1h) | project name"
    assert query(table, kql, now=NOW)["data"] == [{"name": "E1"}]
    assert query(table, kql, now=NOW + timedelta(hours=2))["data"] == []  # same text, translated once, new clock


def test_table_format_types_columns_and_renders_values_as_kusto_does(table):
    body = query(
        table,
        'maintenanceresources | where name == "E1" '
        "| extend when = todatetime(properties.NotBefore), n = 1.5, yes = true, i = 1, span = 1d, "
        "nan = todouble('nan') "
        "| project name, when, n, yes, i, span, nan, properties.Resources, properties.Missing",
        result_format="table",
    )
    assert body["data"]["columns"] == [
        {"name": "name", "type": "string"},
        {"name": "when", "type": "datetime"},
        {"name": "n", "type": "number"},
        {"name": "yes", "type": "boolean"},
        {"name": "i", "type": "integer"},
        {"name": "span", "type": "string"},
        {"name": "nan", "type": "number"},
        {"name": "properties_Resources", "type": "object"},
        {"name": "properties_Missing", "type": "object"},
    ]
    assert body["data"]["rows"] == [
        ["E1", "2025-09-19T18:29:47Z", 1.5, True, 1, "1.00:00:00", "NaN", ["vm1", "vm1b"], None]
    ]
    assert (body["totalRecords"], body["count"]) == (1, 1)


# --- paging ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_table() -> MaintenanceTable:
    table = MaintenanceTable()
    table.upsert([event(n, ["Scheduled", "Started", "Completed"][n % 3]) for n in range(2500)], changed_at=EARLIER)
    return table


def test_skip_token_pages_through_every_row_once(big_table):
    kql = "maintenanceresources | project id, name"
    pages = [query(big_table, kql)]
    while "$skipToken" in pages[-1]:
        pages.append(query(big_table, kql, skip_token=pages[-1]["$skipToken"]))
    assert [page["count"] for page in pages] == [1000, 1000, 500]
    assert {page["totalRecords"] for page in pages} == {2500}
    assert {page["resultTruncated"] for page in pages} == {"false"}
    names = [row["name"] for page in pages for row in page["data"]]
    assert sorted(names) == sorted(f"E{n}" for n in range(2500))


def test_skip_token_is_opaque_base64_bound_to_query_and_scope(big_table):
    kql = "maintenanceresources | project id"
    token = query(big_table, kql, top=10)["$skipToken"]
    assert json.loads(base64.b64decode(token))["offset"] == 10
    assert refusal(big_table, "maintenanceresources | project id, name", skip_token=token)["code"] == "InvalidSkipToken"
    assert refusal(big_table, kql, skip_token=token, subscriptions=[SUB_B])["code"] == "InvalidSkipToken"
    assert refusal(big_table, kql, skip_token="not a token!")["code"] == "InvalidSkipToken"
    # the same scope spelled differently is the same scope
    assert (
        query(big_table, kql, top=10, subscriptions=[SUB_A])["$skipToken"]
        == query(big_table, kql, top=10, subscriptions=[SUB_A.upper()])["$skipToken"]
    )


def test_top_and_skip_select_a_window_of_the_sorted_result(big_table):
    kql = "maintenanceresources | order by name asc | project name"
    everything = [row["name"] for row in query(big_table, kql)["data"]]
    body = query(big_table, kql, top=10, skip=5)
    assert [row["name"] for row in body["data"]] == everything[5:15]
    assert (body["totalRecords"], body["count"], body["resultTruncated"]) == (2500, 10, "false")
    following = query(big_table, kql, top=10, skip=5, skip_token=body["$skipToken"])  # the token wins over $skip
    assert [row["name"] for row in following["data"]] == everything[15:25]


def test_take_disables_skip_and_paging_and_the_smaller_limit_wins(big_table):
    body = query(big_table, "maintenanceresources | take 50 | project name", top=10, skip=5)
    assert (body["totalRecords"], body["count"], body["resultTruncated"]) == (50, 10, "true")
    assert "$skipToken" not in body
    body = query(big_table, "maintenanceresources | limit 2000 | project name")
    assert (body["totalRecords"], body["count"], body["resultTruncated"]) == (2000, 1000, "true")
    body = query(big_table, "maintenanceresources | take 5 | project name", top=10, skip=3)
    assert (body["totalRecords"], body["count"], body["resultTruncated"]) == (5, 5, "false")


def test_a_result_of_only_dynamic_columns_cannot_be_paged(big_table):
    body = query(big_table, "maintenanceresources | project properties")
    assert (body["count"], body["resultTruncated"]) == (1000, "true") and "$skipToken" not in body


def test_skip_past_the_end_is_an_empty_page(big_table):
    body = query(big_table, "maintenanceresources | project name", skip=3000)
    assert (body["totalRecords"], body["count"], body["data"], body["resultTruncated"]) == (2500, 0, [], "false")


PAGEABLE = [
    "maintenanceresources | project id, name",
    "maintenanceresources | sort by name asc | project id",
    "maintenanceresources | sort by tostring(properties.EventStatus), name asc | project name",
    'Maintenanceresources | where properties.EventStatus != "Canceled" | project id',
    "maintenanceresources | mv-expand vm = properties.Resources | project id, vm = tostring(vm)",
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    statuses=st.lists(st.sampled_from(["Scheduled", "Started", "Completed", "Canceled"]), max_size=60),
    top=st.integers(1, 25),
    kql=st.sampled_from(PAGEABLE),
)
def test_paging_yields_the_whole_result_once_in_order(statuses, top, kql):
    table = MaintenanceTable()
    table.upsert([event(n, status) for n, status in enumerate(statuses)], changed_at=EARLIER)
    whole = query(table, kql)
    pages = [query(table, kql, top=top)]
    while "$skipToken" in pages[-1]:
        pages.append(query(table, kql, top=top, skip_token=pages[-1]["$skipToken"]))
    assert [row for page in pages for row in page["data"]] == whole["data"]
    assert all(page["totalRecords"] == whole["totalRecords"] for page in pages)
    assert len(pages) == max(1, -(-whole["totalRecords"] // top))


# --- scoping ---------------------------------------------------------------------------------------------------


def test_subscriptions_scope_the_rows(table):
    assert query(table, "maintenanceresources | distinct subscriptionId", subscriptions=[SUB_B])["data"] == [
        {"subscriptionId": SUB_B}
    ]
    assert query(table, "maintenanceresources | count", subscriptions=[SUB_A.upper()])["data"] == [{"Count": 4}]


def test_a_principal_never_sees_subscriptions_it_may_not_read(table):
    allowed = {SUB_B.upper()}
    assert query_allowed(table, "maintenanceresources | count", [SUB_A], allowed) == [{"Count": 0}]
    assert query_allowed(table, "maintenanceresources | count", None, allowed) == [{"Count": 1}]
    assert query_allowed(table, "maintenanceresources | count", None, lambda sub: sub == SUB_A) == [{"Count": 4}]
    # nor through a union, a join or a let: every mention of the table is the scoped one
    for kql, column in [
        ("maintenanceresources | union maintenanceresources", "subscriptionId"),
        ("maintenanceresources | join kind=leftouter (maintenanceresources) on id", "subscriptionId1"),
        ("let all = maintenanceresources; all", "subscriptionId"),
    ]:
        assert query_allowed(table, f"{kql} | distinct {column}", None, allowed) == [{column: SUB_B}]


def query_allowed(table, kql, subscriptions, allowed):
    return run_query(table, QueryRequest(kql, subscriptions=subscriptions), allowed=allowed)["data"]


# --- the table -------------------------------------------------------------------------------------------------


def test_upsert_updates_the_event_in_place():
    table = MaintenanceTable()
    assert table.upsert([event(1, "Scheduled"), event(2, "Scheduled")], changed_at=EARLIER) == 2
    assert table.upsert([event(1, "Started"), event(1, "Completed")], changed_at=NOW) == 1  # the last one wins
    assert len(table) == 2
    body = query(table, "maintenanceresources | project name, status = tostring(properties.EventStatus)")
    assert sorted(body["data"], key=lambda row: row["name"]) == [
        {"name": "E1", "status": "Completed"},
        {"name": "E2", "status": "Scheduled"},
    ]


def test_bulk_upsert_updates_and_inserts():
    table = MaintenanceTable()
    table.upsert([event(n) for n in range(1500)], changed_at=EARLIER)
    table.upsert([event(n, "Completed") for n in range(1000, 2600)], changed_at=NOW)  # beyond the index path
    assert len(table) == 2600
    body = query(
        table,
        "maintenanceresources | summarize count() by tostring(properties.EventStatus) "
        "| order by properties_EventStatus asc",
    )
    assert body["data"] == [
        {"properties_EventStatus": "Completed", "count_": 1600},
        {"properties_EventStatus": "Scheduled", "count_": 1000},
    ]


def test_retention_drops_only_finished_events_older_than_the_cutoff():
    table = MaintenanceTable()
    table.upsert(
        [event(1, "Completed"), event(2, "Canceled"), event(3, "Scheduled"), event(4, "Started")], changed_at=EARLIER
    )
    table.upsert([event(5, "Completed")], changed_at=NOW)
    assert table.remove_older_than(NOW - timedelta(days=1)) == 2
    names = {row["name"] for row in query(table, "maintenanceresources | project name")["data"]}
    assert names == {"E3", "E4", "E5"} and len(table) == 3


# --- errors and hostile queries --------------------------------------------------------------------------------


def test_bad_kql_is_a_parser_failure(table):
    detail = refusal(table, "maintenanceresources | where")
    assert detail["code"] == "ParserFailure" and detail["line"] == 1


@pytest.mark.parametrize(
    "kql",
    [
        "maintenanceresources | make-series count() on todatetime(properties.NotBefore) step 1d",
        "maintenanceresources | evaluate bag_unpack(properties)",
        "maintenanceresources | lookup (maintenanceresources) on id",
        "maintenanceresources | getschema",
    ],
)
def test_operators_arg_lacks_are_refused(table, kql):
    assert refusal(table, kql)["code"] == "UnsupportedOperator"


@pytest.mark.parametrize(
    "kql",
    [
        "resources | take 1",
        "maintenanceresources | union resources",
        "maintenanceresources | join (resourcecontainers) on id",
    ],
)
def test_unknown_tables_are_refused(table, kql):
    detail = refusal(table, kql)
    assert detail["code"] == "UnknownTable" and "does not refer to any known table" in detail["message"]


def test_semantic_errors_are_arg_errors_not_duckdb_exceptions(table):
    assert refusal(table, "maintenanceresources | project nope")["code"] == "SemanticError"
    assert refusal(table, "maintenanceresources | extend x = nosuchfunction(name)")["code"] == "UnknownFunction"


@pytest.mark.parametrize(
    "options",
    [
        {"top": 0},
        {"top": 1001},
        {"top": True},
        {"top": "5"},
        {"skip": -1},
        {"result_format": "csv"},
        {"result_format": None},
        {"subscriptions": SUB_A},
    ],
)
def test_bad_options_are_refused(table, options):
    assert refusal(table, "maintenanceresources", **options)["code"] == "InvalidParameter"


@pytest.mark.parametrize("kql", ["", "   ", None])
def test_a_missing_query_is_refused(table, kql):
    assert refusal(table, kql)["code"] == "InvalidParameter"


def test_error_body_has_the_arg_shape(table):
    with pytest.raises(ResourceGraphError) as raised:
        query(table, "resources")
    body = raised.value.body()
    assert list(body) == ["error"] and list(body["error"]) == ["code", "message", "details"]
    assert body["error"]["details"][0]["code"] == "InvalidQuery"


@pytest.mark.parametrize(
    "kql",
    [
        ".show tables",
        "// a comment first\n.show databases",
        '.create database x persist (@"/tmp/forewarn-x.duckdb")',
        ".set-or-replace stolen <| maintenanceresources",
        "forewarn_maintenance_rows | take 1",
        'database("memory").forewarn_maintenance_rows',
        'database("system").duckdb_settings',
        'cluster("c").database("d").maintenanceresources',
        "maintenanceresources | union forewarn_maintenance_rows",
        "maintenanceresources | join kind=inner (forewarn_maintenance_rows) on id",
        'externaldata (line:string) [@"/etc/passwd"]',
        'external_table("x")',
    ],
)
def test_hostile_queries_reach_nothing_but_the_table(table, kql):
    refusal(table, kql)
    assert len(table) == 5


@pytest.mark.parametrize(
    "kql",
    [
        "range x from 1 to 2000000000 step 1 | count",
        "maintenanceresources | extend r = range(1, 2000000000, 1)",
        'maintenanceresources | extend s = strrep("x", 2000000000)',
        'maintenanceresources | extend s = repeat("x", 2000000000)',
        # the replacement written at every position of the text, outside DuckDB's memory_limit
        "maintenanceresources | extend s = replace_regex(tostring(properties), '', 'xxxxxxxx')",
    ],
)
def test_constant_sized_giants_are_refused_before_they_allocate(table, kql):
    assert refusal(table, kql)["code"] in ("UnsupportedOperator", "UnsupportedFunction")


def test_a_query_beyond_the_memory_limit_is_refused_and_the_table_still_answers():
    small = MaintenanceTable(memory_limit=64 * 1024**2)
    small.upsert([event(n) for n in range(200)], changed_at=EARLIER)
    joined = "maintenanceresources" + " | join kind=inner (maintenanceresources) on type" * 2
    detail = refusal(small, joined + " | summarize make_set(properties)")
    assert detail["code"] == "QueryMemoryLimitExceeded"
    assert "64 MiB" in detail["message"]
    assert query(small, "maintenanceresources | count")["data"] == [{"Count": 200}]


def test_a_page_beyond_its_byte_bound_is_refused_before_its_rows_are_read(table):
    documented = "maintenanceresources | where type == 'microsoft.maintenance/scheduledevents' | order by name asc"
    whole = run_query(table, QueryRequest(query=documented))
    size = len(json.dumps(whole["data"], separators=(",", ":")))
    with pytest.raises(ResourceGraphError) as raised:
        run_query(table, QueryRequest(query=documented), max_bytes=size // 2)
    assert [detail["code"] for detail in raised.value.body()["error"]["details"]] == ["ResponsePayloadTooLarge"]
    # Within the bound, the same page in the same order.
    assert run_query(table, QueryRequest(query=documented), max_bytes=size * 2) == whole


@pytest.mark.parametrize("name", ["p", "q", "forewarn_page"])
def test_no_column_name_hides_a_page_from_its_byte_bound(table, name):
    # Short values under a name the measuring SQL could have taken for the row: still measured.
    kql = f"maintenanceresources | project {name} = 1, big = strcat(tostring(properties), tostring(properties))"
    with pytest.raises(ResourceGraphError) as raised:
        run_query(table, QueryRequest(query=kql), max_bytes=1000)
    assert raised.value.details[-1]["code"] == "ResponsePayloadTooLarge"


def test_long_column_names_count_on_every_row(table):
    named = f"maintenanceresources | project ['{'x' * 400}'] = 1"
    with pytest.raises(ResourceGraphError) as raised:
        run_query(table, QueryRequest(query=named), max_bytes=1500)  # five rows of 400 characters of name
    assert raised.value.details[-1]["code"] == "ResponsePayloadTooLarge"
    # Named once in the table format.
    assert run_query(table, QueryRequest(query=named, result_format="table"), max_bytes=1500)["count"] == 5


def test_quotes_in_literals_and_names_stay_data(table):
    assert (
        query(table, 'maintenanceresources | where name == "x\'; DROP TABLE forewarn_maintenance_rows; --"')["data"]
        == []
    )
    body = query(table, "maintenanceresources | take 1 | project ['a\"; DROP TABLE x; --'] = 1")
    assert body["data"] == [{'a"; DROP TABLE x; --': 1}]
    assert len(table) == 5


def test_the_database_can_neither_read_files_nor_change_settings(table):
    cursor = table.cursor()
    try:
        with pytest.raises(duckdb.PermissionException):
            cursor.execute("SELECT * FROM read_csv('/etc/passwd')")
        with pytest.raises(duckdb.Error, match="locked"):
            cursor.execute("SET enable_external_access = true")
    finally:
        cursor.close()


def test_a_runaway_query_is_interrupted(big_table):
    with pytest.raises(ResourceGraphError) as raised:
        run_query(
            big_table,
            QueryRequest(
                "maintenanceresources | join kind=inner (maintenanceresources) on type "
                "| join kind=inner (maintenanceresources) on type | count"
            ),  # 2,500 cubed
            timeout_seconds=0.3,
        )
    assert raised.value.details[-1]["code"] == "QueryTimeout"


# --- plan.py: the rewrites that keep a million rows fast must not change an answer ------------------------------


def test_documented_queries_read_shredded_columns_and_count_without_sorting():
    from forewarn.azure.resource_graph.query import _compile

    sorted_projection = _compile(DOC_SORTED_PROJECTION)
    assert "forewarn_event_status" in sorted_projection.sql and "ORDER BY" in sorted_projection.sql
    assert "json_extract(properties, '$.EventStatus') ->>" not in sorted_projection.sql
    assert "ORDER BY" not in sorted_projection.count_sql
    due = _compile(
        "maintenanceresources | where isnotempty(tostring(properties.NotBefore)) "
        "| where todatetime(properties.NotBefore) between (ago(1d) .. now()) | project id"
    )
    assert "forewarn_not_before_time BETWEEN" in due.sql
    # A limit makes the count depend on the order: the count keeps it.
    assert "ORDER BY" in _compile("maintenanceresources | top 2 by tostring(properties.EventId)").count_sql


@pytest.mark.parametrize(
    "kql",
    [
        DOC_SORTED_PROJECTION,
        "maintenanceresources | where properties.EventStatus =~ 'scheduled' | project id, name",
        "maintenanceresources | summarize count() by tostring(properties.EventType)",
        "maintenanceresources | where todatetime(properties.NotBefore) > now() | project id",
        "maintenanceresources | where tostring(properties.EventStatus) == 'Started' | project-away properties, tags",
        "maintenanceresources | where tostring(properties.EventStatus) != 'x' | sort by tostring(properties.EventId)"
        " | summarize l = make_list(id) | project n = array_length(l)",
        "maintenanceresources | extend properties = pack('EventStatus', 'x')"
        " | where tostring(properties.EventStatus) == 'x' | count",
        "maintenanceresources | where tostring(properties.EventStatus) == 'Started' | join kind=inner "
        "(maintenanceresources | where tostring(properties.EventType) == 'Reboot' | project id, t = properties.EventType)"
        " on id | project id, t",
    ],
)
def test_rewritten_queries_answer_as_the_plain_ones(table, kql, monkeypatch):
    from forewarn.azure.resource_graph import query as query_module
    from forewarn.azure.resource_graph.plan import Plan

    rewritten = query(table, kql)
    assert not any(name in json.dumps(rewritten) for name in ("forewarn_", "subscription_key", "changed_at"))
    monkeypatch.setattr(query_module, "plan", lambda sql, _: Plan(sql, sql, False))
    query_module._compile.cache_clear()
    try:
        plain = query(table, kql)
    finally:
        query_module._compile.cache_clear()
    if not any(word in kql for word in ("order by", "sort by", "top ")):
        # without an order, rows come in whatever order DuckDB's threads finish them (a summarize's groups too)
        for answer in (rewritten, plain):
            answer["data"] = sorted(answer["data"], key=lambda row: json.dumps(row, sort_keys=True))
    assert rewritten == plain


def test_a_shredded_column_name_is_no_column_of_the_table(table):
    detail = refusal(table, "maintenanceresources | where forewarn_event_status == 'Scheduled'")
    assert detail["code"] == "SemanticError"
