"""What every resource provider of the ARM port (Compute, Maintenance, Resource Graph, Event Grid) shares on the
wire: ARM's error shape and the errors several providers answer alike, the api-version's parsing and gating, request
bodies (read within a bound, parsed by ``net/untrusted_json.py``), the members of a JSON body as ARM's deserializer
matches them (case-insensitively), and the request-id headers of every answer.

docs/azure-arm.md describes the errors and the choices where ARM's behaviour is not documented.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from forewarn.app.errors import Unavailable
from forewarn.core.errors import Conflict, CoreError, NotFound
from forewarn.net.untrusted_json import MAX_BODY_BYTES, JsonInputError, parse_json

log = logging.getLogger("forewarn.arm")

RESOURCE_NOT_FOUND_HELP = "For more details please go to https://aka.ms/ARMResourceNotFoundFix"


# --------------------------------------------------------------------------------------------------------- errors
class ArmError(Exception):
    """An answer in ARM's error shape: ``{"error": {"code": ..., "message": ...}}``."""

    def __init__(self, status: int, code: str, message: str, target: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.target = target

    def response(self) -> Response:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.target is not None:
            error["target"] = self.target
        return json_response(self.status, {"error": error})


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer as ARM sends it: compact, UTF-8."""
    return Response(
        json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        status_code=status,
        media_type="application/json; charset=utf-8",
        headers=headers,
    )


async def answered(request: Request, produce: Callable[[], Awaitable[Response]]) -> Response:
    """Every ARM answer: errors in ARM's shape (never a bare 500), and the request-id headers ARM sets."""
    try:
        response = await produce()
    except ArmError as error:
        response = error.response()
    except CoreError as error:
        response = core_error(error).response()
    except Unavailable as error:
        response = ArmError(503, "ServiceUnavailable", f"Nothing was changed; the store failed: {error}").response()
        response.headers["Retry-After"] = str(error.retry_after)
    except ClientDisconnect:  # no one to answer (server/listeners.py says so in the log)
        raise
    except Exception:  # a bug: still answer in ARM's shape, and say so in the log
        log.exception("ARM request %s %s failed", request.method, request.url.path)
        response = ArmError(
            500, "InternalServerError", "forewarn failed to process the request; see its log."
        ).response()
    response.headers.setdefault("x-ms-request-id", str(uuid.uuid4()))
    response.headers["x-ms-correlation-request-id"] = request.headers.get("x-ms-correlation-request-id") or str(
        uuid.uuid4()
    )
    client_id = request.headers.get("x-ms-client-request-id")
    if client_id:
        response.headers["x-ms-client-request-id"] = client_id
    return response


def core_error(error: CoreError) -> ArmError:
    """An engine refusal in ARM's words."""
    if isinstance(error, NotFound):
        return ArmError(404, "ResourceNotFound", str(error))
    if isinstance(error, Conflict):
        return ArmError(409, "OperationNotAllowed", str(error))
    return ArmError(400, "InvalidParameter", str(error))


def method_not_allowed(method: str) -> ArmError:
    return ArmError(405, "MethodNotAllowed", f"The requested resource does not support http method '{method}'.")


def subscription_not_found(text: str) -> ArmError:
    return ArmError(404, "SubscriptionNotFound", f"The subscription '{text}' could not be found.")


def resource_not_found(namespace: str, kind: str, name: str, group: str) -> ArmError:
    """ARM's message for a resource that is not there, naming the resource group as the request spelled it."""
    return ArmError(
        404,
        "ResourceNotFound",
        f"The Resource '{namespace}/{kind}/{name}' under resource group '{group}' was not found. "
        f"{RESOURCE_NOT_FOUND_HELP}",
    )


def content_error(detail: str) -> ArmError:
    return ArmError(
        400, "InvalidRequestContent", f"The request content was invalid and could not be deserialized: '{detail}'."
    )


def convert_error(value: Any, type_name: str, path: str) -> ArmError:
    """Newtonsoft's message for a member of the wrong JSON type."""
    return content_error(f"Error converting value {json.dumps(value)} to type '{type_name}'. Path '{path}'")


def missing_member(member: str, owner_type: str, path: str) -> ArmError:
    """Newtonsoft's message for a member the api-version's model does not have (the troubleshooting of the
    terminate-notification page)."""
    return ArmError(
        400, "BadRequest", f"Could not find member '{member}' on object of type '{owner_type}'. Path '{path}'."
    )


# ----------------------------------------------------------------------------------------------------- api-version
_DATED_API_VERSION = re.compile(r"^(\d{4}-\d{2}-\d{2})(-[a-z]+)?$", re.IGNORECASE)
_PREVIEW_API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")


@dataclass(frozen=True)
class ApiVersion:
    text: str
    date: str  # YYYY-MM-DD, for comparisons

    def at_least(self, version: str) -> bool:
        """Whether this version has what ``version`` (a date, ``YYYY-MM-DD``) introduced."""
        return self.date >= version


def missing_api_version() -> ArmError:
    return ArmError(
        400,
        "MissingApiVersionParameter",
        "The api-version query parameter (?api-version=) is required for all requests.",
    )


def invalid_api_version(text: str, supported: Sequence[str] | None = None) -> ArmError:
    listed = "" if supported is None else f" The supported versions are '{','.join(supported)}'."
    return ArmError(400, "InvalidApiVersionParameter", f"The api-version '{text}' is invalid.{listed}")


def dated_api_version(request: Request, known: Sequence[str]) -> ApiVersion:
    """The request's api-version, any well formed one (a real date, an optional ``-preview``): clients move to newer
    versions faster than a list here would. ``known`` is what errors list as supported."""
    text = request.query_params.get("api-version")
    if text is None or not text.strip():
        raise missing_api_version()
    match = _DATED_API_VERSION.match(text.strip())
    if match is None or not _real_date(match.group(1)):
        raise invalid_api_version(text, known)
    return ApiVersion(text.strip(), match.group(1))


def listed_api_version(request: Request, supported: Sequence[str]) -> str:
    """The request's api-version, one of ``supported`` exactly (errors list them newest first)."""
    version = request.query_params.get("api-version")
    if not version:
        raise missing_api_version()
    if version not in supported:
        raise invalid_api_version(version, list(reversed(supported)))
    return version


def well_formed_api_version(request: Request) -> str:
    """The request's api-version, of the form ``YYYY-MM-DD[-preview]``; any such version a client sends is served."""
    version = request.query_params.get("api-version")
    if not version:
        raise missing_api_version()
    if not _PREVIEW_API_VERSION.match(version):
        raise invalid_api_version(version)
    return version


def _real_date(text: str) -> bool:
    try:
        datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------------------------------- request bodies
async def read_body(request: Request) -> bytes:
    """The request body, read no further than MAX_BODY_BYTES: a larger one is refused before it fills memory."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def parse_body(raw: bytes) -> Any:
    """A JSON request body, or ARM's InvalidRequestContent (bad JSON, too deep, not UTF-8 ...)."""
    try:
        return parse_json(raw)
    except JsonInputError as error:
        where = f". Path '', line {error.line}, position {error.column}" if error.line else ""
        raise content_error(f"{error.message}{where}") from None


async def object_body(request: Request, required: bool) -> dict[str, Any]:
    """A request body that is a JSON object; an empty one is ``{}`` unless ``required``."""
    raw = await read_body(request)
    if not raw.strip():
        if required:
            raise content_error("The request body is empty; a JSON object is expected")
        return {}
    parsed = parse_body(raw)
    if not isinstance(parsed, dict):
        raise content_error(f"Expected a JSON object, got {type(parsed).__name__}. Path ''")
    return parsed


def _too_large() -> ArmError:
    # ARM's own limit and code for an oversized body are not documented; 413 says what happened.
    return ArmError(413, "RequestEntityTooLarge", f"The request content is larger than {MAX_BODY_BYTES} bytes.")


# ---------------------------------------------------------------------------------------------------- members
class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()  # a member the body does not have (unlike one given as null)

# What a member was expected to be, as the refusals below name it.
OBJECT = "a JSON object"
STRING = "a string"
BOOLEAN = "true or false"
STRINGS = "a list of strings"

#: Makes the error for a member of the wrong type: (what was expected, the value, its path).
Refusal = Callable[[str, Any, str], ArmError]

_DOTNET_TYPES = {
    STRING: "System.String",
    BOOLEAN: "System.Boolean",
    STRINGS: "System.Collections.Generic.IList`1[System.String]",
}


def deserializer_refusal(expected: str, value: Any, path: str) -> ArmError:
    """The words of ARM's own deserializer (Newtonsoft), which resource providers such as Compute answer with."""
    if expected == OBJECT:
        return content_error(f"Expected a JSON object at path '{path}', got {json.dumps(value)}")
    return convert_error(value, _DOTNET_TYPES[expected], path)


def member(obj: dict[str, Any], name: str) -> Any:
    """A member of a JSON object, matched case-insensitively as ARM's deserializer does; ``ABSENT`` if missing."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return ABSENT


def given(value: Any) -> bool:
    """Present and not null."""
    return value is not ABSENT and value is not None


def json_object(value: Any, path: str, refuse: Refusal = deserializer_refusal) -> dict[str, Any] | None:
    if not given(value):
        return None
    if not isinstance(value, dict):
        raise refuse(OBJECT, value, path)
    return value


def json_string(value: Any, path: str, refuse: Refusal = deserializer_refusal) -> str | None:
    if not given(value):
        return None
    if not isinstance(value, str):
        raise refuse(STRING, value, path)
    return value


def json_bool(value: Any, path: str, refuse: Refusal = deserializer_refusal) -> bool | None:
    if not given(value):
        return None
    if not isinstance(value, bool):
        raise refuse(BOOLEAN, value, path)
    return value


def json_strings(value: Any, path: str, refuse: Refusal = deserializer_refusal) -> list[str] | None:
    if not given(value):
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise refuse(STRINGS, value, path)
    return value
