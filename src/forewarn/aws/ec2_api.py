"""The Amazon EC2 Query API, the actions about scheduled events: ``DescribeInstanceStatus`` and
``ModifyInstanceEventStartTime`` (the AWS page "Scheduled events for your instances"; the EC2 API Reference; "Error
codes for the Amazon EC2 API"), the six event-window actions
(``Create/Describe/Modify/Delete/Associate/DisassociateInstanceEventWindow``, "Define event windows for scheduled
events") and the three event notification attribute actions
(``Register/Deregister/DescribeInstanceEventNotificationAttributes``, "Customize scheduled event notifications"). With
credentials configured, every request's SigV4 signature is verified (botocore recomputes it).

Served on its own listener as an EC2 endpoint, so boto3 and the aws CLI work against it unmodified
(``endpoint_url="http://127.0.0.1:PORT"``). The wire is EC2's query protocol: ``POST /`` with a form-encoded body
(``Action=...&Version=2016-11-15&...``) or ``GET`` with the same parameters in the query string; answers are XML in the
``http://ec2.amazonaws.com/doc/2016-11-15/`` namespace, errors ``<Response><Errors><Error>`` with ``RequestID``.

Reads take the engine's state as it is (after applying deadlines that fell due); every write goes through
:meth:`Maintenance.perform`, so it is committed before the answer leaves.
docs/aws-api.md describes every parameter, filter, error and choice.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import hmac
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl, unquote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, request_response

from forewarn.app.runtime import Maintenance
from forewarn.aws.changes import Ec2EventChanged, Ec2NotificationAttributesChanged, Ec2WindowChanged
from forewarn.aws.component import RescheduleRefused, WindowCombination, WindowNotFound
from forewarn.aws.model import (
    Ec2Code,
    Ec2Event,
    Ec2EventState,
    Ec2Instance,
    Ec2State,
    InstanceState,
    NotificationAttributes,
    availability_zone_id,
)
from forewarn.aws.windows import WEEKDAYS, EventWindow, TimeRange
from forewarn.core.errors import Conflict, CoreError, NotFound
from forewarn.core.times import parse_time
from forewarn.engine.engine import Engine
from forewarn.net.browser_guard import BrowserGuard, Refusal
from forewarn.store import StoreError

log = logging.getLogger("forewarn.ec2api")

API_VERSION = "2016-11-15"
NAMESPACE = f"http://ec2.amazonaws.com/doc/{API_VERSION}/"
CONTENT_TYPE = "text/xml;charset=UTF-8"

EVENT_HISTORY = timedelta(days=7)  # "After a scheduled event is completed, it can still be described for up to a week"
TERMINATED_VISIBLE = timedelta(hours=1)  # DescribeInstances: "usually less than one hour"
MAX_INSTANCE_IDS = 100
MIN_RESULTS, MAX_RESULTS = 5, 1000
DEFAULT_PAGE = 1000  # a request without MaxResults gets pages of this size (and a NextToken past it)
MAX_FIELDS = 10_000  # form fields per request

# A well-formed instance ID: the old 8-hex-digit form or the 17-digit one (error-code page, InvalidInstanceID.Malformed).
WELL_FORMED_ID = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$")

# Parameters that sign a request (SigV4 presigned query, SigV2); they are never "unknown".
_AUTH_PARAMS = frozenset(
    {
        "AWSAccessKeyId",
        "Signature",
        "SignatureMethod",
        "SignatureVersion",
        "Timestamp",
        "Expires",
        "SecurityToken",
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
        "X-Amz-Security-Token",
        "X-Amz-Content-Sha256",
    }
)

_REBOOTS = (Ec2Code.INSTANCE_REBOOT, Ec2Code.SYSTEM_REBOOT)


# --------------------------------------------------------------------------------------------------------- errors
class Ec2Error(Exception):
    """An answer in EC2's error shape."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def _missing(name: str) -> Ec2Error:
    return Ec2Error("MissingParameter", f"The request must contain the parameter {name}")


def _bad_value(name: str, value: str, expecting: str) -> Ec2Error:
    return Ec2Error("InvalidParameterValue", f"Value ({value}) for parameter {name} is invalid. {expecting}")


def _dry_run() -> Ec2Error:
    return Ec2Error("DryRunOperation", "Request would have succeeded, but DryRun flag is set.", 412)


def _not_found(instance_ids: list[str]) -> Ec2Error:
    if len(instance_ids) == 1:
        return Ec2Error("InvalidInstanceID.NotFound", f"The instance ID '{instance_ids[0]}' does not exist")
    return Ec2Error("InvalidInstanceID.NotFound", f"The instance IDs '{', '.join(instance_ids)}' do not exist")


