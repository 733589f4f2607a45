"""The Azure component's part of the store: events, DocumentIncarnations, VM states, policies and enabled scopes.

Each record is plain JSON text in one column (the same for every database); each kind of change the component makes
(azure/changes.py) has its writer here, and ``load`` reads the stored state back under the engine's names for it.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from forewarn.azure.changes import EventChanged, IncarnationChanged, PolicyChanged, ScopeEnabled, VmChanged
from forewarn.azure.component import AzureRows, StoredAzure
from forewarn.azure.model import Event, EventSource, EventStatus, EventType, Impact
from forewarn.azure.vms import NotificationProfile, Policy, Power, VmState, policies_from_records, policy_records
from forewarn.store.migrations import AZURE_EVENT_IDS
from forewarn.store.records import RecordTable, Writer, compact, records_of_tables, time_from_text, time_text

if TYPE_CHECKING:
    from forewarn.core.component import StoredRows
    from forewarn.core.ids import NumberedGuids
    from forewarn.store.records import Rows


def encode_event(event: Event) -> str:
    return compact(
        {
            "event_id": event.event_id,
            "seq": event.seq,
            "operation_id": event.operation_id,
            "scope": event.scope,
            "event_type": event.event_type.value,
            "source": event.source.value,
            "resources": list(event.resources),
            "description": event.description,
            "duration_seconds": event.duration_seconds,
            "not_before": time_text(event.not_before),
            "impact_window": event.impact_window.total_seconds(),
            "status": event.status.value,
            "created_at": time_text(event.created_at),
            "started_at": time_text(event.started_at),
            "ends_at": time_text(event.ends_at),
            "ended_at": time_text(event.ended_at),
            "approvals": list(event.approvals),
            "impact": None if event.impact is None else event.impact.value,
            "extra_impacts": event.extra_impacts,
            "central": event.central,
        }
    )


def decode_event(text: str) -> Event:
    data = json.loads(text)
    return Event(
        event_id=data["event_id"],
        seq=data["seq"],
        operation_id=data["operation_id"],
        scope=data["scope"],
        event_type=EventType(data["event_type"]),
        source=EventSource(data["source"]),
        resources=tuple(data["resources"]),
        description=data["description"],
        duration_seconds=data["duration_seconds"],
        not_before=datetime.fromisoformat(data["not_before"]),
        impact_window=timedelta(seconds=data["impact_window"]),
        status=EventStatus(data["status"]),
        created_at=datetime.fromisoformat(data["created_at"]),
        started_at=time_from_text(data["started_at"]),
        ends_at=time_from_text(data["ends_at"]),
        ended_at=time_from_text(data["ended_at"]),
        approvals=tuple(data["approvals"]),
        impact=None if data.get("impact") is None else Impact(data["impact"]),
        extra_impacts=data.get("extra_impacts", 0),
        central=data.get("central", False),
    )


def encode_vm_state(state: VmState) -> str:
    return compact(
        {
            "name": state.name,
            "power": state.power.value,
            "host": state.host,
            "booted_at": time_text(state.booted_at),
            "temp_disk_generation": state.temp_disk_generation,
            "os_disk_generation": state.os_disk_generation,
            "memory_generation": state.memory_generation,
            "impacted_by": state.impacted_by,
            "impact_until": time_text(state.impact_until),
            "terminate": [state.terminate.enable, state.terminate.not_before_timeout.total_seconds()],
            "os_image": [state.os_image.enable, state.os_image.not_before_timeout.total_seconds()],
            "model_version": state.model_version,
            "deleted_at": time_text(state.deleted_at),
        }
    )


def decode_vm_state(text: str) -> VmState:
    data = json.loads(text)
    return VmState(
        name=data["name"],
        power=Power(data["power"]),
        host=data["host"],
        booted_at=_moment(data["booted_at"]),
        temp_disk_generation=data["temp_disk_generation"],
        os_disk_generation=data["os_disk_generation"],
        memory_generation=data["memory_generation"],
        impacted_by=data["impacted_by"],
        impact_until=None if data["impact_until"] is None else _moment(data["impact_until"]),
        terminate=_profile(*data["terminate"]),
        os_image=_profile(*data["os_image"]),
        model_version=data["model_version"],
        deleted_at=time_from_text(data["deleted_at"]),
    )


# A wave leaves hundreds of thousands of VM states that share a handful of moments and profiles: one object each.
@functools.lru_cache(maxsize=4096)
def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


@functools.lru_cache(maxsize=64)
def _profile(enable: bool, seconds: float) -> NotificationProfile:
    return NotificationProfile(enable, timedelta(seconds=seconds))


def encode_policy(policy: Policy) -> str:
    return json.dumps(policy_records([policy])[0], separators=(",", ":"))


def decode_policy(text: str) -> Policy:
    return policies_from_records([json.loads(text)])[0]


# ------------------------------------------------------------------------------------------------------ writers
_LIVE = f"status IN ('{EventStatus.SCHEDULED.value}', '{EventStatus.STARTED.value}')"
# Only live events are loaded: the ended ones are read from the table when asked (StoredEvents). Keyed by number,
# with no index of EventIds: an EventId gives its number back (azure/component.py's event_numbering).
EVENTS = RecordTable(
    "forewarn_azure_events",
    "seq",
    decode_event,
    ("event_id", "scope", "status"),
    updated=("status",),
    order_by="seq",
    loaded=_LIVE,
    numbered=True,
)
SCOPES = RecordTable("forewarn_azure_scopes", "scope", int, record="incarnation", keyed=True)
VMS = RecordTable("forewarn_azure_vms", "name", decode_vm_state)
POLICIES = RecordTable("forewarn_azure_policies", "owner", decode_policy)
ENABLED = RecordTable("forewarn_azure_enabled", "scope", datetime.fromisoformat, record="at", keyed=True)
# under StoredAzure's and AzureRows' names
AZURE_STATE = {"events": EVENTS, "incarnations": SCOPES, "vm_states": VMS, "policies": POLICIES, "enabled": ENABLED}


_EVENT_ID_CHARACTERS = frozenset("0123456789ABCDEF-")


class StoredEvents:
    """The events as the database holds them: where the Azure component reads those it no longer keeps in memory
    (ended, and committed: ``AzureComponent.release``)."""

    def __init__(self, database: StoredRows, event_ids: NumberedGuids) -> None:
        self._database = database
        self._event_ids = event_ids

    def get(self, event_id: str) -> Event | None:
        """The event whose EventId is ``event_id`` (upper case): read by the number the EventId gives back, or, for
        an event written before EventIds did (schema 13), by the EventIds kept from then."""
        seq = self._event_ids.number(event_id)
        found = None if seq is None else self.by_seq(seq)
        if found is not None and found.event_id == event_id:
            return found
        rows = self._database.read(
            f"SELECT {EVENTS.record} FROM {EVENTS.name} WHERE seq = (SELECT seq FROM {AZURE_EVENT_IDS} WHERE "
            "event_id = ?)",
            (event_id,),
        )
        return decode_event(rows[0][0]) if rows else None

    def by_seq(self, seq: int) -> Event | None:
        rows = self._database.read(f"SELECT {EVENTS.record} FROM {EVENTS.name} WHERE seq = ?", (seq,))
        return decode_event(rows[0][0]) if rows else None

    def ids_starting(self, prefix: str) -> list[str]:
        """The EventIds that start with ``prefix`` (upper case hexadecimal digits and hyphens), in order. No index
        holds them (EVENTS): every row is read, a third of a second at a million events (more from a cold disk), so
        callers on the event loop call this in a thread."""
        if not prefix or not set(prefix) <= _EVENT_ID_CHARACTERS:
            return []
        rows = self._database.read(
            f"SELECT event_id FROM {EVENTS.name} WHERE substr(event_id, 1, {len(prefix)}) = ?", (prefix,)
        )
        return sorted(row[0] for row in rows)

    def ended(self) -> list[Event]:
        """Every ended event, in the order they were created."""
        rows = self._database.read(f"SELECT {EVENTS.record} FROM {EVENTS.name} WHERE NOT ({_LIVE}) ORDER BY seq", ())
        return [decode_event(row[0]) for row in rows]


# An event, a VM or a scope that one commit changes several times (an approval moves its event to approved, then to
# Started) gets one row, its latest state (Rows.write_last); the journal keeps every step.
def _event_changed(change: EventChanged, rows: Rows) -> None:
    event = change.event
    EVENTS.put_last(
        rows, str(event.seq), lambda: (event.seq, event.event_id, event.scope, event.status.value, encode_event(event))
    )
    rows.journal(change.what, event.event_id, {"reason": change.reason, "scope": event.scope})


def _vm_changed(change: VmChanged, rows: Rows) -> None:
    state = change.state
    VMS.put_last(rows, state.name, lambda: (state.name, encode_vm_state(state)))
    rows.journal(f"vm {change.what}", None, {"vm": state.name, "reason": change.reason})


def _policy_changed(change: PolicyChanged, rows: Rows) -> None:
    POLICIES.put(rows, change.policy.owner, encode_policy(change.policy))
    rows.journal("policy", None, {"owner": change.policy.owner})


def _scope_enabled(change: ScopeEnabled, rows: Rows) -> None:
    ENABLED.put(rows, change.scope, change.at.isoformat())
    rows.journal("enabled", None, {"scope": change.scope})


def _incarnation_changed(change: IncarnationChanged, rows: Rows) -> None:
    # No journal line: the event change that moved the incarnation has one.
    SCOPES.put_last(rows, change.scope, lambda: (change.scope, change.incarnation))


# A reset empties the EventIds kept from before schema 13 with the events they named.
AZURE_RECORDS = records_of_tables(
    "azure",
    [
        Writer(EventChanged, _event_changed),
        Writer(VmChanged, _vm_changed),
        Writer(PolicyChanged, _policy_changed),
        Writer(ScopeEnabled, _scope_enabled),
        Writer(IncarnationChanged, _incarnation_changed),
    ],
    AZURE_STATE,
    StoredAzure,
    AzureRows,
    emptied=(AZURE_EVENT_IDS,),
)
