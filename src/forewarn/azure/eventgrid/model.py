"""System topics and event subscriptions of Azure Event Grid, as records, parsed from ARM bodies and rendered back.

Pure: no I/O, no clock (callers pass the time). A request body that Event Grid would refuse raises :class:`ArmError`
with a 400 in ARM's shape, so the same parser serves ``PUT`` on the ARM port and the ``--event-grid`` file. Member
names are matched case-insensitively, as ARM's deserializer does. Sources of each limit: Microsoft's Event Grid pages
"Delivery properties" (delivery attributes), "Event Grid message delivery and retry" (batching, retry policy,
dead-lettering), "Understand event filtering for Event Grid subscriptions" (filters), "Scheduled Events in Event Grid"
(system topics), and the 2025-02-15 REST spec examples (SystemTopics_Get, SystemTopicEventSubscriptions_Get and
_GetDeliveryAttributes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from forewarn.azure.arm.wire import (
    ArmError,
    Refusal,
    given,
    json_bool,
    json_object,
    json_string,
    json_strings,
    member,
)
from forewarn.core.ids import derived_guid

EVENTGRID = "Microsoft.EventGrid"
TOPIC_TYPE = "Microsoft.ResourceNotifications.MaintenanceResources"
EVENT_TYPE = "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted"
SYSTEM_TOPIC_TYPE = "Microsoft.EventGrid/systemTopics"
EVENT_SUBSCRIPTION_TYPE = "Microsoft.EventGrid/systemTopics/eventSubscriptions"
TOPIC_LOCATION = "global"  # "Scheduled Events in Event Grid": the topic is created with location "global"

EVENT_GRID_SCHEMA = "EventGridSchema"
CLOUD_EVENT_SCHEMA = "CloudEventSchemaV1_0"
SCHEMAS = (EVENT_GRID_SCHEMA, CLOUD_EVENT_SCHEMA)

# Provisioning states we use (ARM's EventSubscriptionProvisioningState).
SUCCEEDED = "Succeeded"
AWAITING_MANUAL_ACTION = "AwaitingManualAction"
FAILED = "Failed"

# Limits ("Event Grid message delivery and retry"; "Understand event filtering for Event Grid subscriptions";
# "Delivery properties").
MAX_EVENTS_PER_BATCH = 5000
MAX_PREFERRED_BATCH_KB = 1024
DEFAULT_MAX_EVENTS_PER_BATCH = 1  # one event per request unless batching is asked for
DEFAULT_PREFERRED_BATCH_KB = 64
MAX_DELIVERY_ATTRIBUTES = 10
MAX_ATTRIBUTE_VALUE = 4096  # "each value <= 4 KB"
RESERVED_HEADER_PREFIX = "aeg-"
MAX_ATTEMPTS = 30
DEFAULT_ATTEMPTS = 30
MAX_TTL_MINUTES = 1440
DEFAULT_TTL_MINUTES = 1440
MAX_ADVANCED_FILTERS = 25
MAX_FILTER_VALUES = 25  # in total, across all advanced filters of a subscription
MAX_FILTER_STRING = 512

NUMBER_SINGLE = ("NumberLessThan", "NumberGreaterThan", "NumberLessThanOrEquals", "NumberGreaterThanOrEquals")
NUMBER_LISTS = ("NumberIn", "NumberNotIn")
NUMBER_RANGES = ("NumberInRange", "NumberNotInRange")
STRING_LISTS = (
    "StringContains",
    "StringNotContains",
    "StringBeginsWith",
    "StringNotBeginsWith",
    "StringEndsWith",
    "StringNotEndsWith",
    "StringIn",
    "StringNotIn",
)
NULL_CHECKS = ("IsNullOrUndefined", "IsNotNull")
OPERATORS = NUMBER_SINGLE + NUMBER_LISTS + NUMBER_RANGES + ("BoolEquals",) + STRING_LISTS + NULL_CHECKS
_CANONICAL_OPERATORS = {name.lower(): name for name in OPERATORS}

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9-]{3,128}$")  # the REST spec's pattern and lengths for systemTopicName
_SUBSCRIPTION_NAME = re.compile(r"^[A-Za-z0-9-]{3,64}$")  # eventSubscriptionName
_CONTAINER = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")  # Azure Storage container names
_STORAGE_ACCOUNT_ID = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Storage/storageAccounts/[a-z0-9]{3,24}$",
    re.IGNORECASE,
)


# ------------------------------------------------------------------------------------------------------ errors
def invalid_subscription(message: str, target: str | None = None) -> ArmError:
    # Event Grid's wording for a refused subscription body: "(InvalidRequest) Invalid event subscription request: ..."
    # (azure-cli#11627).
    return ArmError(400, "InvalidRequest", f"Invalid event subscription request: {message}", target)


def invalid_topic(message: str, target: str | None = None) -> ArmError:
    return ArmError(400, "InvalidRequest", f"Invalid system topic request: {message}", target)


def _in_words_of(error: Callable[[str, str | None], ArmError]) -> Refusal:
    """Event Grid's words for a member of the wrong type: "'{path}' must be {what was expected}."."""

    def refuse(expected: str, value: Any, path: str) -> ArmError:
        return error(f"'{path}' must be {expected}.", path)

    return refuse


