"""``Register/Deregister/DescribeInstanceEventNotificationAttributes``: which instance tags scheduled-event
notifications carry ("Customize scheduled event notifications")."""

from __future__ import annotations

import re
from collections.abc import Awaitable

from starlette.responses import Response

from forewarn.aws.ec2_api.backend import Ec2Backend
from forewarn.aws.ec2_api.params import N, Params
from forewarn.aws.ec2_api.protocol import Ec2Error, answer, bad_value, dry_run, items, missing
from forewarn.aws.ec2_api.registry import action
from forewarn.aws.ec2_api.window_params import MAX_TAG_KEY
from forewarn.aws.model import NotificationAttributes
from forewarn.core.errors import CoreError

TAG_KEY_N = re.compile(rf"^InstanceTagAttribute\.InstanceTagKey\.{N}$")
INCLUDE_ALL = "InstanceTagAttribute.IncludeAllTagsOfInstance"


def attributes_xml(attributes: NotificationAttributes) -> str:
    return (
        f"<instanceTagAttribute>{items(attributes.keys, 'instanceTagKeySet')}"
        f"<includeAllTagsOfInstance>{'true' if attributes.include_all else 'false'}</includeAllTagsOfInstance>"
        "</instanceTagAttribute>"
    )


def tag_attribute(params: Params) -> tuple[bool, tuple[str, ...]]:
    """``InstanceTagAttribute``: (IncludeAllTagsOfInstance, the InstanceTagKey.N). Both true and keys:
    InvalidParameterCombination; neither given: MissingParameter."""
    params.check_known(lambda name: name in ("DryRun", INCLUDE_ALL) or bool(TAG_KEY_N.match(name)))
    include_given = params.get(INCLUDE_ALL) is not None
    include_all = params.boolean(INCLUDE_ALL)
    numbered = params.numbered(TAG_KEY_N)
    keys = tuple(dict.fromkeys(value for _, value in numbered))
    if not include_given and not keys:
        raise missing("InstanceTagAttribute")
    for number, key in numbered:
        if not key:
            raise bad_value(f"InstanceTagAttribute.InstanceTagKey.{number}", key, "A tag key cannot be empty.")
        if len(key) > MAX_TAG_KEY:
            raise bad_value(
                f"InstanceTagAttribute.InstanceTagKey.{number}",
                key,
                f"Tag keys accept at most {MAX_TAG_KEY} characters.",
            )
    if include_all and keys:
        raise Ec2Error(
            "InvalidParameterCombination",
            "The parameter IncludeAllTagsOfInstance=true cannot be used with the parameter InstanceTagKey",
        )
    return include_all, keys


async def _changed(command: Awaitable[NotificationAttributes]) -> NotificationAttributes:
    try:
        return await command
    except CoreError as error:
        raise Ec2Error("InvalidParameterValue", str(error)) from None


@action("RegisterInstanceEventNotificationAttributes")
async def register_notification_attributes(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    include_all, keys = tag_attribute(params)
    if not include_all and not keys:
        raise Ec2Error(
            "InvalidParameterValue",
            "Nothing to register: give IncludeAllTagsOfInstance=true or at least one InstanceTagKey",
        )
    if params.boolean("DryRun"):
        raise dry_run()
    attributes = await _changed(backend.register_attributes(include_all, keys))
    return answer("RegisterInstanceEventNotificationAttributes", request_id, attributes_xml(attributes))


@action("DeregisterInstanceEventNotificationAttributes")
async def deregister_notification_attributes(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    include_all, keys = tag_attribute(params)
    if params.boolean("DryRun"):
        raise dry_run()
    attributes = await _changed(backend.deregister_attributes(include_all, keys))
    return answer("DeregisterInstanceEventNotificationAttributes", request_id, attributes_xml(attributes))


@action("DescribeInstanceEventNotificationAttributes")
def describe_notification_attributes(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    params.check_known(lambda name: name == "DryRun")
    if params.boolean("DryRun"):
        raise dry_run()
    backend.catch_up()
    attributes = backend.notification_attributes
    return answer("DescribeInstanceEventNotificationAttributes", request_id, attributes_xml(attributes))
