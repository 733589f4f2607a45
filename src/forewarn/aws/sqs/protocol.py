"""SQS's two wires: the JSON protocol current SDKs speak (``POST /`` with ``X-Amz-Target: AmazonSQS.<Action>`` and
``Content-Type: application/x-amz-json-1.0``; errors as ``{"__type": ..., "message": ...}`` with the query code in
``x-amzn-query-error``) and the query protocol older ones do (``Action=...&Version=2012-11-05`` form fields, XML
answers in the ``http://queue.amazonaws.com/doc/2012-11-05/`` namespace, ``<ErrorResponse>`` errors). Both come down
to one shape here: an action's input and output as the JSON protocol's dicts (the Amazon SQS API Reference,
"Amazon SQS AWS JSON protocol" and "Query API requests" in the Developer Guide)."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

API_VERSION = "2012-11-05"
TARGET_PREFIX = "AmazonSQS."
JSON_TYPE = "application/x-amz-json-1.0"
NAMESPACE = f"http://queue.amazonaws.com/doc/{API_VERSION}/"


class SqsError(Exception):
    """An answer in SQS's error shape: ``code`` as the JSON protocol's ``__type`` names it, ``query_code`` as the
    query protocol (and ``x-amzn-query-error``) does."""

    def __init__(self, code: str, message: str, query_code: str | None = None, status: int = 400, sender: bool = True):
        super().__init__(message)
        self.code = code
        self.message = message
        self.query_code = query_code or code
        self.status = status
        self.fault = "Sender" if sender else "Receiver"


def invalid_parameter(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")


# ----------------------------------------------------------------------------------------------------- JSON
def json_response(output: Mapping[str, Any], request_id: str) -> Response:
    return Response(
        json.dumps(output, separators=(",", ":")),
        media_type=JSON_TYPE,
        headers={"x-amzn-RequestId": request_id},
    )


def json_error(error: SqsError, request_id: str) -> Response:
    body = {"__type": f"com.amazonaws.sqs#{error.code}", "message": error.message}
    return Response(
        json.dumps(body, separators=(",", ":")),
        status_code=error.status,
        media_type=JSON_TYPE,
        headers={"x-amzn-RequestId": request_id, "x-amzn-query-error": f"{error.query_code};{error.fault}"},
    )


# ---------------------------------------------------------------------------------------------------- query
# The query protocol's flattened lists, by their member name, and what the JSON protocol calls them.
QUERY_LISTS = {
    "Attribute": "Attributes",
    "AttributeName": "AttributeNames",
    "MessageAttribute": "MessageAttributes",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "DeleteMessageBatchRequestEntry": "Entries",
    "SendMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
    "Tag": "tags",
}
MAPS = ("Attributes", "MessageAttributes", "tags")  # lists of {Name, Value} (or {Key, Value}) that are maps in JSON
_MEMBER = re.compile(r"^([A-Za-z]+)\.(\d+)(?:\.(.+))?$")


def query_input(params: Mapping[str, str]) -> dict[str, Any]:
    """The form fields of a query request as the JSON protocol's input: ``Attribute.1.Name``/``.Value`` become the
    map ``Attributes``, ``AttributeName.1`` the list ``AttributeNames``, batch entries the list ``Entries``."""
    found: dict[str, Any] = {}
    lists: dict[str, dict[int, Any]] = {}
    for key, value in params.items():
        member = _MEMBER.match(key)
        if member is None or member.group(1) not in QUERY_LISTS:
            found[key] = value
            continue
        items = lists.setdefault(QUERY_LISTS[member.group(1)], {})
        if member.group(3) is None:
            items[int(member.group(2))] = value
        else:
            _nest(items.setdefault(int(member.group(2)), {}), member.group(3).split("."), value)
    for name, items in lists.items():
        ordered = [items[number] for number in sorted(items)]
        if name in MAPS:
            found[name] = {
                item.get("Name", item.get("Key")): item.get("Value") for item in ordered if isinstance(item, dict)
            }
        else:
            found[name] = ordered
    return found


def _nest(into: dict[str, Any], path: list[str], value: str) -> None:
    for part in path[:-1]:
        into = into.setdefault(part, {})
    into[path[-1]] = value


# How the query protocol names the members of a list in an answer (flattened: one element per member).
QUERY_MEMBERS = {
    "Messages": "Message",
    "QueueUrls": "QueueUrl",
    "Failed": "BatchResultErrorEntry",
    "queueUrls": "QueueUrl",
}


def query_response(action: str, output: Mapping[str, Any], request_id: str) -> Response:
    inner = "".join(_xml_member(name, value, action) for name, value in output.items())
    body = (
        f'<?xml version="1.0"?><{action}Response xmlns="{NAMESPACE}"><{action}Result>{inner}</{action}Result>'
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>"
    )
    return Response(body, media_type="text/xml", headers={"x-amzn-RequestId": request_id})


def query_error(error: SqsError, request_id: str) -> Response:
    body = (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{NAMESPACE}"><Error><Type>{error.fault}</Type>'
        f"<Code>{_text(error.query_code)}</Code><Message>{_text(error.message)}</Message><Detail/></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return Response(body, status_code=error.status, media_type="text/xml", headers={"x-amzn-RequestId": request_id})


def _xml_member(name: str, value: Any, action: str) -> str:
    if name in ("Attributes", "MessageAttributes"):
        tag = name[:-1]
        return "".join(
            f"<{tag}><Name>{_text(k)}</Name>{_xml_member('Value', v, action)}</{tag}>" for k, v in value.items()
        )
    if isinstance(value, list):
        tag = QUERY_MEMBERS.get(name, f"{action}ResultEntry")
        return "".join(_xml_member(tag, item, action) for item in value)
    if isinstance(value, dict):
        return f"<{name}>{''.join(_xml_member(k, v, action) for k, v in value.items())}</{name}>"
    if isinstance(value, bool):
        return f"<{name}>{'true' if value else 'false'}</{name}>"
    return f"<{name}>{_text(str(value))}</{name}>"


_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: str) -> str:
    value = _NOT_XML.sub("", value)
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ------------------------------------------------------------------------------------------------ digests
def md5_of_body(body: str) -> str:
    return hashlib.md5(body.encode(), usedforsecurity=False).hexdigest()


def md5_of_attributes(attributes: Mapping[str, tuple[str, str | None, bytes | None]]) -> str:
    """The digest of message attributes as "Calculating the MD5 message digest for message attributes" spells it:
    by name in order, each length-prefixed (4 bytes, big-endian) name, data type, a transport byte (1 string,
    2 binary) and the length-prefixed value."""
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        data_type, string_value, binary_value = attributes[name]
        for part in (name.encode(), data_type.encode()):
            digest.update(struct.pack(">I", len(part)) + part)
        if binary_value is not None:
            digest.update(b"\x02" + struct.pack(">I", len(binary_value)) + binary_value)
        else:
            value = (string_value or "").encode()
            digest.update(b"\x01" + struct.pack(">I", len(value)) + value)
    return digest.hexdigest()