# ------------------------------------------------------------------------------------------------------------ XML
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: str) -> str:
    """Escaped XML text; characters XML 1.0 cannot carry (a client's NUL, say) are dropped."""
    value = _NOT_XML.sub("", value)
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _time(moment: datetime) -> str:
    """EC2's timestamp: ``2019-03-14T20:00:00.000Z``."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{moment.microsecond // 1000:03d}Z"


def _xml_response(body: str, request_id: str, status: int = 200) -> Response:
    return Response(
        '<?xml version="1.0" encoding="UTF-8"?>\n' + body,
        status_code=status,
        media_type=CONTENT_TYPE,
        headers={"x-amzn-RequestId": request_id, "Cache-Control": "no-cache, no-store"},
    )


def _error_response(error: Ec2Error, request_id: str) -> Response:
    return _xml_response(
        f"<Response><Errors><Error><Code>{_text(error.code)}</Code><Message>{_text(error.message)}</Message>"
        f"</Error></Errors><RequestID>{request_id}</RequestID></Response>",
        request_id,
        error.status,
    )


def _event_xml(event: Ec2Event, tag: str) -> str:
    parts = [
        f"<{tag}><instanceEventId>{event.event_id}</instanceEventId><code>{event.code.value}</code>"
        f"<description>{_text(event.shown_description)}</description><notBefore>{_time(event.not_before)}</notBefore>"
    ]
    if event.not_after is not None:
        parts.append(f"<notAfter>{_time(event.not_after)}</notAfter>")
    if event.not_before_deadline is not None:
        parts.append(f"<notBeforeDeadline>{_time(event.not_before_deadline)}</notBeforeDeadline>")
    parts.append(f"</{tag}>")
    return "".join(parts)


# ------------------------------------------------------------------------------------------------------- statuses
@dataclass(frozen=True)
class Summary:
    """An InstanceStatusSummary: ``status`` and its one detail, ``reachability`` (None: no details)."""

    status: str
    reachability: str | None = None
    impaired_since: datetime | None = None

    def xml(self, tag: str) -> str:
        if self.reachability is None:
            return f"<{tag}><status>{self.status}</status></{tag}>"
        since = "" if self.impaired_since is None else f"<impairedSince>{_time(self.impaired_since)}</impairedSince>"
        return (
            f"<{tag}><status>{self.status}</status><details><item><name>reachability</name>"
            f"<status>{self.reachability}</status>{since}</item></details></{tag}>"
        )


OK = Summary("ok", "passed")
NOT_APPLICABLE = Summary("not-applicable")


# ---------------------------------------------------------------------------------------------------------- views
@dataclass
class InstanceView:
    """What DescribeInstanceStatus shows of one instance, computed once per request and instance."""

    instance: Ec2Instance
    state: Ec2State
    zone_id: str
    system: Summary
    status: Summary
    ebs: Summary
    events: list[Ec2Event]

    def xml(self) -> str:
        state = self.state.state
        events = ""
        if self.events:
            events = "<eventsSet>" + "".join(_event_xml(event, "item") for event in self.events) + "</eventsSet>"
        return (
            f"<item><instanceId>{self.instance.instance_id}</instanceId>"
            f"<availabilityZone>{_text(self.instance.availability_zone)}</availabilityZone>"
            f"<availabilityZoneId>{_text(self.zone_id)}</availabilityZoneId>"
            f"<operator><managed>false</managed></operator>"
            f"<instanceState><code>{state.code}</code><name>{state.value}</name></instanceState>"
            f"{self.system.xml('systemStatus')}{self.status.xml('instanceStatus')}"
            f"{self.ebs.xml('attachedEbsStatus')}{events}</item>"
        )


# -------------------------------------------------------------------------------------------------------- filters
def _times(events: list[Ec2Event], pick: Callable[[Ec2Event], datetime | None]) -> list[str]:
    return [_time(moment) for moment in map(pick, events) if moment is not None]


# filter name → (the strings of an instance it compares with, whether the values are timestamps)
FILTERS: dict[str, tuple[Callable[[InstanceView], Iterable[str]], bool]] = {
    "availability-zone": (lambda v: (v.instance.availability_zone,), False),
    "availability-zone-id": (lambda v: (v.zone_id,), False),
    "event.code": (lambda v: [e.code.value for e in v.events], False),
    "event.description": (lambda v: [e.shown_description for e in v.events], False),
    "event.instance-event-id": (lambda v: [e.event_id for e in v.events], False),
    "event.not-after": (lambda v: _times(v.events, lambda e: e.not_after), True),
    "event.not-before": (lambda v: _times(v.events, lambda e: e.not_before), True),
    "event.not-before-deadline": (lambda v: _times(v.events, lambda e: e.not_before_deadline), True),
    "instance-state-code": (lambda v: (str(v.state.state.code),), False),
    "instance-state-name": (lambda v: (v.state.state.value,), False),
    "instance-status.reachability": (lambda v: (v.status.reachability,) if v.status.reachability else (), False),
    "instance-status.status": (lambda v: (v.status.status,), False),
    "system-status.reachability": (lambda v: (v.system.reachability,) if v.system.reachability else (), False),
    "system-status.status": (lambda v: (v.system.status,), False),
    "attached-ebs-status.status": (lambda v: (v.ebs.status,), False),
    "application-status.status": (lambda v: ("not-applicable",), False),  # no application health checks
    "operator.managed": (lambda v: ("false",), False),
    "operator.principal": (lambda v: (), False),
}


def _parse_time(text: str) -> datetime | None:
    try:
        return parse_time(text).astimezone(UTC)
    except (CoreError, OverflowError):
        return None


class Filter:
    """One ``Filter.N``: its values are OR-ed. A value may use ``*`` (any characters) and ``?`` (one character);
    a backslash makes the next character literal. A timestamp filter's value without wildcards is compared as an
    instant, so ``2026-05-04T22:12:00Z`` matches ``2026-05-04T22:12:00.000Z``. ``strings`` gives the strings of a
    resource the filter compares with (default: DescribeInstanceStatus's ``FILTERS``)."""

    def __init__(self, name: str, values: list[str], strings: Callable[[object], Iterable[str]] | None = None):
        self.name = name
        self.values = values
        if strings is None:
            self.strings, timestamps = FILTERS[name]
        else:
            self.strings, timestamps = strings, False
        self.literals: set[str] = set()
        self.patterns: list[list] = []
        for value in values:
            pattern, wild = self._compile(value)
            if wild:
                self.patterns.append(pattern)
                continue
            literal = "".join(pattern)
            if timestamps:
                moment = _parse_time(literal)
                if moment is not None:
                    literal = _time(moment)
            self.literals.add(literal)

    @staticmethod
    def _compile(value: str) -> tuple[list, bool]:
        """The value as a list of characters, ``_ONE`` and ``_ANY``; and whether it has a wildcard."""
        pattern: list = []
        escaped = wild = False
        for char in value:
            if escaped:
                pattern.append(char)
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == "*":
                if not pattern or pattern[-1] is not _ANY:
                    pattern.append(_ANY)
                wild = True
            elif char == "?":
                pattern.append(_ONE)
                wild = True
            else:
                pattern.append(char)
        if escaped:  # a trailing backslash is itself
            pattern.append("\\")
        return pattern, wild

    def matches(self, view) -> bool:
        return any(self.matches_text(text) for text in self.strings(view))

    def matches_text(self, text: str) -> bool:
        return text in self.literals or any(_wildcard_match(p, text) for p in self.patterns)

    @property
    def wild(self) -> bool:
        return bool(self.patterns)


_ONE, _ANY = object(), object()  # ? and *


def _wildcard_match(pattern: list, text: str) -> bool:
    """Glob matching without backtracking blow-up: O(len(pattern) * len(text)) at worst, whatever the stars."""
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and (pattern[p] is _ONE or pattern[p] == text[t]):
            p += 1
            t += 1
        elif p < len(pattern) and pattern[p] is _ANY:
            star, mark = p, t
            p += 1
        elif star >= 0:
            p = star + 1
            mark += 1
            t = mark
        else:
            return False
    while p < len(pattern) and pattern[p] is _ANY:
        p += 1
    return p == len(pattern)


# --------------------------------------------------------------------------------------------------- the request
@dataclass
class Params:
    """A request's parameters: the query string's, then the form body's; the first occurrence of a name wins."""

    values: dict[str, str]
    region: str | None  # from the SigV4 credential scope; None when the request is not signed

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def boolean(self, name: str) -> bool:
        text = self.values.get(name)
        if text is None:
            return False
        lowered = text.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise _bad_value(name, text, "Expecting a boolean (true or false).")

    def check_known(self, known: Callable[[str], bool]) -> None:
        for name in self.values:
            if name not in _AUTH_PARAMS and name not in ("Action", "Version") and not known(name):
                raise Ec2Error("UnknownParameter", f"The parameter {name} is not recognized")


async def _read_params(request: Request) -> Params:
    values: dict[str, str] = {}
    sources = [request.scope.get("query_string", b"").decode("latin-1")]
    if request.method == "POST":
        content_type = request.headers.get("content-type", "application/x-www-form-urlencoded").lower()
        body = await request.body()
        if body.strip():
            if not content_type.startswith("application/x-www-form-urlencoded"):
                raise Ec2Error(
                    "InvalidParameterValue",
                    f"The request body must be application/x-www-form-urlencoded, not '{content_type}'",
                )
            sources.append(body.decode("utf-8", errors="replace"))
    for source in sources:
        try:
            pairs = parse_qsl(
                source, keep_blank_values=True, encoding="utf-8", errors="replace", max_num_fields=MAX_FIELDS
            )
        except ValueError:
            raise Ec2Error("MalformedQueryString", f"The request has more than {MAX_FIELDS} parameters") from None
        for name, value in pairs:
            values.setdefault(name, value)
    return Params(values, _signed_region(request, values))


def _signed_region(request: Request, values: dict[str, str]) -> str | None:
    """The region of the credential scope the request is signed with: the ``Credential=`` component of the SigV4
    ``Authorization`` header, or else the ``X-Amz-Credential`` parameter of query-string auth (the query string's
    wins over the body's, so a verified presigned URL is read as verified); never any other text of the header. A
    malformed header or scope is refused (IncompleteSignature), whether signatures are verified or not."""
    authorization = request.headers.get("authorization")
    if authorization is not None:
        return parse_authorization(authorization).scope.region
    if "X-Amz-Credential" in values:
        return credential_scope(values["X-Amz-Credential"]).region
    return None


_INSTANCE_ID_N = re.compile(r"^InstanceId\.([1-9]\d{0,5})$")
_FILTER_NAME = re.compile(r"^Filter\.([1-9]\d{0,5})\.Name$")
_FILTER_VALUE = re.compile(r"^Filter\.([1-9]\d{0,5})\.Value\.([1-9]\d{0,5})$")
_DESCRIBE_PARAMS = frozenset({"DryRun", "MaxResults", "NextToken", "IncludeAllInstances", "IncludeManagedResources"})
_MODIFY_PARAMS = frozenset({"DryRun", "InstanceId", "InstanceEventId", "NotBefore"})


def _indexed(params: Params, pattern: re.Pattern) -> list[tuple[tuple[int | str, ...], str]]:
    found = []
    for name, value in params.values.items():
        match = pattern.match(name)
        if match:
            found.append((tuple(int(g) if g.isdigit() else g for g in match.groups()), value))
    return sorted(found)


# ------------------------------------------------------------------------------------------------- event windows
WINDOW_NOT_FOUND = "InvalidInstanceEventWindowId.NotFound"  # the spelling of most emulators; docs/aws-api.md
MIN_WINDOW_RESULTS, MAX_WINDOW_RESULTS = 20, 500
DEFAULT_WINDOW_PAGE = 500  # a request without MaxResults (there are at most 200 windows: one page)
WINDOW_RESOURCE_TYPE = "instance-event-window"
MAX_TAGS = 50
MAX_TAG_KEY, MAX_TAG_VALUE = 127, 256

_N = r"([1-9]\d{0,5})"
_WINDOW_ID_N = re.compile(rf"^InstanceEventWindowId\.{_N}$")
_TIME_RANGE = re.compile(rf"^TimeRange\.{_N}\.(StartWeekDay|StartHour|EndWeekDay|EndHour)$")
_TAG_SPEC_TYPE = re.compile(rf"^TagSpecification\.{_N}\.ResourceType$")
_TAG_SPEC_TAG = re.compile(rf"^TagSpecification\.{_N}\.Tag\.{_N}\.(Key|Value)$")
_TARGET_INSTANCE = re.compile(rf"^AssociationTarget\.InstanceId\.{_N}$")
_TARGET_HOST = re.compile(rf"^AssociationTarget\.DedicatedHostId\.{_N}$")
_TARGET_TAG = re.compile(rf"^AssociationTarget\.InstanceTag\.{_N}\.(Key|Value)$")
_TAG_KEY_N = re.compile(rf"^InstanceTagAttribute\.InstanceTagKey\.{_N}$")
_TIME_FIELDS = ("StartWeekDay", "StartHour", "EndWeekDay", "EndHour")

# DescribeInstanceEventWindows's filters (besides instance-id and tag:<key>, built per request) → a window's strings.
WINDOW_FILTERS: dict[str, Callable[[EventWindow], Iterable[str]]] = {
    "dedicated-host-id": lambda w: w.dedicated_host_ids,
    "event-window-name": lambda w: (w.name,),
    "instance-tag": lambda w: [f"{key}={value}" for key, value in w.instance_tags],
    "instance-tag-key": lambda w: [key for key, _ in w.instance_tags],
    "instance-tag-value": lambda w: [value for _, value in w.instance_tags],
    "tag-key": lambda w: [key for key, _ in w.tags],
    "tag-value": lambda w: [value for _, value in w.tags],
}


def _items(values: Iterable[str], tag: str) -> str:
    """``<tag><item>a</item>...</tag>``, or ``<tag/>`` when empty."""
    inner = "".join(f"<item>{_text(value)}</item>" for value in values)
    return f"<{tag}>{inner}</{tag}>" if inner else f"<{tag}/>"


def _tag_set(tags: Iterable[tuple[str, str]]) -> str:
    inner = "".join(f"<item><key>{_text(k)}</key><value>{_text(v)}</value></item>" for k, v in tags)
    return f"<tagSet>{inner}</tagSet>" if inner else "<tagSet/>"


def _window_xml(window: EventWindow, tag: str, state: str) -> str:
    """An InstanceEventWindow, its elements in the botocore shape's order. The association target always carries its
    three lists; ``timeRangeSet``, ``name`` and ``cronExpression`` only when the window has them."""
    parts = [f"<{tag}><instanceEventWindowId>{window.window_id}</instanceEventWindowId>"]
    if window.time_ranges:
        parts.append(
            "<timeRangeSet>"
            + "".join(
                f"<item><startWeekDay>{r.start_weekday}</startWeekDay><startHour>{r.start_hour}</startHour>"
                f"<endWeekDay>{r.end_weekday}</endWeekDay><endHour>{r.end_hour}</endHour></item>"
                for r in window.time_ranges
            )
            + "</timeRangeSet>"
        )
    if window.name:
        parts.append(f"<name>{_text(window.name)}</name>")
    if window.cron is not None:
        parts.append(f"<cronExpression>{_text(window.cron)}</cronExpression>")
    parts.append(
        f"<associationTarget>{_items(window.instance_ids, 'instanceIdSet')}{_tag_set(window.instance_tags)}"
        f"{_items(window.dedicated_host_ids, 'dedicatedHostIdSet')}</associationTarget>"
    )
    parts.append(f"<state>{state}</state>{_tag_set(window.tags)}</{tag}>")
    return "".join(parts)


def _attributes_xml(attributes: NotificationAttributes) -> str:
    return (
        f"<instanceTagAttribute>{_items(attributes.keys, 'instanceTagKeySet')}"
        f"<includeAllTagsOfInstance>{'true' if attributes.include_all else 'false'}</includeAllTagsOfInstance>"
        "</instanceTagAttribute>"
    )


def _check_tag(key: str, value: str, where: str) -> None:
    if key.startswith("aws:"):
        raise Ec2Error("InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
    if len(key) > MAX_TAG_KEY:
        raise _bad_value(f"{where}.Key", key, f"Tag keys accept at most {MAX_TAG_KEY} characters.")
    if len(value) > MAX_TAG_VALUE:
        raise _bad_value(f"{where}.Value", value, f"Tag values accept at most {MAX_TAG_VALUE} characters.")


def _window_ids_not_found(window_ids: list[str]) -> Ec2Error:
    if len(window_ids) == 1:
        return Ec2Error(WINDOW_NOT_FOUND, f"The event window ID '{window_ids[0]}' does not exist")
    return Ec2Error(WINDOW_NOT_FOUND, f"The event window IDs '{', '.join(window_ids)}' do not exist")


# ------------------------------------------------------------------------------------------ SigV4 verification
MAX_SKEW = timedelta(minutes=15)  # RequestExpired past this (AWS common errors: "more than 15 minutes")
MAX_PRESIGNED_EXPIRES = 7 * 24 * 3600
SIGV4_TIME = "%Y%m%dT%H%M%SZ"
AUTH_FAILURE = "AWS was not able to validate the provided access credentials"
SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS "
    "Secret Access Key and signing method. Consult the service documentation for details."
)


def _incomplete(message: str) -> Ec2Error:
    return Ec2Error("IncompleteSignature", message)


def _mismatch() -> Ec2Error:
    return Ec2Error("SignatureDoesNotMatch", SIGNATURE_MISMATCH, 403)


@dataclass(frozen=True)
class CredentialScope:
    """``ACCESS_KEY/DATE/REGION/SERVICE/aws4_request``, the part of a SigV4 signature that names who signed, where."""

    access_key: str
    date: str
    region: str
    service: str


def credential_scope(credential: str) -> CredentialScope:
    parts = credential.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request" or not all(parts):
        raise _incomplete(
            f"Credential should be of the form ACCESS_KEY/DATE/REGION/SERVICE/aws4_request; got '{credential}'."
        )
    return CredentialScope(*parts[:4])


@dataclass(frozen=True)
class SigV4Header:
    scope: CredentialScope
    credential: str
    signed_headers: str
    signature: str


_HEADER_COMPONENTS = ("Credential", "SignedHeaders", "Signature")


def parse_authorization(authorization: str) -> SigV4Header:
    """``AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...``, read strictly: exactly these three
    components, each once, named exactly. A lenient reading would let unsigned text stand in for the signed scope
    (a ``XCredential=`` component ahead of the real one, say), and the region is read from that scope."""
    algorithm, _, rest = authorization.strip().partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        raise _incomplete(f"Unsupported AWS 'algorithm': '{algorithm}'; use AWS4-HMAC-SHA256.")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        part = part.strip()
        if not part:
            continue
        name, equals, value = part.partition("=")
        if not equals:
            raise _incomplete(
                f"'{part}' not a valid key=value pair (missing equal-sign) in Authorization header: '{authorization}'."
            )
        if name not in _HEADER_COMPONENTS:
            raise _incomplete(
                f"Authorization header has an unknown component '{name}'; a SigV4 header has exactly "
                f"Credential, SignedHeaders and Signature. Authorization={authorization}"
            )
        if name in fields:
            raise _incomplete(f"Authorization header has '{name}' more than once. Authorization={authorization}")
        fields[name] = value.strip()
    missing = [
        f"Authorization header requires '{name}' parameter."
        for name in ("Credential", "Signature", "SignedHeaders")
        if not fields.get(name)
    ]
    if missing:
        raise _incomplete(" ".join(missing) + f" Authorization={authorization}")
    return SigV4Header(
        credential_scope(fields["Credential"]), fields["Credential"], fields["SignedHeaders"], fields["Signature"]
    )


@dataclass(frozen=True)
class Received:
    """What a signature covers, as the request arrived."""

    method: str
    scheme: str
    raw_path: str  # percent-encoded, as sent
    query: list[tuple[str, str]]  # decoded (no '+' → space: SigV4 encodes spaces as %20)
    headers: list[tuple[str, str]]  # names lower-case, in order, repeats kept
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


class SigV4Verifier:
    """Checks AWS4-HMAC-SHA256 signatures (the ``Authorization`` header, or a presigned URL's ``X-Amz-*`` query
    parameters) against ``credentials`` (access key ID → secret access key). botocore's signer recomputes the
    signature from the request as received; only the choice of signed headers (the ones the client named) is ours.
    botocore is imported here, so that it is needed only when credentials are configured."""

    def __init__(self, credentials: dict[str, str], wall: Callable[[], float]):
        try:
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest
            from botocore.compat import HTTPHeaders
            from botocore.credentials import Credentials
        except ImportError as error:
            raise RuntimeError(
                "verifying EC2 API signatures (credentials configured) needs botocore, which is not installed: "
                "pip install botocore (or boto3), or serve the EC2 API without credentials"
            ) from error
        for key, secret in credentials.items():
            if not isinstance(key, str) or not isinstance(secret, str) or not key or not secret:
                raise ValueError("EC2 API credentials map non-empty access key IDs to non-empty secret access keys")
        self.credentials = dict(credentials)
        self.wall = wall
        self._request_class = AWSRequest
        self._credentials_class = Credentials

        class Recompute(SigV4Auth):
            """botocore's SigV4, over exactly the headers the client signed (botocore's own list leaves out some,
            such as User-Agent, that other SDKs sign)."""

            def __init__(self, credentials, service_name, region_name, signed):
                super().__init__(credentials, service_name, region_name)
                self._signed = signed

            def headers_to_sign(self, request):
                headers = HTTPHeaders()
                for name, value in self._signed:
                    headers[name] = value
                return headers

        self._signer_class = Recompute

    # --------------------------------------------------------------------------------------------------------
    def verify(self, received: Received) -> None:
        authorization = received.header("authorization")
        query = dict(received.query)
        if authorization is not None:
            self._verify_header(received, authorization)
        elif "X-Amz-Algorithm" in query or "X-Amz-Signature" in query:
            self._verify_presigned(received, query)
        elif "Signature" in query and "AWSAccessKeyId" in query:
            raise _incomplete(
                "Signature Version 2 is not supported by this endpoint; sign requests with "
                "AWS4-HMAC-SHA256 (Signature Version 4)."
            )
        else:
            raise _missing("AWSAccessKeyId")

    def _verify_header(self, received: Received, authorization: str) -> None:
        header = parse_authorization(authorization)
        stamp = received.header("x-amz-date")
        if stamp is None and received.header("date") is not None:
            try:
                stamp = parsedate_to_datetime(received.header("date")).astimezone(UTC).strftime(SIGV4_TIME)
            except (TypeError, ValueError, OverflowError):  # OverflowError: a year-1 date east of UTC
                stamp = None
        if stamp is None:
            raise _incomplete(
                "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. "
                f"Authorization={authorization}"
            )
        self._check(
            received, received.query, header.credential, header.signed_headers, header.signature, stamp, expires=None
        )

    def _verify_presigned(self, received: Received, query: dict[str, str]) -> None:
        names = (
            "X-Amz-Algorithm",
            "X-Amz-Credential",
            "X-Amz-Date",
            "X-Amz-Expires",
            "X-Amz-SignedHeaders",
            "X-Amz-Signature",
        )
        missing = [name for name in names if not query.get(name)]
        if missing:
            raise _incomplete(
                "A presigned request requires the query parameters "
                + ", ".join(names)
                + "; missing: "
                + ", ".join(missing)
                + "."
            )
        if query["X-Amz-Algorithm"] != "AWS4-HMAC-SHA256":
            raise _incomplete(
                f"Unsupported AWS 'algorithm': '{_text(query['X-Amz-Algorithm'])}'; use AWS4-HMAC-SHA256."
            )
        try:
            expires = int(query["X-Amz-Expires"])
        except ValueError:
            expires = -1
        if not 1 <= expires <= MAX_PRESIGNED_EXPIRES:
            raise _incomplete(f"X-Amz-Expires must be a number of seconds from 1 to {MAX_PRESIGNED_EXPIRES}.")
        signed_query = [(name, value) for name, value in received.query if name != "X-Amz-Signature"]
        self._check(
            received,
            signed_query,
            query["X-Amz-Credential"],
            query["X-Amz-SignedHeaders"],
            query["X-Amz-Signature"],
            query["X-Amz-Date"],
            expires=expires,
        )

    def _check(
        self,
        received: Received,
        query: list[tuple[str, str]],
        credential: str,
        signed_headers: str,
        signature: str,
        stamp: str,
        expires: int | None,
    ) -> None:
        scope = credential_scope(credential)
        access_key, region, service = scope.access_key, scope.region, scope.service
        secret = self.credentials.get(access_key)
        if secret is None:
            raise Ec2Error("AuthFailure", AUTH_FAILURE, 401)
        try:
            signed_at = datetime.strptime(stamp, SIGV4_TIME).replace(tzinfo=UTC)
        except ValueError:
            raise _incomplete(f"Invalid date '{_text(stamp)}': X-Amz-Date must be YYYYMMDD'T'HHMMSS'Z'.") from None
        names = [name.strip().lower() for name in signed_headers.split(";") if name.strip()]
        signed = [(name, value) for name, value in received.headers if name in names]
        if "host" not in names or {name for name, _ in signed} != set(names):
            raise _mismatch()  # a signed header did not arrive (or the host was not signed): it cannot match
        content_hash = received.header("x-amz-content-sha256")
        if content_hash is not None and content_hash != hashlib.sha256(received.body).hexdigest():
            raise _mismatch()  # the body is not the one the client hashed and signed
        request = self._request_class(
            method=received.method,
            url=f"{received.scheme}://signed{received.raw_path}",
            data=received.body,
            params=list(query),
        )
        if content_hash is not None:
            request.headers["X-Amz-Content-SHA256"] = content_hash
        request.context["timestamp"] = stamp
        signer = self._signer_class(self._credentials_class(access_key, secret), service, region, signed)
        expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
        if service != "ec2" or not hmac.compare_digest(expected, signature.strip().lower()):
            raise _mismatch()
        # Against the wall clock (the simulated clock may be anywhere): a signed request within 15 minutes either way;
        # a presigned URL until it expires, and not signed more than 15 minutes ahead.
        now = datetime.fromtimestamp(self.wall(), UTC)
        # Differences, not sums: a validly signed stamp of 9999-12-31 plus the skew would overflow a datetime.
        late = now - signed_at > (MAX_SKEW if expires is None else timedelta(seconds=expires))
        if late or signed_at - now > MAX_SKEW:
            raise Ec2Error("RequestExpired", "Request has expired.")


def _received(request: Request, body: bytes) -> Received:
    raw_path = request.scope.get("raw_path") or request.scope.get("path", "/").encode()
    raw_path = raw_path.decode("latin-1").split("?", 1)[0] or "/"
    query = []
    source = request.scope.get("query_string", b"").decode("latin-1")
    for pair in source.split("&") if source else ():
        name, _, value = pair.partition("=")
        query.append((unquote(name), unquote(value)))
    headers = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in request.headers.raw]
    return Received(request.method, request.scope.get("scheme", "http"), raw_path, query, headers, body)


