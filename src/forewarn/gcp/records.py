"""The Compute Engine component's part of the store: maintenance events and instance states, each a JSON record in
one column (the same for every database)."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import datetime
from typing import Any

from forewarn.core.component import StoredRows
from forewarn.gcp.changes import GceEventChanged, GceStateChanged
from forewarn.gcp.component import GcpRows, StoredGcp
from forewarn.gcp.model import (
    EventState,
    GceMaintenance,
    GceState,
    InstanceStatus,
    MaintenanceKind,
    MaintenanceType,
    OnHostMaintenance,
)
from forewarn.store.records import EndedRecords, RecordTable, Rows, Writer, records_of_tables

_ENUMS: dict[str, Any] = {
    "kind": MaintenanceKind,
    "maintenance_type": MaintenanceType,
    "state": EventState,
    "status": InstanceStatus,
    "on_host_maintenance": OnHostMaintenance,
}

_TIMES = frozenset(
    {
        "window_start",
        "window_end",
        "latest_window_start",
        "created_at",
        "notice_at",
        "started_at",
        "ends_at",
        "ended_at",
        "preempt_at",
        "restart_at",
        "stopped_at",
    }
)


def _encode(record: Any) -> str:
    data: dict[str, Any] = {}
    for item in fields(record):
        value = getattr(record, item.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif item.name in _ENUMS:
            value = value.value
        data[item.name] = value
    return json.dumps(data, separators=(",", ":"))


def _decode(kind: type, text: str) -> Any:
    data = json.loads(text)
    for item in fields(kind):
        value = data.get(item.name)
        if item.name in _ENUMS:
            data[item.name] = _ENUMS[item.name](value)
        elif item.name in _TIMES and value is not None:
            data[item.name] = datetime.fromisoformat(value)
    return kind(**data)


def encode_gce_event(event: GceMaintenance) -> str:
    return _encode(event)


def decode_gce_event(text: str) -> GceMaintenance:
    event: GceMaintenance = _decode(GceMaintenance, text)
    return event


def encode_gce_state(state: GceState) -> str:
    return _encode(state)


def decode_gce_state(text: str) -> GceState:
    state: GceState = _decode(GceState, text)
    return state


# Only live events are loaded: the ended ones are read from the table when asked (GcpComponent's ``history``).
EVENTS = RecordTable(
    "forewarn_gce_events",
    "event_id",
    decode_gce_event,
    ("seq", "instance", "state"),
    updated=("state",),
    order_by="seq",
    loaded=f"state NOT IN ('{EventState.COMPLETED.value}', '{EventState.CANCELED.value}')",
)
INSTANCES = RecordTable("forewarn_gce_instances", "name", decode_gce_state)
GCP_STATE = {"events": EVENTS, "states": INSTANCES}  # under StoredGcp's and GcpRows' names


def _event_changed(change: GceEventChanged, rows: Rows) -> None:
    event = change.event
    EVENTS.put(rows, event.event_id, event.seq, event.instance, event.state.value, encode_gce_event(event))
    rows.journal(f"gce {change.what}", event.event_id, {"instance": event.instance, "reason": change.reason})


def _state_changed(change: GceStateChanged, rows: Rows) -> None:
    state = change.state
    INSTANCES.put(rows, state.name, encode_gce_state(state))
    if change.what != "watched":  # every first read after a maintenance: not worth a journal line each
        rows.journal(f"gce instance {change.what}", None, {"instance": state.name, "reason": change.reason})


def ended_gce_events(database: StoredRows) -> EndedRecords[GceMaintenance]:
    """Where the component reads the maintenance events that ended and left its memory."""
    return EndedRecords(database, EVENTS, "instance")


GCP_RECORDS = records_of_tables(
    "gcp",
    [Writer(GceEventChanged, _event_changed), Writer(GceStateChanged, _state_changed)],
    GCP_STATE,
    StoredGcp,
    GcpRows,
)