SUBSCRIPTION_REFUSAL = _in_words_of(invalid_subscription)
TOPIC_REFUSAL = _in_words_of(invalid_topic)


def _boolean(value: Any, path: str, default: bool) -> bool:
    found = json_bool(value, path, SUBSCRIPTION_REFUSAL)
    return default if found is None else found


def _integer(value: Any, path: str, low: int, high: int, default: int) -> int:
    if not given(value):
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise invalid_subscription(f"'{path}' must be an integer between {low} and {high}.", path)
    if not low <= int(value) <= high:
        raise invalid_subscription(f"'{path}' must be between {low} and {high}; {int(value)} is not.", path)
    return int(value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def arm_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def metric_resource_id(topic_key: str) -> str:
    """A system topic's metricResourceId: a GUID derived from its key, stable across restarts."""
    return derived_guid("metricResourceId", topic_key).lower()


# -------------------------------------------------------------------------------------------------------- topics
@dataclass(frozen=True)
class SystemTopic:
    """A ``Microsoft.ResourceNotifications.MaintenanceResources`` system topic: one per Azure subscription, its
    source is the subscription itself ("Scheduled Events in Event Grid")."""

    subscription_id: str  # the Azure subscription, spelled as the fleet spells it
    resource_group: str
    name: str
    metric_resource_id: str
    tags: dict[str, str] | None = None
    origin: str = "arm"  # "arm", or "file" for topics declared in the --event-grid file

    @property
    def id(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}/providers/{EVENTGRID}"
            f"/systemTopics/{self.name}"
        )

    @property
    def key(self) -> str:
        return self.id.lower()

    @property
    def source(self) -> str:
        return f"/subscriptions/{self.subscription_id}"

    def to_arm(self) -> dict:
        # Member order of the REST spec example SystemTopics_Get.
        return {
            "properties": {
                "provisioningState": SUCCEEDED,
                "source": self.source,
                "topicType": TOPIC_TYPE,
                "metricResourceId": self.metric_resource_id,
            },
            "location": TOPIC_LOCATION,
            "tags": self.tags,
            "id": self.id,
            "name": self.name,
            "type": SYSTEM_TOPIC_TYPE,
        }

    def to_record(self) -> dict:
        return {
            "subscription_id": self.subscription_id,
            "resource_group": self.resource_group,
            "name": self.name,
            "metric_resource_id": self.metric_resource_id,
            "tags": self.tags,
            "origin": self.origin,
        }

    @classmethod
    def from_record(cls, data: dict) -> SystemTopic:
        return cls(
            data["subscription_id"],
            data["resource_group"],
            data["name"],
            data["metric_resource_id"],
            data.get("tags"),
            data.get("origin", "arm"),
        )


def check_topic_name(name: str) -> None:
    if not _TOPIC_NAME.match(name):
        raise invalid_topic(
            f"System topic name '{name}' must be 3 to 128 characters long and contain only letters, digits and hyphens."
        )


def parse_topic_body(body: dict, subscription_id: str) -> dict[str, str] | None:
    """Check a system topic PUT body against the Azure subscription in its path; the tags it sets."""
    location = member(body, "location")
    if not given(location):
        raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
    if not isinstance(location, str) or location.strip().lower() != TOPIC_LOCATION:
        raise invalid_topic(
            f"Location '{location}' is not valid for topic type {TOPIC_TYPE}: its source is an Azure "
            f"subscription, and such topics are located '{TOPIC_LOCATION}'.",
            "location",
        )
    properties = json_object(member(body, "properties"), "properties", TOPIC_REFUSAL)
    if properties is None:
        raise invalid_topic("'properties' with 'source' and 'topicType' is required.", "properties")
    topic_type = json_string(member(properties, "topicType"), "properties.topicType", TOPIC_REFUSAL)
    if topic_type is None or topic_type.lower() != TOPIC_TYPE.lower():
        raise invalid_topic(
            f"Topic type '{topic_type}' is not emulated; forewarn publishes only {TOPIC_TYPE}.", "properties.topicType"
        )
    source = json_string(member(properties, "source"), "properties.source", TOPIC_REFUSAL)
    expected = f"/subscriptions/{subscription_id}"
    if source is None or source.rstrip("/").lower() != expected.lower():
        raise invalid_topic(
            f"The source of a {TOPIC_TYPE} topic is the Azure subscription it is created in, "
            f"'{expected}'; got '{source}'.",
            "properties.source",
        )
    tags = member(body, "tags")
    if not given(tags):
        return None
    if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise invalid_topic("'tags' must be an object of string values.", "tags")
    return dict(tags)


