"""The EC2 component's part of the store: events, instance states, event windows and notification attributes.

Each record is plain JSON text in one column (the same for every database); each kind of change the component makes
(aws/changes.py) has its writer here, and ``load`` reads the stored state back under the engine's names for it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from forewarn.aws.changes import Ec2EventChanged, Ec2NotificationAttributesChanged, Ec2StateChanged, Ec2WindowChanged
from forewarn.aws.component import Ec2Rows, StoredEc2
from forewarn.aws.model import Ec2Code, Ec2Event, Ec2EventState, Ec2State, InstanceState, NotificationAttributes
from forewarn.aws.windows import EventWindow, TimeRange
from forewarn.store.records import Reader, Records, Rows, Touched, Writer, time_from_text, time_text

NOTIFICATION_ATTRIBUTES_KEY = "ec2_notification_attributes"  # in forewarn_meta


def encode_ec2_event(event: Ec2Event) -> str:
    return json.dumps(
        {
            "event_id": event.event_id,
            "seq": event.seq,
            "instance_id": event.instance_id,
            "code": event.code.value,
            "description": event.description,
            "not_before": time_text(event.not_before),
            "not_after": time_text(event.not_after),
            "not_before_deadline": time_text(event.not_before_deadline),
            "state": event.state.value,
            "created_at": time_text(event.created_at),
            "started_at": time_text(event.started_at),
            "ends_at": time_text(event.ends_at),
            "ended_at": time_text(event.ended_at),
        },
        separators=(",", ":"),
    )


def decode_ec2_event(text: str) -> Ec2Event:
    data = json.loads(text)
    return Ec2Event(
        event_id=data["event_id"],
        seq=data["seq"],
        instance_id=data["instance_id"],
        code=Ec2Code(data["code"]),
        description=data["description"],
        not_before=datetime.fromisoformat(data["not_before"]),
        not_after=time_from_text(data["not_after"]),
        not_before_deadline=time_from_text(data["not_before_deadline"]),
        state=Ec2EventState(data["state"]),
        created_at=datetime.fromisoformat(data["created_at"]),
        started_at=time_from_text(data["started_at"]),
        ends_at=time_from_text(data["ends_at"]),
        ended_at=time_from_text(data["ended_at"]),
    )


_EC2_TIMES = ("launched_at", "booted_at", "impact_until", "spot_action_time", "rebalance_at", "terminated_at")


def encode_ec2_state(state: Ec2State) -> str:
    data = {key: getattr(state, key) for key in Ec2State.__dataclass_fields__}
    data["state"] = state.state.value
    for key in _EC2_TIMES:
        data[key] = time_text(data[key])
    return json.dumps(data, separators=(",", ":"))


def decode_ec2_state(text: str) -> Ec2State:
    data = json.loads(text)
    data["state"] = InstanceState(data["state"])
    for key in _EC2_TIMES:
        data[key] = time_from_text(data.get(key))
    return Ec2State(**data)


def encode_window(window: EventWindow) -> str:
    data = {key: getattr(window, key) for key in EventWindow.__dataclass_fields__}
    data["time_ranges"] = [list(vars(r).values()) for r in window.time_ranges]
    return json.dumps(data, separators=(",", ":"))


def decode_window(text: str) -> EventWindow:
    data = json.loads(text)
    data["time_ranges"] = tuple(TimeRange(*r) for r in data["time_ranges"])
    for key in ("instance_ids", "dedicated_host_ids"):
        data[key] = tuple(data[key])
    for key in ("instance_tags", "tags"):
        data[key] = tuple(tuple(pair) for pair in data[key])
    return EventWindow(**data)


def encode_attributes(attributes: NotificationAttributes) -> str:
    return json.dumps({"include_all": attributes.include_all, "keys": list(attributes.keys)})


def decode_attributes(text: str | None) -> NotificationAttributes | None:
    if text is None:
        return None
    data = json.loads(text)
    return NotificationAttributes(data["include_all"], tuple(data["keys"]))


# ------------------------------------------------------------------------------------------------------ writers
def _event_changed(change: Ec2EventChanged, rows: Rows) -> None:
    event = change.event
    rows.write(
        "INSERT INTO forewarn_ec2_events (event_id, seq, instance_id, data) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (event_id) DO UPDATE SET data = excluded.data",
        (event.event_id, event.seq, event.instance_id, encode_ec2_event(event)),
    )
    rows.touch("forewarn_ec2_events", event.event_id)
    rows.journal(f"ec2 {change.what}", event.event_id, {"instance": event.instance_id, "reason": change.reason})


def _state_changed(change: Ec2StateChanged, rows: Rows) -> None:
    state = change.state
    rows.write(
        "INSERT INTO forewarn_ec2_instances (instance_id, data) VALUES (?, ?) "
        "ON CONFLICT (instance_id) DO UPDATE SET data = excluded.data",
        (state.instance_id, encode_ec2_state(state)),
    )
    rows.touch("forewarn_ec2_instances", state.instance_id)
    rows.journal(f"instance {change.what}", None, {"instance": state.instance_id, "reason": change.reason})


def _attributes_changed(change: Ec2NotificationAttributesChanged, rows: Rows) -> None:
    rows.put_meta(NOTIFICATION_ATTRIBUTES_KEY, encode_attributes(change.attributes))
    rows.journal("notification attributes", None, {})


def _window_changed(change: Ec2WindowChanged, rows: Rows) -> None:
    window = change.window
    if window.state == "deleted":
        rows.write("DELETE FROM forewarn_ec2_windows WHERE window_id = ?", (window.window_id,))
    else:
        rows.write(
            "INSERT INTO forewarn_ec2_windows (window_id, data) VALUES (?, ?) "
            "ON CONFLICT (window_id) DO UPDATE SET data = excluded.data",
            (window.window_id, encode_window(window)),
        )
    rows.touch("forewarn_ec2_windows", window.window_id)
    rows.journal(f"window {change.what}", None, {"window": window.window_id})


def _load(reader: Reader) -> dict[str, Any]:
    return {
        "aws": StoredEc2(
            events=[
                decode_ec2_event(row[0]) for row in reader.rows("SELECT data FROM forewarn_ec2_events ORDER BY seq")
            ],
            states=[decode_ec2_state(row[0]) for row in reader.rows("SELECT data FROM forewarn_ec2_instances")],
            windows=[decode_window(row[0]) for row in reader.rows("SELECT data FROM forewarn_ec2_windows")],
            notification_attributes=decode_attributes(reader.meta.get(NOTIFICATION_ATTRIBUTES_KEY)),
        )
    }


def _reload(reader: Reader, touched: Touched) -> dict[str, Any]:
    attributes = NOTIFICATION_ATTRIBUTES_KEY in touched.get("forewarn_meta", ())
    if not attributes and not any(table in touched for table in EC2_TABLES):
        return {}
    return {
        "aws": Ec2Rows(
            events=reader.current(
                "SELECT event_id, data FROM forewarn_ec2_events",
                "event_id",
                touched.get("forewarn_ec2_events", ()),
                lambda row: decode_ec2_event(row[1]),
            ),
            states=reader.current(
                "SELECT instance_id, data FROM forewarn_ec2_instances",
                "instance_id",
                touched.get("forewarn_ec2_instances", ()),
                lambda row: decode_ec2_state(row[1]),
            ),
            windows=reader.current(
                "SELECT window_id, data FROM forewarn_ec2_windows",
                "window_id",
                touched.get("forewarn_ec2_windows", ()),
                lambda row: decode_window(row[1]),
            ),
            notification_attributes=(
                decode_attributes(reader.meta.get(NOTIFICATION_ATTRIBUTES_KEY)) or NotificationAttributes()
                if attributes
                else None
            ),
        )
    }


EC2_TABLES = ("forewarn_ec2_events", "forewarn_ec2_instances", "forewarn_ec2_windows")
EC2_RECORDS = Records(
    "aws",
    [
        Writer(Ec2EventChanged, _event_changed),
        Writer(Ec2StateChanged, _state_changed),
        Writer(Ec2NotificationAttributesChanged, _attributes_changed),
        Writer(Ec2WindowChanged, _window_changed),
    ],
    _load,
    tables=EC2_TABLES,
    reload=_reload,
)
