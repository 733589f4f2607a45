"""Amazon SQS standard queues, the part queue-mode handlers use, on forewarn's clock: queues with their settings,
messages sent, received (hidden for their visibility timeout, then visible again), deleted by their latest receipt
handle, purged, and moved to a dead-letter queue once received more than the redrive policy's ``maxReceiveCount``.

Pure: the wire (both of SQS's protocols, attribute strings, the redrive policy's JSON text) is aws/sqs/. Behaviours
follow the Amazon SQS Developer Guide ("Amazon SQS visibility timeout", "Using dead-letter queues in Amazon SQS",
"Amazon SQS short and long polling") and the Amazon SQS API Reference (each action's page); docs/aws-queues.md lists
them with every choice made where the pages leave one open."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from forewarn.core.changes import Change
from forewarn.core.errors import Conflict, Invalid, NotFound
from forewarn.core.ids import derived_guid
from forewarn.core.scheduler import Sequence

# "Queue names ... can have up to 80 characters ... alphanumeric characters, hyphens (-), and underscores (_)"
# (CreateQueue); a FIFO queue's name ends in .fifo, the suffix counted in the 80.
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
FIFO_NAME = re.compile(r"^[A-Za-z0-9_-]{1,75}\.fifo$")
DEDUPLICATION_INTERVAL = timedelta(minutes=5)  # "Amazon SQS FIFO queue ... deduplication interval" (5 minutes)
# MessageGroupId and MessageDeduplicationId: up to 128 characters, alphanumeric and punctuation (SendMessage)
FIFO_TAG = re.compile(r"^[!-~]{1,128}$")
MAX_RECEIVE = 10  # "Valid values: 1 to 10" (ReceiveMessage, MaxNumberOfMessages)
PURGE_INTERVAL = timedelta(seconds=60)  # "you can purge a queue only once every 60 seconds" (PurgeQueue)
MAX_VISIBILITY = 43200  # 12 hours (the visibility timeout's range, 0 to 43200 seconds)


@dataclass(frozen=True)
class Redrive:
    """A queue's redrive policy: where messages go once received more than ``max_receive_count`` times."""

    dead_letter_target_arn: str
    max_receive_count: int


@dataclass(frozen=True)
class QueueSettings:
    """The queue attributes a client sets, with CreateQueue's documented defaults and ranges (in seconds, bytes)."""

    visibility_timeout: int = 30
    message_retention_period: int = 345600  # four days
    delay_seconds: int = 0
    receive_message_wait_time_seconds: int = 0
    maximum_message_size: int = 262144
    redrive: Redrive | None = None
    fifo: bool = False
    content_based_deduplication: bool = False

    def check(self) -> QueueSettings:
        for value, name, low, high in (
            (self.visibility_timeout, "VisibilityTimeout", 0, MAX_VISIBILITY),
            (self.message_retention_period, "MessageRetentionPeriod", 60, 1209600),
            (self.delay_seconds, "DelaySeconds", 0, 900),
            (self.receive_message_wait_time_seconds, "ReceiveMessageWaitTimeSeconds", 0, 20),
            (self.maximum_message_size, "MaximumMessageSize", 1024, 262144),
        ):
            if not low <= value <= high:
                raise AttributeRefused(f"Invalid value for the parameter {name}.")
        if self.content_based_deduplication and not self.fifo:
            raise AttributeRefused("Unknown Attribute ContentBasedDeduplication.")
        if self.redrive is not None and not 1 <= self.redrive.max_receive_count <= 1000:
            raise AttributeRefused(
                "Value for parameter RedrivePolicy is invalid. Reason: maxReceiveCount must be 1-1000"
            )
        return self


@dataclass(frozen=True)
class Sent:
    """A FIFO queue's record of a message sent: its deduplication ID is taken for five minutes from ``sent_at``."""

    deduplication_id: str
    message_id: str
    seq: int
    sent_at: datetime