# --------------------------------------------------------------------------------------------- subscriptions
@dataclass(frozen=True)
class DeliveryAttribute:
    """A custom header sent with each delivery (Event Grid's "Delivery properties"): a static value, or a dynamic
    one read from the event."""

    name: str
    kind: str  # "Static" or "Dynamic"
    value: str | None = None
    is_secret: bool = False
    source_field: str | None = None

    def to_arm(self, reveal: bool) -> dict:
        if self.kind == "Dynamic":
            return {"name": self.name, "type": "Dynamic", "properties": {"sourceField": self.source_field}}
        properties: dict[str, Any] = {"isSecret": self.is_secret}
        if reveal or not self.is_secret:
            properties = {"value": self.value, "isSecret": self.is_secret}
        return {"name": self.name, "type": "Static", "properties": properties}


@dataclass(frozen=True)
class WebHookDestination:
    endpoint_url: str
    max_events_per_batch: int = DEFAULT_MAX_EVENTS_PER_BATCH
    preferred_batch_kb: int = DEFAULT_PREFERRED_BATCH_KB
    attributes: tuple[DeliveryAttribute, ...] = ()

    @property
    def base_url(self) -> str:
        """The URL without its query, which may hold a key (ARM shows only this: endpointBaseUrl)."""
        parts = urlsplit(self.endpoint_url)
        return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))

    def to_arm(self, reveal: bool = False) -> dict:
        return {
            "endpointType": "WebHook",
            "properties": {
                "endpointBaseUrl": self.base_url,
                "maxEventsPerBatch": self.max_events_per_batch,
                "preferredBatchSizeInKilobytes": self.preferred_batch_kb,
                "deliveryAttributeMappings": [a.to_arm(reveal) for a in self.attributes],
            },
        }


@dataclass(frozen=True)
class AdvancedFilter:
    operator: str  # canonical spelling, one of OPERATORS
    key: str
    values: tuple = ()  # one item for the single-value operators, (lo, hi) pairs for the range operators

    def to_arm(self) -> dict:
        body: dict[str, Any] = {"operatorType": self.operator, "key": self.key}
        if self.operator in NUMBER_SINGLE or self.operator == "BoolEquals":
            body["value"] = self.values[0]
        elif self.operator in NUMBER_RANGES:
            body["values"] = [list(pair) for pair in self.values]
        elif self.operator not in NULL_CHECKS:
            body["values"] = list(self.values)
        return body


@dataclass(frozen=True)
class SubscriptionFilter:
    included_event_types: tuple[str, ...] | None = None  # None (or empty): every event type
    subject_begins_with: str = ""
    subject_ends_with: str = ""
    subject_case_sensitive: bool = False
    arrays: bool = False  # enableAdvancedFilteringOnArrays
    advanced: tuple[AdvancedFilter, ...] = ()

    def to_arm(self) -> dict:
        body: dict[str, Any] = {
            "subjectBeginsWith": self.subject_begins_with,
            "subjectEndsWith": self.subject_ends_with,
            "isSubjectCaseSensitive": self.subject_case_sensitive,
        }
        if self.included_event_types is not None:
            body["includedEventTypes"] = list(self.included_event_types)
        body["enableAdvancedFilteringOnArrays"] = self.arrays
        if self.advanced:
            body["advancedFilters"] = [f.to_arm() for f in self.advanced]
        return body


@dataclass(frozen=True)
class RetryPolicy:
    max_delivery_attempts: int = DEFAULT_ATTEMPTS
    ttl_minutes: int = DEFAULT_TTL_MINUTES


@dataclass(frozen=True)
class DeadLetterDestination:
    """Dead letters go to a blob container of a storage account; forewarn writes them as files laid out like the
    blobs (delivery.py)."""

    resource_id: str
    container: str


