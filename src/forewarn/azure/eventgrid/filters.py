"""Whether an event passes a subscription's filter (Microsoft's "Understand event filtering for Event Grid
subscriptions"). Pure.

The event is the one delivered, in the subscription's schema, so keys name its fields: ``eventType``, ``subject``,
``data.resourceInfo.properties.EventStatus`` for the Event Grid schema; ``type``, ``source``, ``data...`` for
CloudEvents. Keys are matched case-insensitively at every level (``eventtype`` finds ``eventType``).

- event types: any of ``includedEventTypes`` (case-insensitive); none given means all;
- subject: plain prefix and suffix, case-insensitive unless ``isSubjectCaseSensitive``;
- advanced filters are ANDed; the values of one filter are ORed, except for the Not operators, where every value
  must fail to match;
- string comparisons are case-insensitive; numbers never match booleans;
- a missing key fails every operator except NumberNotIn and StringNotIn (and IsNullOrUndefined, which asks for it);
- arrays are looked into only with ``enableAdvancedFilteringOnArrays``: a positive operator matches if any element
  does, a Not operator if no element matches the positive one; elements of the wrong type are ignored. Without it an
  array value fails every value operator.
"""

from __future__ import annotations

from typing import Any

from forewarn.azure.eventgrid.model import (
    CLOUD_EVENT_SCHEMA,
    NUMBER_LISTS,
    NUMBER_RANGES,
    NUMBER_SINGLE,
    AdvancedFilter,
    SubscriptionFilter,
)

MISSING = object()

_NEGATED = {
    "NumberNotIn": "NumberIn",
    "NumberNotInRange": "NumberInRange",
    "StringNotContains": "StringContains",
    "StringNotBeginsWith": "StringBeginsWith",
    "StringNotEndsWith": "StringEndsWith",
    "StringNotIn": "StringIn",
}
_TRUE_WHEN_MISSING = ("NumberNotIn", "StringNotIn")


def lookup(event: dict, key: str) -> Any:
    """The value at a dotted key, each step matched case-insensitively; MISSING if any step is absent."""
    value: Any = event
    for part in key.split("."):
        if not isinstance(value, dict):
            return MISSING
        if part in value:
            value = value[part]
            continue
        lowered = part.lower()
        for name, item in value.items():
            if name.lower() == lowered:
                value = item
                break
        else:
            return MISSING
    return value


def matches(subscription_filter: SubscriptionFilter, event: dict, schema: str) -> bool:
    event_type = event.get("type" if schema == CLOUD_EVENT_SCHEMA else "eventType", "")
    included = subscription_filter.included_event_types
    if included and event_type.lower() not in {name.lower() for name in included}:
        return False
    subject = event.get("subject") or ""
    begins, ends = subscription_filter.subject_begins_with, subscription_filter.subject_ends_with
    if not subscription_filter.subject_case_sensitive:
        subject, begins, ends = subject.lower(), begins.lower(), ends.lower()
    if not subject.startswith(begins) or not subject.endswith(ends):
        return False
    return all(passes(f, lookup(event, f.key), subscription_filter.arrays) for f in subscription_filter.advanced)


def passes(advanced: AdvancedFilter, value: Any, arrays: bool) -> bool:
    operator = advanced.operator
    if operator == "IsNullOrUndefined":
        return value is MISSING or value is None
    if operator == "IsNotNull":
        return value is not MISSING and value is not None
    if value is MISSING:
        return operator in _TRUE_WHEN_MISSING
    positive = _NEGATED.get(operator)
    if isinstance(value, list):
        if not arrays:
            return False
        elements = [item for item in value if _typed(positive or operator, item)]
        if positive is not None:
            return not any(_test(positive, advanced.values, item) for item in elements)
        return any(_test(operator, advanced.values, item) for item in elements)
    if not _typed(positive or operator, value):
        return False
    if positive is not None:
        return not _test(positive, advanced.values, value)
    return _test(operator, advanced.values, value)


def _typed(operator: str, value: Any) -> bool:
    """Whether a value has the type the operator compares (a boolean is not a number)."""
    if operator == "BoolEquals":
        return isinstance(value, bool)
    if operator in NUMBER_SINGLE or operator in NUMBER_LISTS or operator in NUMBER_RANGES:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


def _test(operator: str, values: tuple, value: Any) -> bool:
    """A positive operator on a value of its type."""
    if operator == "BoolEquals":
        return value == values[0]
    if operator == "NumberLessThan":
        return value < values[0]
    if operator == "NumberGreaterThan":
        return value > values[0]
    if operator == "NumberLessThanOrEquals":
        return value <= values[0]
    if operator == "NumberGreaterThanOrEquals":
        return value >= values[0]
    if operator == "NumberIn":
        return any(value == item for item in values)
    if operator == "NumberInRange":
        return any(low <= value <= high for low, high in values)
    text = value.lower()
    wanted = [item.lower() for item in values]
    if operator == "StringIn":
        return text in wanted
    if operator == "StringContains":
        return any(item in text for item in wanted)
    if operator == "StringBeginsWith":
        return any(text.startswith(item) for item in wanted)
    if operator == "StringEndsWith":
        return any(text.endswith(item) for item in wanted)
    raise AssertionError(f"not a positive operator: {operator}")
