"""The Amazon SQS actions a queue-mode handler uses, over either wire (protocol.py), served on the EC2 API's port:
CreateQueue, GetQueueUrl, ListQueues, GetQueueAttributes, SetQueueAttributes, DeleteQueue, SendMessage(Batch),
ReceiveMessage (long polling), DeleteMessage(Batch), ChangeMessageVisibility(Batch), PurgeQueue.

Every write goes through :meth:`Maintenance.perform_soon` (committed before answered). A ReceiveMessage that finds
nothing and asks to wait (``WaitTimeSeconds``, or the queue's ``ReceiveMessageWaitTimeSeconds``) is held without
blocking the event loop: it waits, for at most that many wall-clock seconds, until a message is sent to the queue,
time moves, or the queue's next hidden message becomes visible on forewarn's clock ("Amazon SQS short and long
polling"). docs/aws-queues.md lists each action's parameters, errors and choices."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from forewarn.app.runtime import Maintenance
from forewarn.aws.component import Ec2Component
from forewarn.aws.queues import (
    MAX_RECEIVE,
    MAX_VISIBILITY,
    AttributeRefused,
    Message,
    MessageAttribute,
    MessageChanged,
    NotInFlight,
    PurgeInProgress,
    Queue,
    QueueMissing,
    QueueNameTaken,
    Queues,
    QueueSettings,
    ReceiptInvalid,
    Redrive,
    message_of,
)
from forewarn.aws.sqs.protocol import (
    TARGET_PREFIX,
    SqsError,
    invalid_parameter,
    json_error,
    json_response,
    md5_of_attributes,
    md5_of_body,
    missing,
    query_error,
    query_input,
    query_response,
)
from forewarn.core.changes import REPLICATED, Change, Rebuilt, TimeMoved
from forewarn.core.errors import CoreError, Invalid, NotFound
from forewarn.engine.engine import Engine

DEFAULT_ACCOUNT = "123456789012"  # the fleet file's default aws_account_id
DEFAULT_REGION = "us-east-1"
MAX_WAIT = 20  # "WaitTimeSeconds ... Valid values: 0 to 20"
MAX_BATCH = 10
# The changes that may make a message receivable: sent, made visible again, a leader's rows on a replica.
ARRIVALS = ("sent", "visibility", REPLICATED)  # and, in a FIFO queue, a message deleted: its group may go on

# Settable attributes: (the QueueSettings field, the wire's name).
SETTABLE = {
    "VisibilityTimeout": "visibility_timeout",
    "MessageRetentionPeriod": "message_retention_period",
    "DelaySeconds": "delay_seconds",
    "ReceiveMessageWaitTimeSeconds": "receive_message_wait_time_seconds",
    "MaximumMessageSize": "maximum_message_size",
}
READ_ONLY = (
    "QueueArn",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
)
# A FIFO queue's attributes: FifoQueue is set when the queue is created; the high-throughput settings are accepted
# with their default values only (DeduplicationScope queue, FifoThroughputLimit perQueue).
FIFO_ATTRIBUTES = ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
FIFO_DEFAULTS = {"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
ALL_ATTRIBUTES = (*SETTABLE, "RedrivePolicy", *READ_ONLY, *FIFO_ATTRIBUTES)

# The core's refusals in SQS's codes: (JSON __type, query code).
CODES: list[tuple[type[CoreError], str, str]] = [
    (QueueMissing, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"),
    (QueueNameTaken, "QueueNameExists", "QueueAlreadyExists"),
    (ReceiptInvalid, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid"),
    (NotInFlight, "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight"),
    (PurgeInProgress, "PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress"),
    (AttributeRefused, "InvalidAttributeValue", "InvalidAttributeValue"),
    (NotFound, "ResourceNotFoundException", "ResourceNotFoundException"),
    (CoreError, "InvalidParameterValue", "InvalidParameterValue"),
]


def sqs_error(error: CoreError) -> SqsError:
    for kind, code, query_code in CODES:
        if isinstance(error, kind):
            return SqsError(code, str(error), query_code)
    raise AssertionError("CoreError is the last entry")


@dataclass(frozen=True)
class Call:
    """One request: its input (the JSON protocol's shape), where it was sent (for queue URLs) and its region."""

    input: dict[str, Any]
    base_url: str
    region: str | None


class Waiters:
    """The long polls held now, by queue, oldest first. A message sent to a queue (or made visible again) wakes one
    of its polls, the oldest, not all of them: a thousand polls on one queue are not a thousand receives per send.
    Time moving (messages delayed or in flight may be visible now) and a rebuilt engine wake them all."""

    def __init__(self, service: Maintenance):
        self.service = service
        self.held: dict[str, dict[asyncio.Event, None]] = {}
        # Wakes of each queue so far: a poll that looked at its queue after wake N and finds the count past N when it
        # is about to wait was woken meanwhile (while its receive was being committed), and looks again at once.
        self.wakes: dict[str, int] = {}
        service.subscribe(self.on_change)

    def seen(self, name: str) -> int:
        return self.wakes.get(name, 0)

    def on_change(self, changes: list[Change]) -> None:
        if any(isinstance(change, TimeMoved | Rebuilt) for change in changes):
            for name in set(self.wakes) | set(self.held):
                self.wake(name, len(self.held.get(name, ())))
            return
        arrived: dict[str, int] = {}
        for change in changes:
            if isinstance(change, MessageChanged) and (
                change.what in ARRIVALS or (change.what == "deleted" and change.message.group_id is not None)
            ):
                arrived[change.message.queue] = arrived.get(change.message.queue, 0) + 1
        for name, count in arrived.items():
            self.wake(name, count)

    def wake(self, name: str, count: int) -> None:
        self.wakes[name] = self.wakes.get(name, 0) + 1
        waiting = self.held.get(name)
        if waiting:
            for event in list(waiting)[:count]:
                event.set()
                del waiting[event]

    async def wait(self, name: str, seconds: float, seen: int) -> None:
        if self.wakes.get(name, 0) != seen:
            return
        event = asyncio.Event()
        self.held.setdefault(name, {})[event] = None
        try:
            await asyncio.wait_for(event.wait(), max(seconds, 0.0))
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            if event.is_set():  # woken for a message, then its client went away: the next poll gets the wake
                self.wake(name, 1)
            raise
        finally:
            waiting = self.held.get(name)
            if waiting is not None:
                waiting.pop(event, None)
                if not waiting:
                    del self.held[name]


class SqsApi:
    def __init__(self, service: Maintenance):
        self.service = service
        self.waiters = Waiters(service)
        self.actions: dict[str, Callable[[Call], Awaitable[dict[str, Any]]]] = {
            "CreateQueue": self.create_queue,
            "GetQueueUrl": self.get_queue_url,
            "ListQueues": self.list_queues,
            "GetQueueAttributes": self.get_queue_attributes,
            "SetQueueAttributes": self.set_queue_attributes,
            "DeleteQueue": self.delete_queue,
            "SendMessage": self.send_message,
            "ReceiveMessage": self.receive_message,
            "DeleteMessage": self.delete_message,
            "DeleteMessageBatch": self.delete_message_batch,
            "SendMessageBatch": self.send_message_batch,
            "ChangeMessageVisibilityBatch": self.change_message_visibility_batch,
            "ChangeMessageVisibility": self.change_message_visibility,
            "PurgeQueue": self.purge_queue,
        }

    @property
    def queues(self) -> Queues:
        return self.service.settled_engine().component(Ec2Component).queues

    async def run(self, action: str, call: Call) -> dict[str, Any]:
        handler = self.actions.get(action)
        if handler is None:
            raise SqsError("InvalidAction", f"The action {action} is not valid for this web service.")
        try:
            return await handler(call)
        except CoreError as error:
            raise sqs_error(error) from error

    async def perform(self, command: Callable[[Queues], list[Change]]) -> list[Change]:
        return await self.service.perform_soon(lambda engine: command(_queues_of(engine)))

    # ------------------------------------------------------------------------------------------------- queues
    def url(self, call: Call, queue: Queue) -> str:
        return f"{call.base_url}/{queue.account_id}/{queue.name}"

    def queue_of(self, call: Call) -> Queue:
        url = call.input.get("QueueUrl")
        if not isinstance(url, str) or not url:
            raise missing("QueueUrl")
        name = urlsplit(url).path.rstrip("/").rpartition("/")[2] if "/" in url else url
        self.service.catch_up()
        return self.queues.queue(name)

    async def create_queue(self, call: Call) -> dict[str, Any]:
        name = call.input.get("QueueName")
        if not isinstance(name, str) or not name:
            raise missing("QueueName")
        settings = self.settings(QueueSettings(), _mapping(call.input.get("Attributes")))
        region = call.region or DEFAULT_REGION
        account = self.account()
        await self.perform(lambda queues: queues.create(name, region, account, settings))
        return {"QueueUrl": self.url(call, self.queues.queue(name))}

    def account(self) -> str:
        instances = self.service.settled_engine().component(Ec2Component).ec2_instances
        return next((instance.account_id for instance in instances.values()), DEFAULT_ACCOUNT)

    async def get_queue_url(self, call: Call) -> dict[str, Any]:
        name = call.input.get("QueueName")
        if not isinstance(name, str) or not name:
            raise missing("QueueName")
        return {"QueueUrl": self.url(call, self.queues.queue(name))}

    async def list_queues(self, call: Call) -> dict[str, Any]:
        prefix = str(call.input.get("QueueNamePrefix") or "")
        found = sorted(name for name in self.queues.queues if name.startswith(prefix))
        urls = [self.url(call, self.queues.queues[name]) for name in found[:1000]]
        return {"QueueUrls": urls} if urls else {}

    async def delete_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call).name
        await self.perform(lambda queues: queues.delete(name))
        return {}

    def settings(self, current: QueueSettings, attributes: dict[str, Any]) -> QueueSettings:
        changed: dict[str, Any] = {}
        for key, value in attributes.items():
            if key in SETTABLE:
                changed[SETTABLE[key]] = _whole(str(value), key, AttributeRefused)
            elif key == "RedrivePolicy":
                changed["redrive"] = _redrive(str(value)) if value else None
            elif key in ("FifoQueue", "ContentBasedDeduplication"):
                field = "fifo" if key == "FifoQueue" else "content_based_deduplication"
                changed[field] = _boolean(str(value), key)
            elif key in FIFO_DEFAULTS:
                if str(value) != FIFO_DEFAULTS[key]:
                    raise SqsError(
                        "InvalidAttributeValue",
                        f"Invalid value for the parameter {key}: forewarn serves only "
                        f"{FIFO_DEFAULTS[key]} (no high throughput FIFO).",
                    )
            elif key not in ("Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled"):
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {key}.")
        return replace(current, **changed)

    async def set_queue_attributes(self, call: Call) -> dict[str, Any]:
        queue = self.queue_of(call)
        attributes = _mapping(call.input.get("Attributes"))
        if not attributes:
            raise missing("Attributes")
        settings = self.settings(queue.settings, attributes)
        await self.perform(lambda queues: queues.configure(queue.name, settings))
        return {}

    async def get_queue_attributes(self, call: Call) -> dict[str, Any]:
        queue = self.queue_of(call)
        names = call.input.get("AttributeNames") or []
        wanted = ALL_ATTRIBUTES if "All" in names else tuple(names)
        for name in wanted:
            if name not in ALL_ATTRIBUTES:
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        values = self.attribute_values(queue)
        shown = {name: values[name] for name in wanted if name in values}
        return {"Attributes": shown} if shown else {}

    def attribute_values(self, queue: Queue) -> dict[str, str]:
        visible, in_flight, delayed = self.queues.counts(queue.name)
        settings = queue.settings
        values = {key: str(getattr(settings, field)) for key, field in SETTABLE.items()}
        if settings.redrive is not None:
            values["RedrivePolicy"] = json.dumps(
                {
                    "deadLetterTargetArn": settings.redrive.dead_letter_target_arn,
                    "maxReceiveCount": settings.redrive.max_receive_count,
                },
                separators=(",", ":"),
            )
        values |= {
            "QueueArn": queue.arn,
            "ApproximateNumberOfMessages": str(visible),
            "ApproximateNumberOfMessagesNotVisible": str(in_flight),
            "ApproximateNumberOfMessagesDelayed": str(delayed),
            "CreatedTimestamp": str(int(queue.created_at.timestamp())),
            "LastModifiedTimestamp": str(int(queue.modified_at.timestamp())),
        }
        if settings.fifo:
            values |= {"FifoQueue": "true", "ContentBasedDeduplication": str(settings.content_based_deduplication)}
            values["ContentBasedDeduplication"] = values["ContentBasedDeduplication"].lower()
            values |= FIFO_DEFAULTS
        return values

    async def purge_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call).name
        await self.perform(lambda queues: queues.purge(name))
        return {}

    # ----------------------------------------------------------------------------------------------- messages
    async def send_message(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call).name
        body = call.input.get("MessageBody")
        if not isinstance(body, str) or not body:
            raise missing("MessageBody")
        delay_text = call.input.get("DelaySeconds")
        delay = None if delay_text is None else _whole(str(delay_text), "DelaySeconds", Invalid)
        attributes = _message_attributes(_mapping(call.input.get("MessageAttributes")))
        group, given = (
            _optional_text(call.input, "MessageGroupId"),
            _optional_text(call.input, "MessageDeduplicationId"),
        )
        queue = self.queues.queue(name)
        if queue.settings.fifo and group is None:
            raise missing("MessageGroupId")
        deduplication = self.queues.deduplication_id(queue, body, group, given, delay) if queue.settings.fifo else None
        changes = await self.perform(lambda queues: queues.send(name, body, attributes, delay, group, given))
        sent = next((c.message for c in changes if isinstance(c, MessageChanged)), None)
        # a FIFO send deduplicated: accepted, and answered with the message it repeats
        first = self.queues.queue(name).sent_as(deduplication, self.service.now()) if deduplication else None
        message_id = sent.message_id if sent is not None else first.message_id if first is not None else ""
        answer = {"MessageId": message_id, "MD5OfMessageBody": md5_of_body(body)}
        if queue.settings.fifo:
            answer["SequenceNumber"] = f"{(sent.seq if sent is not None else first.seq if first else 0):020d}"
        if attributes:
            answer["MD5OfMessageAttributes"] = md5_of_attributes(_digestable(attributes))
        return answer

    async def receive_message(self, call: Call) -> dict[str, Any]:
        queue = self.queue_of(call)
        given = call.input
        most = _whole(str(given.get("MaxNumberOfMessages", 1)), "MaxNumberOfMessages", Invalid)
        visibility_text = given.get("VisibilityTimeout")
        visibility = None if visibility_text is None else _whole(str(visibility_text), "VisibilityTimeout", Invalid)
        wait_text = given.get("WaitTimeSeconds")
        wait = queue.settings.receive_message_wait_time_seconds
        if wait_text is not None:
            wait = _whole(str(wait_text), "WaitTimeSeconds", Invalid)
        if not 1 <= most <= MAX_RECEIVE:
            raise invalid_parameter(
                f"Value {most} for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if "
                "provided."
            )
        if visibility is not None and not 0 <= visibility <= MAX_VISIBILITY:
            raise invalid_parameter(
                f"Value {visibility} for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200."
            )
        if not 0 <= wait <= MAX_WAIT:
            raise invalid_parameter(
                f"Value {wait} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
            )
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        while True:
            seen = self.waiters.seen(queue.name)
            received = await self.take(queue.name, most, visibility)
            left = until - loop.time()
            if received or left <= 0:
                break
            await self.waiters.wait(queue.name, min(left, self.until_visible(queue.name)), seen)
        system = set(given.get("MessageSystemAttributeNames") or []) | set(given.get("AttributeNames") or [])
        names = set(given.get("MessageAttributeNames") or [])
        messages = [_message_out(message, system, names) for message in received]
        return {"Messages": messages} if messages else {}

    async def take(self, name: str, most: int, visibility: int | None) -> list[Message]:
        """Receive when the queue may give something (nothing is committed for an empty receive)."""
        self.service.catch_up()
        visible, _, _ = self.queues.counts(name)
        if not visible:
            return []
        changes = await self.perform(lambda queues: queues.receive(name, most, visibility))
        return [c.message for c in changes if isinstance(c, MessageChanged) and c.what == "received"]

    def until_visible(self, name: str) -> float:
        """Wall seconds until the queue's next hidden message becomes visible (infinite for a manual clock, whose
        time moves only by command, which wakes the waiters)."""
        at = self.queues.next_visible(name)
        when = None if at is None else self.service.clock.wall_when(at)
        return float("inf") if when is None else max(when - self.service.wall(), 0.0) + 0.001

    async def delete_message(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call).name
        receipt = _receipt(call.input)
        await self.perform(lambda queues: queues.delete_message(name, receipt))
        return {}

    async def delete_message_batch(self, call: Call) -> dict[str, Any]:
        """Each entry answered on its own; the valid ones deleted in one commit."""
        name = self.queue_of(call).name
        entries = _entries(call.input.get("Entries"))
        receipts: dict[str, str] = {}
        failed: list[dict[str, Any]] = []
        for entry in entries:
            try:
                receipt = _receipt(entry)
                message_of(receipt)
                receipts[entry["Id"]] = receipt
            except (CoreError, SqsError) as error:
                refusal = sqs_error(error) if isinstance(error, CoreError) else error
                failed.append(
                    {"Id": entry["Id"], "SenderFault": True, "Code": refusal.code, "Message": refusal.message}
                )

        def delete_all(queues: Queues) -> list[Change]:
            return [change for receipt in receipts.values() for change in queues.delete_message(name, receipt)]

        if receipts:
            await self.perform(delete_all)
        return {"Successful": [{"Id": entry_id} for entry_id in receipts], "Failed": failed}

    async def send_message_batch(self, call: Call) -> dict[str, Any]:
        """Each entry sent on its own (one group commit together) and answered on its own."""
        queue = self.queue_of(call)
        entries = _entries(call.input.get("Entries"))
        answers = await asyncio.gather(
            *(
                self.send_message(Call({**entry, "QueueUrl": queue.name}, call.base_url, call.region))
                for entry in entries
            ),
            return_exceptions=True,
        )
        return _batch_answer(entries, answers)

    async def change_message_visibility_batch(self, call: Call) -> dict[str, Any]:
        queue = self.queue_of(call)
        entries = _entries(call.input.get("Entries"))
        answers = await asyncio.gather(
            *(
                self.change_message_visibility(Call({**entry, "QueueUrl": queue.name}, call.base_url, call.region))
                for entry in entries
            ),
            return_exceptions=True,
        )
        return _batch_answer(entries, answers)

    async def change_message_visibility(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call).name
        receipt = _receipt(call.input)
        timeout_text = call.input.get("VisibilityTimeout")
        if timeout_text is None:
            raise missing("VisibilityTimeout")
        timeout = _whole(str(timeout_text), "VisibilityTimeout", Invalid)
        await self.perform(lambda queues: queues.change_visibility(name, receipt, timeout))
        return {}