@dataclass(frozen=True)
class PendingValidation:
    """A validationUrl handshake in progress: the subscriber answered 2xx without the code and must GET the URL."""

    code: str
    url: str
    deadline: datetime
    response: str  # what the subscriber answered, quoted in the failure message


@dataclass(frozen=True)
class EventSubscription:
    topic_id: str
    name: str
    destination: WebHookDestination
    filter: SubscriptionFilter = field(default_factory=SubscriptionFilter)
    schema: str = EVENT_GRID_SCHEMA
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    dead_letter: DeadLetterDestination | None = None
    labels: tuple[str, ...] = ()
    expiration: datetime | None = None
    state: str = SUCCEEDED
    validation: PendingValidation | None = None
    failure: str | None = None  # why a validation failed (state Failed)
    origin: str = "arm"
    skip_validation: bool = False  # declared in the --event-grid file with skip_validation: true

    @property
    def id(self) -> str:
        return f"{self.topic_id}/eventSubscriptions/{self.name}"

    @property
    def key(self) -> str:
        return self.id.lower()

    @property
    def topic_key(self) -> str:
        return self.topic_id.lower()

    def definition(self) -> EventSubscription:
        """What a PUT defines, without the state the service keeps: two equal definitions need no new handshake."""
        return replace(self, state=SUCCEEDED, validation=None, failure=None)

    def revalidates(self, existing: EventSubscription | None) -> bool:
        """Whether storing this definition over ``existing`` takes a handshake: a new subscription, a new endpoint or
        delivery schema (the handshake proves the endpoint takes these events), or one not validated yet."""
        return (
            existing is None
            or existing.state != SUCCEEDED
            or existing.destination.endpoint_url != self.destination.endpoint_url
            or existing.schema != self.schema
        )

    def active(self, now: datetime) -> bool:
        return self.state == SUCCEEDED and (self.expiration is None or now < self.expiration)

    def shown_state(self, now: datetime) -> str:
        if self.state == AWAITING_MANUAL_ACTION and self.validation is not None and now > self.validation.deadline:
            return FAILED
        return self.state

    def to_arm(self, now: datetime, full: bool = False) -> dict:
        """The ARM resource. ``full`` adds what GET hides (the endpoint URL with its query, secret header values), for
        merging a PATCH."""
        destination = self.destination.to_arm(reveal=full)
        if full:
            destination["properties"]["endpointUrl"] = self.destination.endpoint_url
        properties: dict[str, Any] = {
            "topic": self.topic_id,
            "provisioningState": self.shown_state(now),
            "destination": destination,
            "filter": self.filter.to_arm(),
            "labels": list(self.labels),
            "eventDeliverySchema": self.schema,
            "retryPolicy": {
                "maxDeliveryAttempts": self.retry.max_delivery_attempts,
                "eventTimeToLiveInMinutes": self.retry.ttl_minutes,
            },
        }
        if self.expiration is not None:
            properties["expirationTimeUtc"] = arm_time(self.expiration)
        if self.dead_letter is not None:
            properties["deadLetterDestination"] = {
                "endpointType": "StorageBlob",
                "properties": {
                    "resourceId": self.dead_letter.resource_id,
                    "blobContainerName": self.dead_letter.container,
                },
            }
        return {"properties": properties, "id": self.id, "name": self.name, "type": EVENT_SUBSCRIPTION_TYPE}

    # ---------------------------------------------------------------------------------------- store records
    def to_record(self) -> dict:
        destination = self.destination
        return {
            "topic_id": self.topic_id,
            "name": self.name,
            "destination": {
                "endpoint_url": destination.endpoint_url,
                "max_events_per_batch": destination.max_events_per_batch,
                "preferred_batch_kb": destination.preferred_batch_kb,
                "attributes": [[a.name, a.kind, a.value, a.is_secret, a.source_field] for a in destination.attributes],
            },
            "filter": {
                "included_event_types": (
                    None if self.filter.included_event_types is None else list(self.filter.included_event_types)
                ),
                "subject_begins_with": self.filter.subject_begins_with,
                "subject_ends_with": self.filter.subject_ends_with,
                "subject_case_sensitive": self.filter.subject_case_sensitive,
                "arrays": self.filter.arrays,
                "advanced": [f.to_arm() for f in self.filter.advanced],
            },
            "schema": self.schema,
            "retry": [self.retry.max_delivery_attempts, self.retry.ttl_minutes],
            "dead_letter": None
            if self.dead_letter is None
            else [self.dead_letter.resource_id, self.dead_letter.container],
            "labels": list(self.labels),
            "expiration": None if self.expiration is None else self.expiration.isoformat(),
            "state": self.state,
            "validation": None
            if self.validation is None
            else {
                "code": self.validation.code,
                "url": self.validation.url,
                "deadline": self.validation.deadline.isoformat(),
                "response": self.validation.response,
            },
            "failure": self.failure,
            "origin": self.origin,
            "skip_validation": self.skip_validation,
        }

    @classmethod
    def from_record(cls, data: dict) -> EventSubscription:
        destination = data["destination"]
        filters = data["filter"]
        validation = data.get("validation")
        return cls(
            topic_id=data["topic_id"],
            name=data["name"],
            destination=WebHookDestination(
                destination["endpoint_url"],
                destination["max_events_per_batch"],
                destination["preferred_batch_kb"],
                tuple(DeliveryAttribute(*item) for item in destination["attributes"]),
            ),
            filter=SubscriptionFilter(
                None if filters["included_event_types"] is None else tuple(filters["included_event_types"]),
                filters["subject_begins_with"],
                filters["subject_ends_with"],
                filters["subject_case_sensitive"],
                filters["arrays"],
                tuple(
                    _advanced_filter(item, f"advancedFilters[{index}]")
                    for index, item in enumerate(filters["advanced"])
                ),
            ),
            schema=data["schema"],
            retry=RetryPolicy(*data["retry"]),
            dead_letter=None if data["dead_letter"] is None else DeadLetterDestination(*data["dead_letter"]),
            labels=tuple(data["labels"]),
            expiration=None if data["expiration"] is None else datetime.fromisoformat(data["expiration"]),
            state=data["state"],
            validation=None
            if validation is None
            else PendingValidation(
                validation["code"],
                validation["url"],
                datetime.fromisoformat(validation["deadline"]),
                validation["response"],
            ),
            failure=data.get("failure"),
            origin=data.get("origin", "arm"),
            skip_validation=data.get("skip_validation", False),
        )


