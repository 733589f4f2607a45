"""EC2's Query protocol on the way out: the API version and XML namespace, XML text and timestamps, the response
envelope, and the ``<Response><Errors><Error>`` shape every refusal takes ("Error codes for the Amazon EC2 API")."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

from starlette.responses import Response

API_VERSION = "2016-11-15"
NAMESPACE = f"http://ec2.amazonaws.com/doc/{API_VERSION}/"
CONTENT_TYPE = "text/xml;charset=UTF-8"


class Ec2Error(Exception):
    """An answer in EC2's error shape."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def missing(name: str) -> Ec2Error:
    return Ec2Error("MissingParameter", f"The request must contain the parameter {name}")


def bad_value(name: str, value: str, expecting: str) -> Ec2Error:
    return Ec2Error("InvalidParameterValue", f"Value ({value}) for parameter {name} is invalid. {expecting}")


def dry_run() -> Ec2Error:
    return Ec2Error("DryRunOperation", "Request would have succeeded, but DryRun flag is set.", 412)


def instances_not_found(instance_ids: list[str]) -> Ec2Error:
    if len(instance_ids) == 1:
        return Ec2Error("InvalidInstanceID.NotFound", f"The instance ID '{instance_ids[0]}' does not exist")
    return Ec2Error("InvalidInstanceID.NotFound", f"The instance IDs '{', '.join(instance_ids)}' do not exist")


_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def text(value: str) -> str:
    """Escaped XML text; characters XML 1.0 cannot carry (a client's NUL, say) are dropped."""
    value = _NOT_XML.sub("", value)
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def timestamp(moment: datetime) -> str:
    """EC2's timestamp: ``2019-03-14T20:00:00.000Z``."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{moment.microsecond // 1000:03d}Z"


def items(values: Iterable[str], tag: str) -> str:
    """``<tag><item>a</item>...</tag>``, or ``<tag/>`` when empty."""
    inner = "".join(f"<item>{text(value)}</item>" for value in values)
    return f"<{tag}>{inner}</{tag}>" if inner else f"<{tag}/>"


def tag_set(tags: Iterable[tuple[str, str]]) -> str:
    inner = "".join(f"<item><key>{text(k)}</key><value>{text(v)}</value></item>" for k, v in tags)
    return f"<tagSet>{inner}</tagSet>" if inner else "<tagSet/>"


def xml_response(body: str, request_id: str, status: int = 200) -> Response:
    return Response(
        '<?xml version="1.0" encoding="UTF-8"?>\n' + body,
        status_code=status,
        media_type=CONTENT_TYPE,
        headers={"x-amzn-RequestId": request_id, "Cache-Control": "no-cache, no-store"},
    )


def answer(action: str, request_id: str, inner: str) -> Response:
    """An action's successful answer: ``<ActionResponse>`` in the API's namespace, its request ID first."""
    return xml_response(
        f'<{action}Response xmlns="{NAMESPACE}"><requestId>{request_id}</requestId>{inner}</{action}Response>',
        request_id,
    )


def error_response(error: Ec2Error, request_id: str) -> Response:
    return xml_response(
        f"<Response><Errors><Error><Code>{text(error.code)}</Code><Message>{text(error.message)}</Message>"
        f"</Error></Errors><RequestID>{request_id}</RequestID></Response>",
        request_id,
        error.status,
    )