def _optional_text(given: dict[str, Any], name: str) -> str | None:
    value = given.get(name)
    return None if value is None else str(value)


def _boolean(text: str, name: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise AttributeRefused(f"Invalid value for the parameter {name}.")
    return text.lower() == "true"


def _queues_of(engine: Engine) -> Queues:
    return engine.component(Ec2Component).queues


def _mapping(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_parameter("Expected a map of attributes.")
    return value


def _whole(text: str, name: str, refusal: type[CoreError]) -> int:
    try:
        return int(text)
    except ValueError:
        raise refusal(f"Value {text} for parameter {name} is invalid. Reason: must be a whole number.") from None


def _redrive(text: str) -> Redrive:
    try:
        policy = json.loads(text)
        return Redrive(str(policy["deadLetterTargetArn"]), int(policy["maxReceiveCount"]))
    except (ValueError, KeyError, TypeError):
        raise AttributeRefused(
            "Value for parameter RedrivePolicy is invalid. Reason: Redrive policy is not a valid JSON map of "
            "deadLetterTargetArn and maxReceiveCount."
        ) from None


def _receipt(given: dict[str, Any]) -> str:
    receipt = given.get("ReceiptHandle")
    if not isinstance(receipt, str) or not receipt:
        raise missing("ReceiptHandle")
    return receipt


def _entries(value: Any) -> list[dict[str, Any]]:
    entries = value if isinstance(value, list) else []
    if not entries:
        raise SqsError(
            "EmptyBatchRequest",
            "There should be at least one entry in the request.",
            "AWS.SimpleQueueService.EmptyBatchRequest",
        )
    if len(entries) > MAX_BATCH:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are 10. You have sent {len(entries)}.",
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        )
    ids = [entry.get("Id") if isinstance(entry, dict) else None for entry in entries]
    if len(set(ids)) != len(ids):
        raise SqsError(
            "BatchEntryIdsNotDistinct",
            "Id is repeated.",
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        )
    return entries


def _batch_answer(entries: list[dict[str, Any]], answers: list[Any]) -> dict[str, Any]:
    successful: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for entry, answer in zip(entries, answers, strict=True):
        if isinstance(answer, CoreError | SqsError):
            refusal = sqs_error(answer) if isinstance(answer, CoreError) else answer
            failed.append({"Id": entry["Id"], "SenderFault": True, "Code": refusal.code, "Message": refusal.message})
        elif isinstance(answer, BaseException):
            raise answer
        else:
            successful.append({"Id": entry["Id"], **answer})
    return {"Successful": successful, "Failed": failed}


def _message_attributes(given: dict[str, Any]) -> tuple[MessageAttribute, ...]:
    attributes = []
    for name, value in sorted(given.items()):
        if not isinstance(value, dict) or not value.get("DataType"):
            raise invalid_parameter(f"The message attribute '{name}' must contain a non-empty attribute type.")
        binary = value.get("BinaryValue")
        attributes.append(
            MessageAttribute(
                name,
                value["DataType"],
                value.get("StringValue"),
                None if binary is None else base64.b64decode(binary),
            )
        )
    return tuple(attributes)


def _digestable(attributes: tuple[MessageAttribute, ...]) -> dict[str, tuple[str, str | None, bytes | None]]:
    return {a.name: (a.data_type, a.string_value, a.binary_value) for a in attributes}


def _message_out(message: Message, system: set[str], names: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "MessageId": message.message_id,
        "ReceiptHandle": message.receipt,
        "MD5OfBody": md5_of_body(message.body),
        "Body": message.body,
    }
    every = {
        "SenderId": DEFAULT_ACCOUNT,
        "SentTimestamp": str(int(message.sent_at.timestamp() * 1000)),
        "ApproximateReceiveCount": str(message.receive_count),
        "ApproximateFirstReceiveTimestamp": str(int((message.first_received_at or message.sent_at).timestamp() * 1000)),
    }
    if message.dead_letter_source is not None:
        every["DeadLetterQueueSourceArn"] = message.dead_letter_source
    if message.group_id is not None:
        every |= {"MessageGroupId": message.group_id, "SequenceNumber": message.sequence_number or ""}
        every["MessageDeduplicationId"] = message.deduplication_id or ""
    shown = every if "All" in system else {k: v for k, v in every.items() if k in system}
    if shown:
        out["Attributes"] = shown
    chosen = [a for a in message.attributes if "All" in names or ".*" in names or a.name in names]
    if chosen:
        out["MessageAttributes"] = {
            a.name: {"DataType": a.data_type}
            | ({"StringValue": a.string_value} if a.binary_value is None else {})
            | ({"BinaryValue": base64.b64encode(a.binary_value).decode()} if a.binary_value is not None else {})
            for a in chosen
        }
        out["MD5OfMessageAttributes"] = md5_of_attributes(_digestable(tuple(chosen)))
    return out


# --------------------------------------------------------------------------------------------------- the wires
async def json_call(api: SqsApi, target: str, body: bytes, base_url: str, region: str | None, request_id: str):
    """A JSON-protocol request (``X-Amz-Target: AmazonSQS.<Action>``), answered in that protocol."""
    try:
        action = target[len(TARGET_PREFIX) :]
        try:
            given = json.loads(body or b"{}")
        except ValueError:
            raise SqsError("SerializationException", "The request body is not valid JSON.") from None
        if not isinstance(given, dict):
            raise SqsError("SerializationException", "The request body must be a JSON object.")
        return json_response(await api.run(action, Call(given, base_url, region)), request_id)
    except SqsError as error:
        return json_error(error, request_id)


async def query_call(api: SqsApi, params: dict[str, str], base_url: str, region: str | None, request_id: str):
    """A query-protocol request (``Action=...&Version=2012-11-05``), answered in XML."""
    action = params.get("Action") or ""
    try:
        given = query_input({k: v for k, v in params.items() if k not in ("Action", "Version")})
        if "QueueUrl" not in given and "QueueName" not in given and action not in ("ListQueues",):
            path = urlsplit(base_url).path
            if path.count("/") >= 2:  # the queue URL as the request's path ("POST /123456789012/queue")
                given["QueueUrl"] = base_url
        return query_response(action, await api.run(action, Call(given, _origin(base_url), region)), request_id)
    except SqsError as error:
        return query_error(error, request_id)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