def check_subscription_name(name: str) -> None:
    if not _SUBSCRIPTION_NAME.match(name):
        raise invalid_subscription(
            f"Event subscription name '{name}' must be 3 to 64 characters long and contain "
            "only letters, digits and hyphens."
        )


def parse_subscription_body(body: dict, topic_id: str, name: str, now: datetime | None) -> EventSubscription:
    """An event subscription from a PUT body (``{"properties": {...}}``); raises ArmError for what Event Grid refuses.
    ``now`` (the engine's time) is for ``expirationTimeUtc``, which must lie ahead (None: not checked)."""
    check_subscription_name(name)
    properties = json_object(member(body, "properties"), "properties", SUBSCRIPTION_REFUSAL)
    if properties is None:
        raise invalid_subscription("'properties' with a 'destination' is required.", "properties")
    for unsupported in ("deliveryWithResourceIdentity", "deadLetterWithResourceIdentity"):
        if given(member(properties, unsupported)):
            raise invalid_subscription(
                f"'{unsupported}' (managed identity delivery) is not emulated; forewarn "
                "delivers to WebHook endpoints directly.",
                f"properties.{unsupported}",
            )
    schema = json_string(
        member(properties, "eventDeliverySchema"), "properties.eventDeliverySchema", SUBSCRIPTION_REFUSAL
    )
    canonical_schema = EVENT_GRID_SCHEMA
    if schema is not None:
        matches = [s for s in SCHEMAS if s.lower() == schema.lower()]
        if not matches:
            raise invalid_subscription(
                f"Event delivery schema '{schema}' is not supported for topic type "
                f"{TOPIC_TYPE}; use {' or '.join(SCHEMAS)}.",
                "properties.eventDeliverySchema",
            )
        canonical_schema = matches[0]
    labels = json_strings(member(properties, "labels"), "properties.labels", SUBSCRIPTION_REFUSAL) or []
    expiration_text = json_string(
        member(properties, "expirationTimeUtc"), "properties.expirationTimeUtc", SUBSCRIPTION_REFUSAL
    )
    expiration = None
    if expiration_text is not None:
        try:
            expiration = datetime.fromisoformat(expiration_text)
        except ValueError:
            raise invalid_subscription(
                f"'{expiration_text}' is not a valid expirationTimeUtc.", "properties.expirationTimeUtc"
            ) from None
        if expiration.tzinfo is None:
            expiration = expiration.replace(tzinfo=UTC)
        if now is not None and expiration <= now:
            raise invalid_subscription(
                f"Expiration time {expiration_text} must be in the future (now is {arm_time(now)}).",
                "properties.expirationTimeUtc",
            )
    return EventSubscription(
        topic_id=topic_id,
        name=name,
        destination=_destination(member(properties, "destination")),
        filter=_filter(member(properties, "filter")),
        schema=canonical_schema,
        retry=_retry_policy(member(properties, "retryPolicy")),
        dead_letter=_dead_letter(member(properties, "deadLetterDestination")),
        labels=tuple(labels),
        expiration=expiration,
    )


