"""The EC2 component's part of the store: events, instance states, event windows and notification attributes, and
the SQS queues and their messages.

Each record is plain JSON text in one column (the same for every database); each kind of change the component makes
(aws/changes.py) has its writer here, and ``load`` reads the stored state back under the engine's names for it.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from forewarn.aws.changes import Ec2EventChanged, Ec2NotificationAttributesChanged, Ec2StateChanged, Ec2WindowChanged
from forewarn.aws.component import Ec2Rows, StoredEc2
from forewarn.aws.eventbus import Rule, RuleChanged, Target
from forewarn.aws.lifecycle import HookChanged, LifecycleAction, LifecycleActionChanged, LifecycleHook
from forewarn.aws.model import Ec2Code, Ec2Event, Ec2EventState, Ec2State, InstanceState, NotificationAttributes
from forewarn.aws.queues import (
    Message,
    MessageAttribute,
    MessageChanged,
    Queue,
    QueueChanged,
    QueueSettings,
    Redrive,
    Sent,
)
from forewarn.aws.windows import EventWindow, TimeRange
from forewarn.store.records import (
    EndedRecords,
    Records,
    RecordTable,
    Writer,
    any_touched,
    load_tables,
    reload_tables,
    time_from_text,
    time_text,
)

if TYPE_CHECKING:
    from forewarn.core.component import StoredRows
    from forewarn.store.records import Reader, Rows, Touched

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


def encode_queue(queue: Queue) -> str:
    settings = queue.settings
    redrive = settings.redrive
    data = {
        "name": queue.name,
        "region": queue.region,
        "account_id": queue.account_id,
        "settings": [
            settings.visibility_timeout,
            settings.message_retention_period,
            settings.delay_seconds,
            settings.receive_message_wait_time_seconds,
            settings.maximum_message_size,
        ],
        "redrive": None if redrive is None else [redrive.dead_letter_target_arn, redrive.max_receive_count],
        "fifo": [settings.fifo, settings.content_based_deduplication],
        "sent": [[s.deduplication_id, s.message_id, s.seq, time_text(s.sent_at)] for s in queue.sent],
        "created_at": time_text(queue.created_at),
        "modified_at": time_text(queue.modified_at),
        "purged_at": time_text(queue.purged_at),
        "deleted": queue.deleted,
    }
    return json.dumps(data, separators=(",", ":"))


def decode_queue(text: str) -> Queue:
    data = json.loads(text)
    settings, redrive = data["settings"], data["redrive"]
    return Queue(
        name=data["name"],
        region=data["region"],
        account_id=data["account_id"],
        settings=QueueSettings(
            visibility_timeout=settings[0],
            message_retention_period=settings[1],
            delay_seconds=settings[2],
            receive_message_wait_time_seconds=settings[3],
            maximum_message_size=settings[4],
            redrive=None if redrive is None else Redrive(redrive[0], int(redrive[1])),
            fifo=bool(data.get("fifo", [False])[0]),
            content_based_deduplication=bool(data.get("fifo", [False, False])[1]),
        ),
        sent=tuple(Sent(d, m, int(seq), datetime.fromisoformat(at)) for d, m, seq, at in data.get("sent", [])),
        created_at=datetime.fromisoformat(data["created_at"]),
        modified_at=datetime.fromisoformat(data["modified_at"]),
        purged_at=time_from_text(data["purged_at"]),
        deleted=data["deleted"],
    )


def message_key(message: Message) -> str:
    return f"{message.queue}/{message.message_id}"


def encode_message(message: Message) -> str:
    attributes = [
        [
            a.name,
            a.data_type,
            a.string_value,
            None if a.binary_value is None else base64.b64encode(a.binary_value).decode(),
        ]
        for a in message.attributes
    ]
    data = {
        "message_id": message.message_id,
        "seq": message.seq,
        "queue": message.queue,
        "body": message.body,
        "sent_at": time_text(message.sent_at),
        "visible_at": time_text(message.visible_at),
        "attributes": attributes,
        "receive_count": message.receive_count,
        "first_received_at": time_text(message.first_received_at),
        "receipt": message.receipt,
        "dead_letter_source": message.dead_letter_source,
        "group": [message.group_id, message.deduplication_id],
    }
    return json.dumps(data, separators=(",", ":"))


def decode_message(text: str) -> Message:
    data = json.loads(text)
    return Message(
        message_id=data["message_id"],
        seq=data["seq"],
        queue=data["queue"],
        body=data["body"],
        sent_at=datetime.fromisoformat(data["sent_at"]),
        visible_at=datetime.fromisoformat(data["visible_at"]),
        attributes=tuple(
            MessageAttribute(name, kind, string, None if binary is None else base64.b64decode(binary))
            for name, kind, string, binary in data["attributes"]
        ),
        receive_count=data["receive_count"],
        first_received_at=time_from_text(data["first_received_at"]),
        receipt=data["receipt"],
        dead_letter_source=data["dead_letter_source"],
        group_id=data.get("group", [None, None])[0],
        deduplication_id=data.get("group", [None, None])[1],
    )


def encode_rule(rule: Rule) -> str:
    data = {
        "name": rule.name,
        "pattern": rule.pattern_text,
        "region": rule.region,
        "account_id": rule.account_id,
        "created_at": time_text(rule.created_at),
        "state": rule.state,
        "description": rule.description,
        "targets": [[target.target_id, target.arn] for target in rule.targets],
        "deleted": rule.deleted,
    }
    return json.dumps(data, separators=(",", ":"))


def decode_rule(text: str) -> Rule:
    data = json.loads(text)
    return Rule(
        name=data["name"],
        pattern=json.loads(data["pattern"]),
        pattern_text=data["pattern"],
        region=data["region"],
        account_id=data["account_id"],
        created_at=datetime.fromisoformat(data["created_at"]),
        state=data["state"],
        description=data["description"],
        targets=tuple(Target(target_id, arn) for target_id, arn in data["targets"]),
        deleted=data["deleted"],
    )


_ACTION_TIMES = ("started_at", "timeout_at", "global_at")


def encode_hook(hook: LifecycleHook) -> str:
    return json.dumps({key: getattr(hook, key) for key in LifecycleHook.__dataclass_fields__}, separators=(",", ":"))


def decode_hook(text: str) -> LifecycleHook:
    return LifecycleHook(**json.loads(text))


def encode_action(action: LifecycleAction) -> str:
    data = {key: getattr(action, key) for key in LifecycleAction.__dataclass_fields__}
    for key in _ACTION_TIMES:
        data[key] = time_text(data[key])
    return json.dumps(data, separators=(",", ":"))


def decode_action(text: str) -> LifecycleAction:
    data = json.loads(text)
    for key in _ACTION_TIMES:
        data[key] = datetime.fromisoformat(data[key])
    return LifecycleAction(**data)


# ------------------------------------------------------------------------------------------------------ writers
# Only active events are loaded, with those that ended within the week DescribeInstanceStatus shows them
# (Ec2Component): the others are read from the table when asked.
EVENTS = RecordTable(
    "forewarn_ec2_events",
    "event_id",
    decode_ec2_event,
    ("seq", "instance_id", "state", "ended_at"),
    updated=("state", "ended_at"),
    order_by="seq",
    loaded=f"state = '{Ec2EventState.ACTIVE.value}'",
)
INSTANCES = RecordTable("forewarn_ec2_instances", "instance_id", decode_ec2_state)
WINDOWS = RecordTable("forewarn_ec2_windows", "window_id", decode_window)
QUEUES = RecordTable("forewarn_sqs_queues", "name", decode_queue)
MESSAGES = RecordTable("forewarn_sqs_messages", "message_key", decode_message, ("seq", "queue"), order_by="seq")
RULES = RecordTable("forewarn_eventbridge_rules", "name", decode_rule)
HOOKS = RecordTable("forewarn_asg_hooks", "hook_key", decode_hook)
ACTIONS = RecordTable("forewarn_asg_actions", "token", decode_action)
# under StoredEc2's and Ec2Rows' names (the notification attributes are a meta key)
EC2_STATE = {
    "events": EVENTS,
    "states": INSTANCES,
    "windows": WINDOWS,
    "queues": QUEUES,
    "messages": MESSAGES,
    "rules": RULES,
    "hooks": HOOKS,
    "actions": ACTIONS,
}


def _event_changed(change: Ec2EventChanged, rows: Rows) -> None:
    event = change.event
    ended_at = time_text(event.ended_at)
    EVENTS.put(rows, event.event_id, event.seq, event.instance_id, event.state.value, ended_at, encode_ec2_event(event))
    rows.journal(f"ec2 {change.what}", event.event_id, {"instance": event.instance_id, "reason": change.reason})


class EndedEc2Events(EndedRecords[Ec2Event]):
    """Where the component reads the events that ended and left its memory."""

    def __init__(self, database: StoredRows) -> None:
        super().__init__(database, EVENTS, "instance_id")

    def ended_since(self, moment: datetime) -> list[Ec2Event]:
        """The events that ended at ``moment`` or later, in the order they were created."""
        return self.where("ended_at >= ?", (time_text(moment),))


def _state_changed(change: Ec2StateChanged, rows: Rows) -> None:
    state = change.state
    INSTANCES.put(rows, state.instance_id, encode_ec2_state(state))
    rows.journal(f"instance {change.what}", None, {"instance": state.instance_id, "reason": change.reason})


def _attributes_changed(change: Ec2NotificationAttributesChanged, rows: Rows) -> None:
    rows.put_meta(NOTIFICATION_ATTRIBUTES_KEY, encode_attributes(change.attributes))
    rows.journal("notification attributes", None, {})


def _window_changed(change: Ec2WindowChanged, rows: Rows) -> None:
    window = change.window
    if window.state == "deleted":
        WINDOWS.delete(rows, window.window_id)
    else:
        WINDOWS.put(rows, window.window_id, encode_window(window))
    rows.journal(f"window {change.what}", None, {"window": window.window_id})


def _queue_changed(change: QueueChanged, rows: Rows) -> None:
    # A deleted queue keeps its row, marked deleted (one statement per table keeps a queue deleted and created again
    # in one group commit in order; queues are few).
    QUEUES.put(rows, change.queue.name, encode_queue(change.queue))
    if change.what != "deduplication":  # a FIFO queue's every send: its traffic, not worth a journal line
        rows.journal(f"queue {change.what}", None, {"queue": change.queue.name})


def _rule_changed(change: RuleChanged, rows: Rows) -> None:
    # As queues: a deleted rule keeps its row, marked deleted.
    RULES.put(rows, change.rule.name, encode_rule(change.rule))
    rows.journal(f"rule {change.what}", None, {"rule": change.rule.name})


def _hook_changed(change: HookChanged, rows: Rows) -> None:
    HOOKS.put(rows, change.hook.key, encode_hook(change.hook))
    rows.journal(f"lifecycle hook {change.what}", None, {"hook": change.hook.key})


def _action_changed(change: LifecycleActionChanged, rows: Rows) -> None:
    action = change.action
    ACTIONS.put(rows, action.token, encode_action(action))
    detail = {"instance": action.instance_id, "hook": action.hook, "result": action.result}
    rows.journal(f"lifecycle action {change.what}", None, detail)


def _message_changed(change: MessageChanged, rows: Rows) -> None:
    message = change.message
    key = message_key(message)
    # Upserts run before deletes (a commit runs each statement in the order it first appeared): a message received
    # and deleted in one group commit is gone after it. A deleted key is never written again (IDs are not reused).
    rows.statements.setdefault(MESSAGES.upsert, [])
    if message.deleted:
        MESSAGES.delete(rows, key)
    else:
        MESSAGES.put(rows, key, message.seq, message.queue, encode_message(message))
    if change.what in ("moved", "expired"):  # the rest are a queue's everyday traffic, not worth a journal line
        rows.journal(f"message {change.what}", None, {"queue": message.queue, "message": message.message_id})


def _load(reader: Reader) -> dict[str, Any]:
    attributes = decode_attributes(reader.meta.get(NOTIFICATION_ATTRIBUTES_KEY))
    return {"aws": StoredEc2(**load_tables(reader, EC2_STATE), notification_attributes=attributes)}


def _reload(reader: Reader, touched: Touched) -> dict[str, Any]:
    attributes = NOTIFICATION_ATTRIBUTES_KEY in touched.get("forewarn_meta", ())
    if not attributes and not any_touched(touched, EC2_STATE.values()):
        return {}
    current_attributes = (
        decode_attributes(reader.meta.get(NOTIFICATION_ATTRIBUTES_KEY)) or NotificationAttributes()
        if attributes
        else None
    )
    return {"aws": Ec2Rows(**reload_tables(reader, touched, EC2_STATE), notification_attributes=current_attributes)}


EC2_RECORDS = Records(
    "aws",
    [
        Writer(Ec2EventChanged, _event_changed),
        Writer(Ec2StateChanged, _state_changed),
        Writer(Ec2NotificationAttributesChanged, _attributes_changed),
        Writer(Ec2WindowChanged, _window_changed),
        Writer(QueueChanged, _queue_changed),
        Writer(MessageChanged, _message_changed),
        Writer(RuleChanged, _rule_changed),
        Writer(HookChanged, _hook_changed),
        Writer(LifecycleActionChanged, _action_changed),
    ],
    _load,
    tables=tuple(table.name for table in EC2_STATE.values()),
    reload=_reload,
)