@dataclass(frozen=True)
class Queue:
    name: str
    region: str
    account_id: str
    settings: QueueSettings
    created_at: datetime
    modified_at: datetime
    purged_at: datetime | None = None
    deleted: bool = False
    sent: tuple[Sent, ...] = ()  # a FIFO queue's deduplication IDs of the last five minutes, oldest first

    def sent_as(self, deduplication_id: str, now: datetime) -> Sent | None:
        """The message sent with this deduplication ID within the deduplication interval, if any."""
        return next(
            (
                s
                for s in self.sent
                if s.deduplication_id == deduplication_id and now < s.sent_at + DEDUPLICATION_INTERVAL
            ),
            None,
        )

    @property
    def arn(self) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account_id}:{self.name}"


@dataclass(frozen=True)
class MessageAttribute:
    """A message attribute: its data type (String, Number, Binary, or one of them with a custom suffix) and value."""

    name: str
    data_type: str
    string_value: str | None = None
    binary_value: bytes | None = None


@dataclass(frozen=True)
class Message:
    message_id: str
    seq: int
    queue: str
    body: str
    sent_at: datetime
    visible_at: datetime  # hidden until then: delayed when sent, or in flight after a receive
    attributes: tuple[MessageAttribute, ...] = ()
    receive_count: int = 0
    first_received_at: datetime | None = None
    receipt: str | None = None  # the latest receipt handle (None: never received)
    dead_letter_source: str | None = None  # the ARN of the queue it was moved from
    deleted: bool = False
    group_id: str | None = None  # a FIFO queue's MessageGroupId
    deduplication_id: str | None = None  # a FIFO queue's MessageDeduplicationId (given, or the body's SHA-256)

    @property
    def sequence_number(self) -> str | None:
        """A FIFO message's SequenceNumber: grows with every message sent (forewarn's sequence, 20 digits)."""
        return None if self.group_id is None else f"{self.seq:020d}"

    def in_flight(self, now: datetime) -> bool:
        return self.receipt is not None and self.visible_at > now


@dataclass(frozen=True)
class QueueChanged(Change):
    """``what``: created, modified, purged, deleted (then ``queue.deleted``)."""

    queue: Queue
    what: str

    def describe(self) -> str:
        return f"queue {self.queue.name} {self.what}"


@dataclass(frozen=True)
class MessageChanged(Change):
    """``what``: sent, received, visibility, deleted, purged, expired, moved (to a dead-letter queue: the message is
    then deleted from ``queue``, and a ``sent`` one with the same ID is in the dead-letter queue)."""

    message: Message
    what: str


class QueueMissing(NotFound):
    """AWS.SimpleQueueService.NonExistentQueue on the wire."""


class QueueNameTaken(Conflict):
    """QueueAlreadyExists: a queue of that name with other attributes."""


class ReceiptInvalid(Invalid):
    """ReceiptHandleIsInvalid."""


class NotInFlight(Invalid):
    """AWS.SimpleQueueService.MessageNotInflight."""


class PurgeInProgress(Conflict):
    """AWS.SimpleQueueService.PurgeQueueInProgress."""


class AttributeRefused(Invalid):
    """InvalidAttributeValue."""