def _destination(raw: Any) -> WebHookDestination:
    destination = json_object(raw, "properties.destination", SUBSCRIPTION_REFUSAL)
    if destination is None:
        raise invalid_subscription("'destination' is required.", "properties.destination")
    endpoint_type = json_string(
        member(destination, "endpointType"), "properties.destination.endpointType", SUBSCRIPTION_REFUSAL
    )
    if endpoint_type is None or endpoint_type.lower() != "webhook":
        raise invalid_subscription(
            f"Endpoint type '{endpoint_type}' is not emulated; forewarn delivers to WebHook endpoints.",
            "properties.destination.endpointType",
        )
    base = "properties.destination.properties"
    properties = json_object(member(destination, "properties"), base, SUBSCRIPTION_REFUSAL) or {}
    url = json_string(member(properties, "endpointUrl"), f"{base}.endpointUrl", SUBSCRIPTION_REFUSAL)
    parts = urlsplit(url or "")
    if url is None or parts.scheme not in ("http", "https") or not parts.hostname:
        # Azure requires HTTPS; a local emulator accepts plain HTTP too, for subscribers on this machine.
        raise invalid_subscription(
            "Supplied URL is invalid. It cannot be null or empty and should be a proper HTTP "
            "or HTTPS URL like https://www.example.com.",
            f"{base}.endpointUrl",
        )
    for unsupported in ("azureActiveDirectoryTenantId", "azureActiveDirectoryApplicationIdOrUri"):
        if given(member(properties, unsupported)):
            raise invalid_subscription(
                f"'{unsupported}' (Microsoft Entra protected webhooks) is not emulated.", f"{base}.{unsupported}"
            )
    return WebHookDestination(
        endpoint_url=url,
        max_events_per_batch=_integer(
            member(properties, "maxEventsPerBatch"),
            f"{base}.maxEventsPerBatch",
            1,
            MAX_EVENTS_PER_BATCH,
            DEFAULT_MAX_EVENTS_PER_BATCH,
        ),
        preferred_batch_kb=_integer(
            member(properties, "preferredBatchSizeInKilobytes"),
            f"{base}.preferredBatchSizeInKilobytes",
            1,
            MAX_PREFERRED_BATCH_KB,
            DEFAULT_PREFERRED_BATCH_KB,
        ),
        attributes=_attributes(member(properties, "deliveryAttributeMappings"), f"{base}.deliveryAttributeMappings"),
    )