# ------------------------------------------------------------------------------------------------------- the API
# The browser guard's refusals in EC2's codes: a Host it does not answer to is a bad request; a request from a web
# page of another origin is not authorized.
_GUARD_CODES = {"InvalidHost": "InvalidRequest", "CrossOriginRequest": "UnauthorizedOperation"}


def _guard_error(refusal: Refusal) -> Ec2Error:
    return Ec2Error(_GUARD_CODES.get(refusal.code, refusal.code), refusal.message, refusal.status)


class Ec2Api:
    def __init__(
        self, service: Maintenance, credentials: dict[str, str] | None = None, guard: BrowserGuard | None = None
    ):
        self.service = service
        self.guard = guard
        # None: signatures are not verified (any credentials, or none, are accepted).
        self.verifier = None if credentials is None else SigV4Verifier(credentials, lambda: self.service.wall())
        self._order_key: tuple[int, int] | None = None
        self._order: list[str] = []
        self._actions: dict[str, Callable[[Params, str], Response]] = {
            "DescribeInstanceStatus": self.describe_instance_status,
            "ModifyInstanceEventStartTime": self.modify_instance_event_start_time,
            "CreateInstanceEventWindow": self.create_instance_event_window,
            "DescribeInstanceEventWindows": self.describe_instance_event_windows,
            "ModifyInstanceEventWindow": self.modify_instance_event_window,
            "DeleteInstanceEventWindow": self.delete_instance_event_window,
            "AssociateInstanceEventWindow": self.associate_instance_event_window,
            "DisassociateInstanceEventWindow": self.disassociate_instance_event_window,
            "RegisterInstanceEventNotificationAttributes": self.register_notification_attributes,
            "DeregisterInstanceEventNotificationAttributes": self.deregister_notification_attributes,
            "DescribeInstanceEventNotificationAttributes": self.describe_notification_attributes,
        }

    @property
    def engine(self) -> Engine:
        return self.service.engine

    # ------------------------------------------------------------------------------------------------ dispatch
    async def endpoint(self, request: Request) -> Response:
        request_id = str(uuid.uuid4())
        try:
            refusal = self.guard.check(request.method, request.headers) if self.guard is not None else None
            if refusal is not None:
                raise _guard_error(refusal)
            if request.method not in ("GET", "POST", "HEAD"):
                raise Ec2Error(
                    "MethodNotAllowed", f"The HTTP method {request.method} is not supported; use POST or GET.", 405
                )
            if self.verifier is not None:
                body = await request.body() if request.method == "POST" else b""
                self.verifier.verify(_received(request, body))
            params = await _read_params(request)
            return self.dispatch(params, request_id)
        except Ec2Error as error:
            return _error_response(error, request_id)
        except StoreError as error:
            return _error_response(
                Ec2Error("ServiceUnavailable", f"Nothing was changed; the store failed: {error}", 503), request_id
            )
        except Exception:  # a bug: still answer in EC2's shape (retryable), and say so in the log
            log.exception("EC2 API request %s failed", request_id)
            return _error_response(
                Ec2Error(
                    "InternalError", f"forewarn failed to process the request; see its log (request {request_id}).", 503
                ),
                request_id,
            )

    def dispatch(self, params: Params, request_id: str) -> Response:
        action = params.get("Action")
        if not action:
            raise Ec2Error("MissingAction", "The request must contain the parameter Action")
        handler = self._actions.get(action)
        if handler is None:
            raise Ec2Error("InvalidAction", f"The action {action} is not valid for this web service.")
        version = params.get("Version")
        if not version:
            raise _missing("Version")
        if version != API_VERSION:
            raise Ec2Error("NoSuchVersion", f"The requested version ({version}) of service AmazonEC2 does not exist")
        return handler(params, request_id)

    # ------------------------------------------------------------------------------------------ instance views
    def _ordered_ids(self) -> list[str]:
        """Every instance ID, sorted; rebuilt only when an instance is added or the engine is rebuilt."""
        instances = self.engine.ec2_instances
        key = (id(self.engine), len(instances))
        if key != self._order_key:
            self._order = sorted(instances)
            self._order_key = key
        return self._order

    def _visible(self, instance_id: str, region: str | None, now: datetime) -> bool:
        instance = self.engine.ec2_instances.get(instance_id)
        if instance is None or (region is not None and instance.region != region):
            return False
        state = self.engine.ec2_states[instance_id]
        if state.state is InstanceState.TERMINATED:
            ended = state.terminated_at
            return ended is None or now - ended <= TERMINATED_VISIBLE
        return True

    def _shown_events(self, instance_id: str, now: datetime) -> list[Ec2Event]:
        """Active events, and completed or canceled ones for a week after they ended."""
        return [
            event
            for event in self.engine.ec2_events_of(instance_id)
            if event.state is Ec2EventState.ACTIVE
            or (event.ended_at is not None and now - event.ended_at <= EVENT_HISTORY)
        ]

    def _summaries(self, instance: Ec2Instance, state: Ec2State) -> tuple[Summary, Summary, Summary]:
        """(system, instance, attached EBS) status checks. docs/aws-api.md, "Status checks"."""
        if state.state is not InstanceState.RUNNING:
            return NOT_APPLICABLE, NOT_APPLICABLE, NOT_APPLICABLE
        ebs = OK if instance.root_device == "ebs" else NOT_APPLICABLE
        event = self.engine.ec2_events.get(state.impacted_by) if state.impacted_by else None
        if event is None:
            return OK, OK, ebs
        since = event.started_at
        system = Summary("impaired", "failed", since)
        if event.code in _REBOOTS:
            return system, Summary("initializing", "initializing"), ebs
        return system, Summary("impaired", "failed", since), ebs

    def _view(self, instance_id: str, now: datetime) -> InstanceView:
        instance = self.engine.ec2_instances[instance_id]
        state = self.engine.ec2_states[instance_id]
        system, status, ebs = self._summaries(instance, state)
        return InstanceView(
            instance,
            state,
            availability_zone_id(instance.availability_zone),
            system,
            status,
            ebs,
            self._shown_events(instance_id, now),
        )

    # -------------------------------------------------------------------------------------------------- paging
    def _query_digest(self, filters: list[Filter], include_all: bool, ids: list[str] | None, region: str | None) -> str:
        canonical = json.dumps(
            [
                sorted((f.name, sorted(f.values)) for f in filters),
                include_all,
                sorted(ids) if ids is not None else None,
                region,
            ],
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def _mac(self, payload: str) -> str:
        return hmac.new(self.engine.seed.encode(), payload.encode(), hashlib.sha256).hexdigest()[:16]

    def _token(self, after: str, digest: str) -> str:
        payload = f"1|{after}|{digest}"
        raw = f"{payload}|{self._mac(payload)}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _after(self, token: str, digest: str) -> str:
        """The instance ID a NextToken continues after; InvalidNextToken unless it is ours, for this query."""
        invalid = Ec2Error("InvalidNextToken", "The specified NextToken is not valid.")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            raise invalid from None
        parts = raw.split("|")
        if len(parts) != 4 or parts[0] != "1":
            raise invalid
        payload = "|".join(parts[:3])
        if not hmac.compare_digest(parts[3], self._mac(payload)) or parts[2] != digest:
            raise invalid
        return parts[1]

    # ---------------------------------------------------------------------------------- DescribeInstanceStatus
    def describe_instance_status(self, params: Params, request_id: str) -> Response:
        params.check_known(
            lambda name: (
                name in _DESCRIBE_PARAMS
                or bool(_INSTANCE_ID_N.match(name) or _FILTER_NAME.match(name) or _FILTER_VALUE.match(name))
            )
        )
        ids = list(dict.fromkeys(value for _, value in _indexed(params, _INSTANCE_ID_N)))
        for instance_id in ids:
            if not WELL_FORMED_ID.match(instance_id):
                raise Ec2Error("InvalidInstanceID.Malformed", f'Invalid id: "{instance_id}"')
        if len(ids) > MAX_INSTANCE_IDS:
            raise Ec2Error(
                "InvalidRequest",
                f"{len(ids)} exceeds the maximum number of instance IDs that can be "
                f"specificied ({MAX_INSTANCE_IDS}). Please specify fewer than {MAX_INSTANCE_IDS} instance IDs.",
            )
        filters = self._filters(params)
        max_text = params.get("MaxResults")
        limit = DEFAULT_PAGE
        if max_text is not None:
            if ids:
                raise Ec2Error(
                    "InvalidParameterCombination",
                    "The parameter instancesSet cannot be used with the parameter maxResults",
                )
            try:
                limit = int(max_text.strip())
            except ValueError:
                raise _bad_value("maxResults", max_text, "Expecting an integer.") from None
            if limit < MIN_RESULTS:
                raise _bad_value("maxResults", f" {limit} ", f"Expecting a value greater than {MIN_RESULTS}.")
            if limit > MAX_RESULTS:
                raise _bad_value("maxResults", f" {limit} ", f"Expecting a value less than or equal to {MAX_RESULTS}.")
        include_all = params.boolean("IncludeAllInstances")
        params.boolean("IncludeManagedResources")  # no managed instances exist: checked, then without effect
        dry_run = params.boolean("DryRun")
        digest = self._query_digest(filters, include_all, ids or None, params.region)
        token = params.get("NextToken")
        after = self._after(token, digest) if token else ""
        if dry_run:
            raise _dry_run()

        self.service.catch_up()
        now = self.service.now()
        if ids:
            unknown = [instance_id for instance_id in ids if not self._visible(instance_id, params.region, now)]
            if unknown:
                raise _not_found(unknown)
            candidates = sorted(ids)
        else:
            candidates = self._ordered_ids()
        items: list[str] = []
        next_token = None
        start = bisect.bisect_right(candidates, after) if after else 0
        states = self.engine.ec2_states
        for index in range(start, len(candidates)):
            instance_id = candidates[index]
            if not include_all and states[instance_id].state is not InstanceState.RUNNING:
                continue
            if not ids and not self._visible(instance_id, params.region, now):
                continue
            view = self._view(instance_id, now)
            if not all(f.matches(view) for f in filters):
                continue
            items.append(view.xml())
            if len(items) == limit:
                if index + 1 < len(candidates):
                    next_token = self._token(instance_id, digest)
                break
        body = [f'<DescribeInstanceStatusResponse xmlns="{NAMESPACE}"><requestId>{request_id}</requestId>']
        body.append(
            "<instanceStatusSet>" + "".join(items) + "</instanceStatusSet>" if items else "<instanceStatusSet/>"
        )
        if next_token is not None:
            body.append(f"<nextToken>{next_token}</nextToken>")
        body.append("</DescribeInstanceStatusResponse>")
        return _xml_response("".join(body), request_id)

    def _filters(self, params: Params, make: Callable[[str, list[str]], Filter | None] | None = None) -> list[Filter]:
        """The request's filters; ``make`` builds one from its name and values (None: not a filter of the action)."""
        if make is None:
            make = lambda name, values: Filter(name, values) if name in FILTERS else None  # noqa: E731
        names = {index[0]: value for index, value in _indexed(params, _FILTER_NAME)}
        values: dict[int, list[str]] = {}
        for (number, _), value in _indexed(params, _FILTER_VALUE):
            values.setdefault(number, []).append(value)
        for number in values:
            if number not in names:
                raise _missing(f"Filter.{number}.Name")
        filters = []
        for number in sorted(names):
            name = names[number]
            made = make(name, values.get(number, []))
            if made is None:
                raise Ec2Error("InvalidParameterValue", f"The filter '{name}' is invalid")
            filters.append(made)
        return filters

    # ---------------------------------------------------------------------------- ModifyInstanceEventStartTime
    def modify_instance_event_start_time(self, params: Params, request_id: str) -> Response:
        params.check_known(lambda name: name in _MODIFY_PARAMS)
        given = {}
        for name in ("InstanceId", "InstanceEventId", "NotBefore"):
            value = params.get(name)
            if value is None or not value.strip():
                raise _missing(name)
            given[name] = value.strip()
        instance_id, event_id = given["InstanceId"], given["InstanceEventId"]
        if not WELL_FORMED_ID.match(instance_id):
            raise Ec2Error("InvalidInstanceID.Malformed", f'Invalid id: "{instance_id}"')
        not_before = _parse_time(given["NotBefore"])
        if not_before is None:
            raise _bad_value(
                "NotBefore", given["NotBefore"], "Expecting an ISO 8601 date and time, such as 2019-03-25T10:00:00Z."
            )
        if params.boolean("DryRun"):
            raise _dry_run()
        self.service.catch_up()
        if not self._visible(instance_id, params.region, self.service.now()):
            raise _not_found([instance_id])
        try:
            changes = self.service.perform(lambda engine: engine.reschedule_ec2(instance_id, event_id, not_before))
        except RescheduleRefused as refused:
            raise Ec2Error(
                "InvalidInstanceEventStartTime",
                "The specified scheduled event start time does not meet the requirements for rescheduling "
                f"a scheduled event: {refused}.",
            ) from None
        except NotFound as error:
            if instance_id not in self.engine.ec2_instances:
                raise _not_found([instance_id]) from None
            raise Ec2Error("InvalidInstanceEventIDNotFound", str(error)) from None
        except Conflict as error:
            raise Ec2Error("IncorrectState", str(error)) from None
        except CoreError as error:
            raise Ec2Error("InvalidParameterValue", str(error)) from None
        event = next(change.event for change in changes if isinstance(change, Ec2EventChanged))
        return _xml_response(
            f'<ModifyInstanceEventStartTimeResponse xmlns="{NAMESPACE}"><requestId>{request_id}</requestId>'
            f"{_event_xml(event, 'event')}</ModifyInstanceEventStartTimeResponse>",
            request_id,
        )

    # ------------------------------------------------------------------------------------------- event windows
    def _window_command(self, command: Callable[[Engine], list]) -> EventWindow:
        """Run a window command; the engine's refusals in EC2's codes."""
        try:
            changes = self.service.perform(command)
        except WindowNotFound as error:
            raise Ec2Error(WINDOW_NOT_FOUND, str(error)) from None
        except WindowCombination as error:
            raise Ec2Error("InvalidParameterCombination", str(error)) from None
        except NotFound as error:
            message = str(error)
            code = "InvalidHostID.NotFound" if message.startswith("The host ID") else "InvalidInstanceID.NotFound"
            raise Ec2Error(code, message) from None
        except Conflict as error:
            raise Ec2Error("IncorrectState", str(error)) from None
        except CoreError as error:
            raise Ec2Error("InvalidParameterValue", str(error)) from None
        return next(change.window for change in changes if isinstance(change, Ec2WindowChanged))

    @staticmethod
    def _window_answer(action: str, window: EventWindow, request_id: str, state: str) -> Response:
        return _xml_response(
            f'<{action}Response xmlns="{NAMESPACE}"><requestId>{request_id}</requestId>'
            f"{_window_xml(window, 'instanceEventWindow', state)}</{action}Response>",
            request_id,
        )

    @staticmethod
    def _window_id(params: Params) -> str:
        value = params.get("InstanceEventWindowId")
        if value is None or not value.strip():
            raise _missing("InstanceEventWindowId")
        return value.strip()

    @staticmethod
    def _schedule(params: Params) -> tuple[tuple[TimeRange, ...], str | None]:
        """``TimeRange.N.*`` and ``CronExpression`` (empty: not given); both: InvalidParameterCombination."""
        fields: dict[int, dict[str, str]] = {}
        for (number, field), value in _indexed(params, _TIME_RANGE):
            fields.setdefault(number, {})[field] = value.strip()
        ranges = []
        for number in sorted(fields):
            given = fields[number]
            for field in _TIME_FIELDS:
                if not given.get(field):
                    raise _missing(f"TimeRange.{number}.{field}")
            for field in ("StartWeekDay", "EndWeekDay"):
                if given[field] not in WEEKDAYS:
                    raise _bad_value(
                        f"TimeRange.{number}.{field}", given[field], f"Expecting one of {', '.join(WEEKDAYS)}."
                    )
            hours = {}
            for field in ("StartHour", "EndHour"):
                try:
                    hours[field] = int(given[field])
                except ValueError:
                    raise _bad_value(f"TimeRange.{number}.{field}", given[field], "Expecting an integer.") from None
                if not 0 <= hours[field] <= 23:
                    raise _bad_value(f"TimeRange.{number}.{field}", given[field], "Expecting a value from 0 to 23.")
            ranges.append(TimeRange(given["StartWeekDay"], hours["StartHour"], given["EndWeekDay"], hours["EndHour"]))
        cron = params.get("CronExpression")
        cron = cron.strip() if cron is not None and cron.strip() else None
        if ranges and cron is not None:
            raise Ec2Error(
                "InvalidParameterCombination",
                "The parameter TimeRange cannot be used with the parameter CronExpression",
            )
        return tuple(ranges), cron

    @staticmethod
    def _tag_specifications(params: Params) -> tuple[tuple[str, str], ...]:
        types = {number: value.strip() for (number,), value in _indexed(params, _TAG_SPEC_TYPE)}
        given: dict[int, dict[int, dict[str, str]]] = {}
        for (number, index, field), value in _indexed(params, _TAG_SPEC_TAG):
            given.setdefault(number, {}).setdefault(index, {})[field] = value
        tags: dict[str, str] = {}
        for number in sorted(set(types) | set(given)):
            resource_type = types.get(number)
            if not resource_type:
                raise _missing(f"TagSpecification.{number}.ResourceType")
            if resource_type != WINDOW_RESOURCE_TYPE:
                raise Ec2Error(
                    "InvalidParameterValue",
                    f"'{resource_type}' is not a valid taggable resource type for this operation.",
                )
            for index in sorted(given.get(number, {})):
                where = f"TagSpecification.{number}.Tag.{index}"
                key, value = given[number][index].get("Key"), given[number][index].get("Value", "")
                if not key:
                    raise _missing(f"{where}.Key")
                _check_tag(key, value, where)
                if key in tags:
                    raise Ec2Error("InvalidParameterValue", f"The tag key '{key}' is given more than once.")
                tags[key] = value
        if len(tags) > MAX_TAGS:
            raise Ec2Error(
                "TagLimitExceeded", f"The maximum number of tags ({MAX_TAGS}) per resource has been exceeded."
            )
        return tuple(tags.items())

    @staticmethod
    def _targets(params: Params) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[str, ...]]:
        """``AssociationTarget``: (instance IDs, instance tags, Dedicated Host IDs), each without repeats."""
        instance_ids = tuple(dict.fromkeys(value.strip() for _, value in _indexed(params, _TARGET_INSTANCE)))
        for instance_id in instance_ids:
            if not WELL_FORMED_ID.match(instance_id):
                raise Ec2Error("InvalidInstanceID.Malformed", f'Invalid id: "{instance_id}"')
        hosts = tuple(dict.fromkeys(value.strip() for _, value in _indexed(params, _TARGET_HOST)))
        given: dict[int, dict[str, str]] = {}
        for (number, field), value in _indexed(params, _TARGET_TAG):
            given.setdefault(number, {})[field] = value
        tags = []
        for number in sorted(given):
            key = given[number].get("Key")
            if not key:
                raise _missing(f"AssociationTarget.InstanceTag.{number}.Key")
            tags.append((key, given[number].get("Value", "")))
        if not (instance_ids or hosts or tags):
            raise _missing("AssociationTarget")
        return instance_ids, tuple(dict.fromkeys(tags)), hosts

    # ------------------------------------------------------------------------------- CreateInstanceEventWindow
    def create_instance_event_window(self, params: Params, request_id: str) -> Response:
        params.check_known(
            lambda name: (
                name in ("DryRun", "Name", "CronExpression")
                or bool(_TIME_RANGE.match(name) or _TAG_SPEC_TYPE.match(name) or _TAG_SPEC_TAG.match(name))
            )
        )
        name = params.get("Name") or ""
        ranges, cron = self._schedule(params)
        if not ranges and cron is None:
            raise _missing("TimeRange or CronExpression")
        tags = self._tag_specifications(params)
        if params.boolean("DryRun"):
            raise _dry_run()
        window = self._window_command(lambda engine: engine.create_window(name, ranges, cron, tags))
        return self._window_answer("CreateInstanceEventWindow", window, request_id, "creating")

    # -------------------------------------------------------------------------------- ModifyInstanceEventWindow
    def modify_instance_event_window(self, params: Params, request_id: str) -> Response:
        params.check_known(
            lambda name: (
                name in ("DryRun", "Name", "CronExpression", "InstanceEventWindowId") or bool(_TIME_RANGE.match(name))
            )
        )
        window_id = self._window_id(params)
        name = params.get("Name")
        ranges, cron = self._schedule(params)
        if params.boolean("DryRun"):
            raise _dry_run()
        window = self._window_command(
            lambda engine: engine.modify_window(window_id, name=name, time_ranges=ranges or None, cron=cron)
        )
        return self._window_answer("ModifyInstanceEventWindow", window, request_id, "creating")

    # -------------------------------------------------------------------------------- DeleteInstanceEventWindow
    def delete_instance_event_window(self, params: Params, request_id: str) -> Response:
        params.check_known(lambda name: name in ("DryRun", "ForceDelete", "InstanceEventWindowId"))
        window_id = self._window_id(params)
        force = params.boolean("ForceDelete")
        if params.boolean("DryRun"):
            raise _dry_run()
        window = self._window_command(lambda engine: engine.delete_window(window_id, force))
        return _xml_response(
            f'<DeleteInstanceEventWindowResponse xmlns="{NAMESPACE}"><requestId>{request_id}</requestId>'
            f"<instanceEventWindowState><instanceEventWindowId>{window.window_id}</instanceEventWindowId>"
            "<state>deleting</state></instanceEventWindowState></DeleteInstanceEventWindowResponse>",
            request_id,
        )

    # ------------------------------------------------------------------ Associate/DisassociateInstanceEventWindow
    def associate_instance_event_window(self, params: Params, request_id: str) -> Response:
        return self._association(params, request_id, "AssociateInstanceEventWindow")

    def disassociate_instance_event_window(self, params: Params, request_id: str) -> Response:
        return self._association(params, request_id, "DisassociateInstanceEventWindow")

    def _association(self, params: Params, request_id: str, action: str) -> Response:
        params.check_known(
            lambda name: (
                name in ("DryRun", "InstanceEventWindowId")
                or bool(_TARGET_INSTANCE.match(name) or _TARGET_HOST.match(name) or _TARGET_TAG.match(name))
            )
        )
        window_id = self._window_id(params)
        instance_ids, tags, hosts = self._targets(params)
        if params.boolean("DryRun"):
            raise _dry_run()
        self.service.catch_up()
        if window_id not in self.engine.ec2_windows:
            raise _window_ids_not_found([window_id])
        if action == "AssociateInstanceEventWindow":
            now = self.service.now()
            unknown = [iid for iid in instance_ids if not self._visible(iid, params.region, now)]
            if unknown:
                raise _not_found(unknown)
            command = lambda engine: engine.associate_window(window_id, instance_ids, tags, hosts)  # noqa: E731
        else:
            command = lambda engine: engine.disassociate_window(window_id, instance_ids, tags, hosts)  # noqa: E731
        return self._window_answer(action, self._window_command(command), request_id, "creating")

    # ----------------------------------------------------------------------------- DescribeInstanceEventWindows
    def describe_instance_event_windows(self, params: Params, request_id: str) -> Response:
        params.check_known(
            lambda name: (
                name in ("DryRun", "MaxResults", "NextToken")
                or bool(_WINDOW_ID_N.match(name) or _FILTER_NAME.match(name) or _FILTER_VALUE.match(name))
            )
        )
        ids = list(dict.fromkeys(value.strip() for _, value in _indexed(params, _WINDOW_ID_N)))
        filters = self._filters(params, self._window_filter)
        limit = DEFAULT_WINDOW_PAGE
        max_text = params.get("MaxResults")
        if max_text is not None:
            if ids:
                raise Ec2Error(
                    "InvalidParameterCombination",
                    "The parameter instanceEventWindowIdSet cannot be used with the parameter maxResults",
                )
            try:
                limit = int(max_text.strip())
            except ValueError:
                raise _bad_value("maxResults", max_text, "Expecting an integer.") from None
            if not MIN_WINDOW_RESULTS <= limit <= MAX_WINDOW_RESULTS:
                raise _bad_value(
                    "maxResults", f" {limit} ", f"Expecting a value from {MIN_WINDOW_RESULTS} to {MAX_WINDOW_RESULTS}."
                )
        digest = self._digest(
            "windows", sorted((f.name, sorted(f.values)) for f in filters), sorted(ids) if ids else None
        )
        token = params.get("NextToken")
        after = self._after(token, digest) if token else ""
        if params.boolean("DryRun"):
            raise _dry_run()

        self.service.catch_up()
        windows = self.engine.ec2_windows
        if ids:
            unknown = [window_id for window_id in ids if window_id not in windows]
            if unknown:
                raise _window_ids_not_found(unknown)
            candidates = sorted(ids)
        else:
            candidates = sorted(windows)
        predicates = [self._window_predicate(f) for f in filters]
        items: list[str] = []
        next_token = None
        for index in range(bisect.bisect_right(candidates, after) if after else 0, len(candidates)):
            window = windows[candidates[index]]
            if not all(predicate(window) for predicate in predicates):
                continue
            items.append(_window_xml(window, "item", window.state))
            if len(items) == limit:
                if index + 1 < len(candidates):
                    next_token = self._token(window.window_id, digest)
                break
        body = [f'<DescribeInstanceEventWindowsResponse xmlns="{NAMESPACE}"><requestId>{request_id}</requestId>']
        body.append(
            "<instanceEventWindowSet>" + "".join(items) + "</instanceEventWindowSet>"
            if items
            else "<instanceEventWindowSet/>"
        )
        if next_token is not None:
            body.append(f"<nextToken>{next_token}</nextToken>")
        body.append("</DescribeInstanceEventWindowsResponse>")
        return _xml_response("".join(body), request_id)

    @staticmethod
    def _window_filter(name: str, values: list[str]) -> Filter | None:
        if name in WINDOW_FILTERS:
            return Filter(name, values, WINDOW_FILTERS[name])
        if name == "instance-id":
            return Filter(name, values, lambda window: ())  # matched by _window_predicate
        if name.startswith("tag:") and len(name) > 4:
            key = name[4:]
            return Filter(name, values, lambda window: [value for k, value in window.tags if k == key])
        return None

    def _window_predicate(self, found: Filter) -> Callable[[EventWindow], bool]:
        if found.name != "instance-id":
            return found.matches
        selected = self._windows_of_instances(found)
        return lambda window: window.window_id in selected

    def _windows_of_instances(self, found: Filter) -> set[str]:
        """The windows of the instances an ``instance-id`` filter names: the windows an instance is associated with
        by its ID; an instance associated with none by ID falls back to the windows that take it in through its
        tags or its Dedicated Host (the API reference of DescribeInstanceEventWindows)."""
        windows = list(self.engine.ec2_windows.values())
        direct: dict[str, set[str]] = {}
        for window in windows:
            for instance_id in window.instance_ids:
                direct.setdefault(instance_id, set()).add(window.window_id)
        candidates = set(direct) | set(self.engine.ec2_instances) if found.wild else found.literals
        selected: set[str] = set()
        for instance_id in candidates:
            if not found.matches_text(instance_id):
                continue
            if instance_id in direct:
                selected |= direct[instance_id]
                continue
            instance = self.engine.ec2_instances.get(instance_id)
            if instance is None:
                continue
            for window in windows:
                if any(instance.tags.get(key) == value for key, value in window.instance_tags) or (
                    instance.dedicated_host is not None and instance.dedicated_host in window.dedicated_host_ids
                ):
                    selected.add(window.window_id)
        return selected

    def _digest(self, *parts) -> str:
        canonical = json.dumps(parts, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    # ------------------------------------------------------------------------- event notification attributes
    @staticmethod
    def _tag_attribute(params: Params) -> tuple[bool, tuple[str, ...]]:
        """``InstanceTagAttribute``: (IncludeAllTagsOfInstance, the InstanceTagKey.N). Both true and keys:
        InvalidParameterCombination; neither given: MissingParameter."""
        params.check_known(
            lambda name: (
                name in ("DryRun", "InstanceTagAttribute.IncludeAllTagsOfInstance") or bool(_TAG_KEY_N.match(name))
            )
        )
        include_given = params.get("InstanceTagAttribute.IncludeAllTagsOfInstance") is not None
        include_all = params.boolean("InstanceTagAttribute.IncludeAllTagsOfInstance")
        keys = tuple(dict.fromkeys(value for _, value in _indexed(params, _TAG_KEY_N)))
        if not include_given and not keys:
            raise _missing("InstanceTagAttribute")
        for (number,), key in _indexed(params, _TAG_KEY_N):
            if not key:
                raise _bad_value(f"InstanceTagAttribute.InstanceTagKey.{number}", key, "A tag key cannot be empty.")
            if len(key) > MAX_TAG_KEY:
                raise _bad_value(
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

    def _attributes_command(self, action: str, command: Callable[[Engine], list], request_id: str) -> Response:
        try:
            changes = self.service.perform(command)
        except CoreError as error:
            raise Ec2Error("InvalidParameterValue", str(error)) from None
        attributes = next(
            change.attributes for change in changes if isinstance(change, Ec2NotificationAttributesChanged)
        )
        return self._attributes_answer(action, attributes, request_id)

    @staticmethod
    def _attributes_answer(action: str, attributes: NotificationAttributes, request_id: str) -> Response:
        return _xml_response(
            f'<{action}Response xmlns="{NAMESPACE}"><requestId>{request_id}</requestId>'
            f"{_attributes_xml(attributes)}</{action}Response>",
            request_id,
        )

    def register_notification_attributes(self, params: Params, request_id: str) -> Response:
        include_all, keys = self._tag_attribute(params)
        if not include_all and not keys:
            raise Ec2Error(
                "InvalidParameterValue",
                "Nothing to register: give IncludeAllTagsOfInstance=true or at least one InstanceTagKey",
            )
        if params.boolean("DryRun"):
            raise _dry_run()
        return self._attributes_command(
            "RegisterInstanceEventNotificationAttributes",
            lambda engine: engine.register_notification_attributes(include_all=include_all, keys=keys),
            request_id,
        )

    def deregister_notification_attributes(self, params: Params, request_id: str) -> Response:
        include_all, keys = self._tag_attribute(params)
        if params.boolean("DryRun"):
            raise _dry_run()
        return self._attributes_command(
            "DeregisterInstanceEventNotificationAttributes",
            lambda engine: engine.deregister_notification_attributes(include_all=include_all, keys=keys),
            request_id,
        )

    def describe_notification_attributes(self, params: Params, request_id: str) -> Response:
        params.check_known(lambda name: name == "DryRun")
        if params.boolean("DryRun"):
            raise _dry_run()
        self.service.catch_up()
        return self._attributes_answer(
            "DescribeInstanceEventNotificationAttributes", self.engine.notification_attributes, request_id
        )


def create_ec2_app(
    service: Maintenance, credentials: dict[str, str] | None = None, guard: BrowserGuard | None = None
) -> Starlette:
    """The EC2 Query API over ``service``, as an ASGI app (serve it as an EC2 endpoint).

    ``credentials`` (access key ID → secret access key): verify every request's SigV4 signature against them
    (needs botocore; RuntimeError here when it is missing). None (the default): accept any credentials, or none.
    ``guard``: refuse what web pages send (browser_guard.py) before anything else."""
    api = Ec2Api(service, credentials, guard)
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]  # other methods are answered in EC2's shape
    app = Starlette(routes=[Route("/{path:path}", api.endpoint, methods=methods)])
    # Starlette's path pattern does not match a newline: a path with %0A in it would get a plain-text 404.
    app.router.default = request_response(api.endpoint)
    app.state.ec2 = api
    return app