class Queues:
    """Every queue and its messages. Each command returns its changes; the times are ``now()``, forewarn's clock."""

    def __init__(
        self,
        seed: str,
        now: Callable[[], datetime],
        sequence: Sequence,
        queues: Iterable[Queue] = (),
        messages: Iterable[Message] = (),
    ):
        self.seed = seed
        self._now = now
        self._sequence = sequence
        self.queues: dict[str, Queue] = {queue.name: queue for queue in queues if not queue.deleted}
        self.messages: dict[str, dict[str, Message]] = {name: {} for name in self.queues}
        for message in sorted(messages, key=lambda m: m.seq):
            sequence.past(message.seq)
            if not message.deleted and message.queue in self.messages:
                self.messages[message.queue][message.message_id] = message

    # ------------------------------------------------------------------------------------------------ queries
    def queue(self, name: str) -> Queue:
        found = self.queues.get(name)
        if found is None:
            raise QueueMissing("The specified queue does not exist.", name=name, known=self.queues.keys())
        return found

    def by_arn(self, arn: str) -> Queue | None:
        name = arn.rpartition(":")[2]
        found = self.queues.get(name)
        return found if found is not None and found.arn == arn else None

    def counts(self, name: str) -> tuple[int, int, int]:
        """(visible, in flight, delayed) messages of the queue now (a receive drops those past the retention period;
        they are not counted: a queue whose only messages expired answers a receive at once, with nothing)."""
        now = self._now()
        queue = self.queue(name)
        kept_from = now - timedelta(seconds=queue.settings.message_retention_period)
        visible = in_flight = delayed = 0
        for message in self.messages[name].values():
            if message.sent_at <= kept_from:
                continue  # past the retention period: dropped at the next receive, and not counted
            if message.visible_at <= now:
                visible += 1
            elif message.receipt is not None:
                in_flight += 1
            else:
                delayed += 1
        return visible, in_flight, delayed

    def next_visible(self, name: str) -> datetime | None:
        """When the next hidden message of the queue becomes visible (None: none is hidden, or the queue is gone)."""
        now = self._now()
        hidden = [m.visible_at for m in self.messages.get(name, {}).values() if m.visible_at > now]
        return min(hidden, default=None)

    # ----------------------------------------------------------------------------------------------- commands
    def create(self, name: str, region: str, account_id: str, settings: QueueSettings) -> list[Change]:
        """A queue, or nothing when one of that name has the same attributes (CreateQueue is idempotent so)."""
        if not (FIFO_NAME if settings.fifo else QUEUE_NAME).match(name):
            raise Invalid(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end "
                "with .fifo suffix and be 1 to 80 in length"
                if settings.fifo or name.endswith(".fifo")
                else "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
            )
        settings.check()
        redrive = settings.redrive
        target = None if redrive is None else self.by_arn(redrive.dead_letter_target_arn)
        if target is not None and target.settings.fifo != settings.fifo:
            raise AttributeRefused(
                "Value for parameter RedrivePolicy is invalid. Reason: the dead-letter queue of a FIFO queue must "
                "also be a FIFO queue, and that of a standard queue a standard queue."
            )
        known = self.queues.get(name)
        if known is not None:
            if known.settings != settings:
                raise QueueNameTaken(f"A queue already exists with the same name and a different value for {name}")
            return []
        now = self._now()
        queue = Queue(name, region, account_id, settings, now, now)
        self.queues[name] = queue
        self.messages[name] = {}
        return [QueueChanged(queue, "created")]

    def configure(self, name: str, settings: QueueSettings) -> list[Change]:
        if settings.fifo != self.queue(name).settings.fifo:
            raise AttributeRefused("Invalid value for the parameter FifoQueue. Reason: it cannot be changed.")
        queue = replace(self.queue(name), settings=settings.check(), modified_at=self._now())
        self.queues[name] = queue
        return [QueueChanged(queue, "modified")]

    def delete(self, name: str) -> list[Change]:
        queue = replace(self.queue(name), deleted=True)
        del self.queues[name]
        gone = self.messages.pop(name)
        return [QueueChanged(queue, "deleted")] + [
            MessageChanged(replace(m, deleted=True), "deleted") for m in gone.values()
        ]

    def send(
        self,
        name: str,
        body: str,
        attributes: tuple[MessageAttribute, ...] = (),
        delay: int | None = None,
        group_id: str | None = None,
        deduplication_id: str | None = None,
    ) -> list[Change]:
        """A message sent; to a FIFO queue, in its group (``group_id``), and nothing when its deduplication ID (given,
        or the body's SHA-256 with content-based deduplication) was sent within the last five minutes: the send is
        accepted, and the message sent then stands for it (:meth:`Queue.sent_as`)."""
        queue = self.queue(name)
        fifo = queue.settings.fifo
        if fifo:
            deduplication_id = self.deduplication_id(queue, body, group_id, deduplication_id, delay)
            if queue.sent_as(deduplication_id, self._now()) is not None:
                return []
        elif deduplication_id is not None:
            raise Invalid("The request include parameter that is not valid for this queue type.")
        # (a standard queue's MessageGroupId makes it a fair queue, whose fairness is not simulated: ignored)
        if not body:
            raise Invalid("The request must contain the parameter MessageBody.")
        size = len(body.encode()) + sum(_attribute_size(a) for a in attributes)
        if size > queue.settings.maximum_message_size:
            raise Invalid(
                f"One or more parameters are invalid. Reason: Message must be shorter than "
                f"{queue.settings.maximum_message_size} bytes."
            )
        seconds = queue.settings.delay_seconds if delay is None else delay
        if not 0 <= seconds <= 900:
            raise Invalid(f"Value {seconds} for parameter DelaySeconds is invalid. Reason: must be between 0 and 900")
        now = self._now()
        seq = self._sequence.take()
        message = Message(
            message_id=derived_guid(self.seed, "sqs-message", seq).lower(),
            seq=seq,
            queue=name,
            body=body,
            sent_at=now,
            visible_at=now + timedelta(seconds=seconds),
            attributes=attributes,
            group_id=group_id if fifo else None,
            deduplication_id=deduplication_id if fifo else None,
        )
        self.messages[name][message.message_id] = message
        if not fifo or deduplication_id is None:
            return [MessageChanged(message, "sent")]
        kept = tuple(s for s in queue.sent if now < s.sent_at + DEDUPLICATION_INTERVAL)
        queue = replace(queue, sent=(*kept, Sent(deduplication_id, message.message_id, seq, now)))
        self.queues[name] = queue
        return [QueueChanged(queue, "deduplication"), MessageChanged(message, "sent")]

    def deduplication_id(
        self, queue: Queue, body: str, group_id: str | None, given: str | None, delay: int | None = None
    ) -> str:
        """A FIFO send's deduplication ID (the one given, or the body's SHA-256 when the queue deduplicates by
        content), once its group and its other parameters are checked as SendMessage checks them."""
        if group_id is None:
            raise Invalid("The request must contain the parameter MessageGroupId.")
        for value, parameter in ((group_id, "MessageGroupId"), (given, "MessageDeduplicationId")):
            if value is not None and not FIFO_TAG.match(value):
                raise Invalid(
                    f"Value {value} for parameter {parameter} is invalid. Reason: it is 1 to 128 alphanumeric or "
                    "punctuation characters."
                )
        if delay is not None:
            raise Invalid(
                f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request include parameter that is "
                "not valid for this queue type."
            )
        if given is not None:
            return given
        if not queue.settings.content_based_deduplication:
            raise Invalid(
                "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided "
                "explicitly"
            )
        return hashlib.sha256(body.encode()).hexdigest()

    def receive(self, name: str, most: int = 1, visibility: int | None = None) -> list[Change]:
        """Up to ``most`` visible messages, oldest first, each hidden for the visibility timeout with a new receipt
        handle. On the way, messages past the retention period are dropped and those received ``maxReceiveCount``
        times already go to the dead-letter queue (when it exists). In a FIFO queue a group's messages come in the
        order they were sent, and none of a group while a message of it ahead is hidden (in flight, or delayed):
        one receive may take several of a group, the next one none until they are deleted or visible again."""
        queue = self.queue(name)
        if not 1 <= most <= MAX_RECEIVE:
            raise Invalid(
                f"Value {most} for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if "
                "provided."
            )
        timeout = queue.settings.visibility_timeout if visibility is None else _visibility(visibility)
        now = self._now()
        retention = timedelta(seconds=queue.settings.message_retention_period)
        redrive = queue.settings.redrive
        dead_letter = None if redrive is None else self.by_arn(redrive.dead_letter_target_arn)
        changes: list[Change] = []
        taken = 0
        held: set[str] = set()  # FIFO groups with a message hidden ahead: nothing more of them, to keep their order
        for message in list(self.messages[name].values()):
            if taken == most:
                break
            if message.sent_at + retention <= now:
                changes.append(self._drop(message, "expired"))
            elif message.visible_at > now or message.group_id in held:
                if message.group_id is not None:
                    held.add(message.group_id)
                continue
            elif redrive is not None and dead_letter is not None and message.receive_count >= redrive.max_receive_count:
                changes += self._move(message, queue, dead_letter)
            else:
                changes.append(self._hand_out(message, now, timeout))
                taken += 1
        return changes

    def delete_message(self, name: str, receipt: str) -> list[Change]:
        """Deleted by its latest receipt handle; an older one of a message received again is accepted and deletes
        nothing, and one of a message already deleted is accepted too (DeleteMessage)."""
        self.queue(name)
        message = self.messages[name].get(message_of(receipt))
        if message is None or message.receipt != receipt:
            return []
        return [self._drop(message, "deleted")]

    def change_visibility(self, name: str, receipt: str, timeout: int) -> list[Change]:
        """The message hidden for ``timeout`` seconds from now (0: visible again at once); only a message in flight,
        named by its latest receipt handle (ChangeMessageVisibility)."""
        self.queue(name)
        seconds = _visibility(timeout)
        now = self._now()
        message = self.messages[name].get(message_of(receipt))
        if message is None or message.receipt != receipt or not message.in_flight(now):
            raise NotInFlight("Message does not exist or is not available for visibility timeout change.")
        message = replace(message, visible_at=now + timedelta(seconds=seconds))
        self.messages[name][message.message_id] = message
        return [MessageChanged(message, "visibility")]

    def purge(self, name: str) -> list[Change]:
        queue = self.queue(name)
        now = self._now()
        if queue.purged_at is not None and now < queue.purged_at + PURGE_INTERVAL:
            raise PurgeInProgress(
                f"Only one PurgeQueue operation on {name} is allowed every 60 seconds.",
            )
        queue = replace(queue, purged_at=now)
        self.queues[name] = queue
        changes: list[Change] = [QueueChanged(queue, "purged")]
        return changes + [self._drop(message, "purged") for message in list(self.messages[name].values())]

    # -------------------------------------------------------------------------------------------------- steps
    def _hand_out(self, message: Message, now: datetime, timeout: int) -> MessageChanged:
        count = message.receive_count + 1
        receipt = f"{message.message_id}.{count}.{derived_guid(self.seed, 'receipt', message.message_id, count)}"
        message = replace(
            message,
            receive_count=count,
            first_received_at=message.first_received_at or now,
            receipt=receipt,
            visible_at=now + timedelta(seconds=timeout),
        )
        self.messages[message.queue][message.message_id] = message
        return MessageChanged(message, "received")

    def _drop(self, message: Message, why: str) -> MessageChanged:
        del self.messages[message.queue][message.message_id]
        return MessageChanged(replace(message, deleted=True), why)

    def _move(self, message: Message, source: Queue, target: Queue) -> list[Change]:
        """To the dead-letter queue, keeping its ID, body, attributes, sent time and receive count."""
        moved = replace(
            message,
            seq=self._sequence.take(),
            queue=target.name,
            visible_at=self._now(),
            receipt=None,
            dead_letter_source=source.arn,
        )
        self.messages[target.name][moved.message_id] = moved
        return [self._drop(message, "moved"), MessageChanged(moved, "sent")]

    # -------------------------------------------------------------------------------------------- replication
    def replicate(self, queues: Mapping[str, Queue | None], messages: Mapping[str, Message | None]) -> None:
        """Rows a leader committed (messages keyed ``queue/message_id``; None: the row is gone)."""
        for name, queue in queues.items():
            if queue is None or queue.deleted:
                self.queues.pop(name, None)
                self.messages.pop(name, None)
            else:
                self.queues[name] = queue
                self.messages.setdefault(name, {})
        for key, message in messages.items():
            name, _, message_id = key.partition("/")
            held = self.messages.get(name)
            if held is None:
                continue
            if message is None or message.deleted:
                held.pop(message_id, None)
            else:
                held[message_id] = message
                self._sequence.past(message.seq)


def _visibility(seconds: int) -> int:
    if not 0 <= seconds <= MAX_VISIBILITY:
        raise Invalid(
            f"Value {seconds} for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200."
        )
    return seconds


def message_of(receipt: str) -> str:
    """The message a receipt handle names (handles are ``<message ID>.<receive count>.<token>``)."""
    parts = receipt.split(".")
    if len(parts) != 3 or not parts[1].isdigit() or len(parts[0]) != 36:
        raise ReceiptInvalid(f'The input receipt handle "{receipt}" is not a valid receipt handle.')
    return parts[0]


def _attribute_size(attribute: MessageAttribute) -> int:
    value = attribute.binary_value if attribute.binary_value is not None else (attribute.string_value or "").encode()
    return len(attribute.name.encode()) + len(attribute.data_type.encode()) + len(value)