def _attributes(raw: Any, path: str) -> tuple[DeliveryAttribute, ...]:
    if not given(raw):
        return ()
    if not isinstance(raw, list):
        raise invalid_subscription(f"'{path}' must be a list.", path)
    if len(raw) > MAX_DELIVERY_ATTRIBUTES:
        raise invalid_subscription(
            f"At most {MAX_DELIVERY_ATTRIBUTES} delivery attribute mappings are allowed; got {len(raw)}.", path
        )
    found: list[DeliveryAttribute] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        where = f"{path}[{index}]"
        mapping = json_object(item, where, SUBSCRIPTION_REFUSAL)
        if mapping is None:
            raise invalid_subscription(f"'{where}' must be an object.", where)
        name = json_string(member(mapping, "name"), f"{where}.name", SUBSCRIPTION_REFUSAL)
        if not name or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            raise invalid_subscription(
                f"Delivery attribute name '{name}' is not a valid HTTP header name.", f"{where}.name"
            )
        if name.lower().startswith(RESERVED_HEADER_PREFIX):
            raise invalid_subscription(
                f"Delivery attribute name '{name}' uses the reserved prefix '{RESERVED_HEADER_PREFIX}'.",
                f"{where}.name",
            )
        if name.lower() in seen:
            raise invalid_subscription(f"Delivery attribute name '{name}' is given twice.", f"{where}.name")
        seen.add(name.lower())
        kind = json_string(member(mapping, "type"), f"{where}.type", SUBSCRIPTION_REFUSAL)
        properties = json_object(member(mapping, "properties"), f"{where}.properties", SUBSCRIPTION_REFUSAL) or {}
        if kind is not None and kind.lower() == "static":
            value = json_string(member(properties, "value"), f"{where}.properties.value", SUBSCRIPTION_REFUSAL)
            if value is None:
                raise invalid_subscription(
                    f"Static delivery attribute '{name}' needs properties.value.", f"{where}.properties.value"
                )
            if len(value.encode()) > MAX_ATTRIBUTE_VALUE:
                raise invalid_subscription(
                    f"The value of delivery attribute '{name}' is longer than 4 KB.", f"{where}.properties.value"
                )
            if any(ch in value for ch in "\r\n\0"):
                raise invalid_subscription(
                    f"The value of delivery attribute '{name}' contains a line break.", f"{where}.properties.value"
                )
            secret = _boolean(member(properties, "isSecret"), f"{where}.properties.isSecret", False)
            found.append(DeliveryAttribute(name, "Static", value, secret))
        elif kind is not None and kind.lower() == "dynamic":
            source = json_string(
                member(properties, "sourceField"), f"{where}.properties.sourceField", SUBSCRIPTION_REFUSAL
            )
            if not source or any(not part for part in source.split(".")):
                raise invalid_subscription(
                    f"Dynamic delivery attribute '{name}' needs properties.sourceField, a "
                    "dotted path into the event such as data.resourceInfo.name.",
                    f"{where}.properties.sourceField",
                )
            found.append(DeliveryAttribute(name, "Dynamic", source_field=source))
        else:
            raise invalid_subscription(
                f"Delivery attribute type '{kind}' is not valid; use Static or Dynamic.", f"{where}.type"
            )
    return tuple(found)


def _filter(raw: Any) -> SubscriptionFilter:
    path = "properties.filter"
    body = json_object(raw, path, SUBSCRIPTION_REFUSAL)
    if body is None:
        return SubscriptionFilter()
    types = json_strings(member(body, "includedEventTypes"), f"{path}.includedEventTypes", SUBSCRIPTION_REFUSAL)
    begins = json_string(member(body, "subjectBeginsWith"), f"{path}.subjectBeginsWith", SUBSCRIPTION_REFUSAL) or ""
    ends = json_string(member(body, "subjectEndsWith"), f"{path}.subjectEndsWith", SUBSCRIPTION_REFUSAL) or ""
    filters_raw = member(body, "advancedFilters")
    advanced: list[AdvancedFilter] = []
    if given(filters_raw):
        if not isinstance(filters_raw, list):
            raise invalid_subscription(f"'{path}.advancedFilters' must be a list.", f"{path}.advancedFilters")
        if len(filters_raw) > MAX_ADVANCED_FILTERS:
            raise invalid_subscription(
                f"At most {MAX_ADVANCED_FILTERS} advanced filters are allowed; got {len(filters_raw)}.",
                f"{path}.advancedFilters",
            )
        advanced = [
            _advanced_filter(item, f"{path}.advancedFilters[{index}]") for index, item in enumerate(filters_raw)
        ]
        total = sum(max(len(f.values), 1) for f in advanced)
        if total > MAX_FILTER_VALUES:
            raise invalid_subscription(
                f"Advanced filters may hold at most {MAX_FILTER_VALUES} values in total; these hold {total}.",
                f"{path}.advancedFilters",
            )
    return SubscriptionFilter(
        included_event_types=tuple(types) if types else None,  # [] means all, as an absent list does
        subject_begins_with=begins,
        subject_ends_with=ends,
        subject_case_sensitive=_boolean(
            member(body, "isSubjectCaseSensitive"), f"{path}.isSubjectCaseSensitive", False
        ),
        arrays=_boolean(
            member(body, "enableAdvancedFilteringOnArrays"), f"{path}.enableAdvancedFilteringOnArrays", False
        ),
        advanced=tuple(advanced),
    )


