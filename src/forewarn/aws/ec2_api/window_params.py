"""The parameters of the event-window actions: a window's schedule (``TimeRange.N.*`` or ``CronExpression``), its
tags (``TagSpecification.N``) and association targets (``AssociationTarget.*``), read and checked ("Define event
windows for scheduled events"; the EC2 API Reference of CreateInstanceEventWindow, AssociateInstanceEventWindow)."""

from __future__ import annotations

import re

from forewarn.aws.ec2_api.params import N, Params, check_instance_ids
from forewarn.aws.ec2_api.protocol import Ec2Error, bad_value, missing
from forewarn.aws.windows import WEEKDAYS, TimeRange

WINDOW_RESOURCE_TYPE = "instance-event-window"
MAX_TAGS = 50
MAX_TAG_KEY, MAX_TAG_VALUE = 127, 256

TIME_RANGE = re.compile(rf"^TimeRange\.{N}\.(StartWeekDay|StartHour|EndWeekDay|EndHour)$")
TAG_SPEC_TYPE = re.compile(rf"^TagSpecification\.{N}\.ResourceType$")
TAG_SPEC_TAG = re.compile(rf"^TagSpecification\.{N}\.Tag\.{N}\.(Key|Value)$")
TARGET_INSTANCE = re.compile(rf"^AssociationTarget\.InstanceId\.{N}$")
TARGET_HOST = re.compile(rf"^AssociationTarget\.DedicatedHostId\.{N}$")
TARGET_TAG = re.compile(rf"^AssociationTarget\.InstanceTag\.{N}\.(Key|Value)$")
TIME_FIELDS = ("StartWeekDay", "StartHour", "EndWeekDay", "EndHour")

Tags = tuple[tuple[str, str], ...]


def window_id(params: Params) -> str:
    value = params.get("InstanceEventWindowId")
    if value is None or not value.strip():
        raise missing("InstanceEventWindowId")
    return value.strip()


def schedule(params: Params) -> tuple[tuple[TimeRange, ...], str | None]:
    """``TimeRange.N.*`` and ``CronExpression`` (empty: not given); both: InvalidParameterCombination."""
    fields: dict[int, dict[str, str]] = {}
    for number, field, value in params.numbered_fields(TIME_RANGE):
        fields.setdefault(number, {})[field] = value.strip()
    ranges = []
    for number in sorted(fields):
        given = fields[number]
        for field in TIME_FIELDS:
            if not given.get(field):
                raise missing(f"TimeRange.{number}.{field}")
        for field in ("StartWeekDay", "EndWeekDay"):
            if given[field] not in WEEKDAYS:
                raise bad_value(f"TimeRange.{number}.{field}", given[field], f"Expecting one of {', '.join(WEEKDAYS)}.")
        hours = {}
        for field in ("StartHour", "EndHour"):
            try:
                hours[field] = int(given[field])
            except ValueError:
                raise bad_value(f"TimeRange.{number}.{field}", given[field], "Expecting an integer.") from None
            if not 0 <= hours[field] <= 23:
                raise bad_value(f"TimeRange.{number}.{field}", given[field], "Expecting a value from 0 to 23.")
        ranges.append(TimeRange(given["StartWeekDay"], hours["StartHour"], given["EndWeekDay"], hours["EndHour"]))
    cron_text = params.get("CronExpression")
    cron = cron_text.strip() if cron_text is not None and cron_text.strip() else None
    if ranges and cron is not None:
        raise Ec2Error(
            "InvalidParameterCombination",
            "The parameter TimeRange cannot be used with the parameter CronExpression",
        )
    return tuple(ranges), cron


def check_tag(key: str, value: str, where: str) -> None:
    if key.startswith("aws:"):
        raise Ec2Error("InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
    if len(key) > MAX_TAG_KEY:
        raise bad_value(f"{where}.Key", key, f"Tag keys accept at most {MAX_TAG_KEY} characters.")
    if len(value) > MAX_TAG_VALUE:
        raise bad_value(f"{where}.Value", value, f"Tag values accept at most {MAX_TAG_VALUE} characters.")


def tag_specifications(params: Params) -> Tags:
    types = {number: value.strip() for number, value in params.numbered(TAG_SPEC_TYPE)}
    given: dict[int, dict[int, dict[str, str]]] = {}
    for number, index, field, value in params.doubly_numbered_fields(TAG_SPEC_TAG):
        given.setdefault(number, {}).setdefault(index, {})[field] = value
    tags: dict[str, str] = {}
    for number in sorted(set(types) | set(given)):
        resource_type = types.get(number)
        if not resource_type:
            raise missing(f"TagSpecification.{number}.ResourceType")
        if resource_type != WINDOW_RESOURCE_TYPE:
            raise Ec2Error(
                "InvalidParameterValue",
                f"'{resource_type}' is not a valid taggable resource type for this operation.",
            )
        for index in sorted(given.get(number, {})):
            where = f"TagSpecification.{number}.Tag.{index}"
            key, value = given[number][index].get("Key"), given[number][index].get("Value", "")
            if not key:
                raise missing(f"{where}.Key")
            check_tag(key, value, where)
            if key in tags:
                raise Ec2Error("InvalidParameterValue", f"The tag key '{key}' is given more than once.")
            tags[key] = value
    if len(tags) > MAX_TAGS:
        raise Ec2Error("TagLimitExceeded", f"The maximum number of tags ({MAX_TAGS}) per resource has been exceeded.")
    return tuple(tags.items())


def targets(params: Params) -> tuple[tuple[str, ...], Tags, tuple[str, ...]]:
    """``AssociationTarget``: (instance IDs, instance tags, Dedicated Host IDs), each without repeats."""
    instance_ids = tuple(dict.fromkeys(value.strip() for _, value in params.numbered(TARGET_INSTANCE)))
    check_instance_ids(list(instance_ids))
    hosts = tuple(dict.fromkeys(value.strip() for _, value in params.numbered(TARGET_HOST)))
    given: dict[int, dict[str, str]] = {}
    for number, field, value in params.numbered_fields(TARGET_TAG):
        given.setdefault(number, {})[field] = value
    tags = []
    for number in sorted(given):
        key = given[number].get("Key")
        if not key:
            raise missing(f"AssociationTarget.InstanceTag.{number}.Key")
        tags.append((key, given[number].get("Value", "")))
    if not (instance_ids or hosts or tags):
        raise missing("AssociationTarget")
    return instance_ids, tuple(dict.fromkeys(tags)), hosts