def _advanced_filter(raw: Any, path: str) -> AdvancedFilter:
    body = json_object(raw, path, SUBSCRIPTION_REFUSAL)
    if body is None:
        raise invalid_subscription(f"'{path}' must be an object.", path)
    operator_raw = json_string(member(body, "operatorType"), f"{path}.operatorType", SUBSCRIPTION_REFUSAL)
    operator = _CANONICAL_OPERATORS.get((operator_raw or "").lower())
    if operator is None:
        raise invalid_subscription(
            f"Advanced filter operator '{operator_raw}' is not valid; valid operators: {', '.join(OPERATORS)}.",
            f"{path}.operatorType",
        )
    key = json_string(member(body, "key"), f"{path}.key", SUBSCRIPTION_REFUSAL)
    if not key or any(not part for part in key.split(".")):
        raise invalid_subscription(
            f"Advanced filter key '{key}' is not valid: give a dotted path such as "
            "data.resourceInfo.properties.EventStatus.",
            f"{path}.key",
        )
    value, values = member(body, "value"), member(body, "values")
    if operator in NULL_CHECKS:
        return AdvancedFilter(operator, key)
    if operator in NUMBER_SINGLE:
        if not _number(value):
            raise invalid_subscription(f"{operator} needs a numeric 'value'.", f"{path}.value")
        return AdvancedFilter(operator, key, (value,))
    if operator == "BoolEquals":
        if not isinstance(value, bool):
            raise invalid_subscription("BoolEquals needs a boolean 'value'.", f"{path}.value")
        return AdvancedFilter(operator, key, (value,))
    if not isinstance(values, list) or not values:
        raise invalid_subscription(f"{operator} needs a non-empty list 'values'.", f"{path}.values")
    if operator in NUMBER_LISTS:
        if not all(_number(item) for item in values):
            raise invalid_subscription(f"{operator} needs numeric values.", f"{path}.values")
        return AdvancedFilter(operator, key, tuple(values))
    if operator in NUMBER_RANGES:
        pairs = []
        for item in values:
            if not (isinstance(item, list) and len(item) == 2 and all(_number(x) for x in item) and item[0] <= item[1]):
                raise invalid_subscription(
                    f"{operator} needs values like [[low, high], ...] with low <= high.", f"{path}.values"
                )
            pairs.append((item[0], item[1]))
        return AdvancedFilter(operator, key, tuple(pairs))
    if not all(isinstance(item, str) for item in values):
        raise invalid_subscription(f"{operator} needs string values.", f"{path}.values")
    long = [item for item in values if len(item) > MAX_FILTER_STRING]
    if long:
        raise invalid_subscription(
            f"Advanced filter values are limited to {MAX_FILTER_STRING} characters; one has {len(long[0])}.",
            f"{path}.values",
        )
    return AdvancedFilter(operator, key, tuple(values))


def _retry_policy(raw: Any) -> RetryPolicy:
    path = "properties.retryPolicy"
    body = json_object(raw, path, SUBSCRIPTION_REFUSAL)
    if body is None:
        return RetryPolicy()
    return RetryPolicy(
        _integer(member(body, "maxDeliveryAttempts"), f"{path}.maxDeliveryAttempts", 1, MAX_ATTEMPTS, DEFAULT_ATTEMPTS),
        _integer(
            member(body, "eventTimeToLiveInMinutes"),
            f"{path}.eventTimeToLiveInMinutes",
            1,
            MAX_TTL_MINUTES,
            DEFAULT_TTL_MINUTES,
        ),
    )


def _dead_letter(raw: Any) -> DeadLetterDestination | None:
    path = "properties.deadLetterDestination"
    body = json_object(raw, path, SUBSCRIPTION_REFUSAL)
    if body is None:
        return None
    endpoint_type = json_string(member(body, "endpointType"), f"{path}.endpointType", SUBSCRIPTION_REFUSAL)
    if endpoint_type is None or endpoint_type.lower() != "storageblob":
        raise invalid_subscription(
            f"Dead letter endpoint type '{endpoint_type}' is not valid; use StorageBlob.", f"{path}.endpointType"
        )
    properties = json_object(member(body, "properties"), f"{path}.properties", SUBSCRIPTION_REFUSAL) or {}
    resource_id = json_string(member(properties, "resourceId"), f"{path}.properties.resourceId", SUBSCRIPTION_REFUSAL)
    if resource_id is None or not _STORAGE_ACCOUNT_ID.match(resource_id):
        raise invalid_subscription(
            "The dead letter destination's resourceId must be a storage account id, "
            "/subscriptions/{id}/resourceGroups/{group}/providers/Microsoft.Storage/"
            "storageAccounts/{name}.",
            f"{path}.properties.resourceId",
        )
    container = json_string(
        member(properties, "blobContainerName"), f"{path}.properties.blobContainerName", SUBSCRIPTION_REFUSAL
    )
    if container is None or not _CONTAINER.match(container):
        raise invalid_subscription(
            f"Blob container name '{container}' is not valid: 3 to 63 lower-case letters, "
            "digits and single hyphens, starting and ending with a letter or digit.",
            f"{path}.properties.blobContainerName",
        )
    return DeadLetterDestination(resource_id, container)
