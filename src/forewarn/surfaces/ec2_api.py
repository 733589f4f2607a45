"""The Amazon EC2 Query API, the actions about scheduled events: ``DescribeInstanceStatus`` and
``ModifyInstanceEventStartTime`` (seed 004; reference aws.md 2.1-2.3 and 2.6).

Served on its own listener as an EC2 endpoint, so boto3 and the aws CLI work against it unmodified
(``endpoint_url="http://127.0.0.1:PORT"``). The wire is EC2's query protocol: ``POST /`` with a form-encoded body
(``Action=...&Version=2016-11-15&...``) or ``GET`` with the same parameters in the query string; answers are XML in the
``http://ec2.amazonaws.com/doc/2016-11-15/`` namespace, errors ``<Response><Errors><Error>`` with ``RequestID``.

Reads take the engine's state as it is (after applying deadlines that fell due); the one write,
ModifyInstanceEventStartTime, goes through :meth:`Maintenance.perform`, so it is committed before the answer leaves.
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
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from forewarn.core.ec2 import Ec2Code, Ec2Event, Ec2EventState, Ec2Instance, Ec2State, InstanceState
from forewarn.core.ec2_engine import Ec2EventChanged, RescheduleRefused
from forewarn.core.engine import Engine
from forewarn.core.errors import Conflict, CoreError, NotFound
from forewarn.service.runtime import Maintenance
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
_AUTH_PARAMS = frozenset({
    "AWSAccessKeyId", "Signature", "SignatureMethod", "SignatureVersion", "Timestamp", "Expires", "SecurityToken",
    "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature",
    "X-Amz-Security-Token", "X-Amz-Content-Sha256",
})
_CREDENTIAL_REGION = re.compile(r"Credential=[^/,\s]*/\d{8}/([^/,\s]+)/")

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
    moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{moment.microsecond // 1000:03d}Z"


def _xml_response(body: str, request_id: str, status: int = 200) -> Response:
    return Response(
        '<?xml version="1.0" encoding="UTF-8"?>\n' + body, status_code=status, media_type=CONTENT_TYPE,
        headers={"x-amzn-RequestId": request_id, "Cache-Control": "no-cache, no-store"},
    )


def _error_response(error: Ec2Error, request_id: str) -> Response:
    return _xml_response(
        f"<Response><Errors><Error><Code>{_text(error.code)}</Code><Message>{_text(error.message)}</Message>"
        f"</Error></Errors><RequestID>{request_id}</RequestID></Response>", request_id, error.status)


def _event_xml(event: Ec2Event, tag: str) -> str:
    parts = [f"<{tag}><instanceEventId>{event.event_id}</instanceEventId><code>{event.code.value}</code>"
             f"<description>{_text(event.shown_description)}</description><notBefore>{_time(event.not_before)}</notBefore>"]
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
        return (f"<{tag}><status>{self.status}</status><details><item><name>reachability</name>"
                f"<status>{self.reachability}</status>{since}</item></details></{tag}>")


OK = Summary("ok", "passed")
NOT_APPLICABLE = Summary("not-applicable")


_DIRECTIONS = {"east": "e", "west": "w", "north": "n", "south": "s", "central": "c", "northeast": "ne",
               "northwest": "nw", "southeast": "se", "southwest": "sw", "gov": "g", "iso": "i", "isob": "ib"}


def _region_code(region: str) -> str:
    """us-east-1 → use1, ap-southeast-2 → apse2, us-gov-west-1 → usgw1 (the prefixes of real zone IDs)."""
    parts = region.split("-")
    return parts[0] + "".join(_DIRECTIONS.get(part, part[:1]) for part in parts[1:-1]) + parts[-1]


def availability_zone_id(zone: str) -> str:
    """A zone ID derived from the zone name: the zone's letter gives its number (us-east-1a → use1-az1).

    Real accounts map names to IDs in a per-account shuffle (the docs' us-east-1a is use1-az4); without an account to
    copy from, the identity order is the choice. Local Zones: us-west-2-lax-1a → usw2-lax1-az1."""
    match = re.match(r"^([a-z]+(?:-[a-z]+)+-\d+)(?:-([a-z]+)-(\d+))?([a-z])$", zone)
    if match is None:
        return f"{zone}-az1"
    region, local, local_number, letter = match.groups()
    base = _region_code(region) + (f"-{local}{local_number}" if local else "")
    return f"{base}-az{ord(letter) - ord('a') + 1}"


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
        moment = datetime.fromisoformat(text.strip())
        return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None


class Filter:
    """One ``Filter.N``: its values are OR-ed. A value may use ``*`` (any characters) and ``?`` (one character);
    a backslash makes the next character literal. A timestamp filter's value without wildcards is compared as an
    instant, so ``2026-05-04T22:12:00Z`` matches ``2026-05-04T22:12:00.000Z``."""

    def __init__(self, name: str, values: list[str]):
        self.name = name
        self.values = values
        self.strings, timestamps = FILTERS[name]
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

    def matches(self, view: InstanceView) -> bool:
        for text in self.strings(view):
            if text in self.literals or any(_wildcard_match(p, text) for p in self.patterns):
                return True
        return False


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
                raise Ec2Error("InvalidParameterValue",
                               f"The request body must be application/x-www-form-urlencoded, not '{content_type}'")
            sources.append(body.decode("utf-8", errors="replace"))
    for source in sources:
        try:
            pairs = parse_qsl(source, keep_blank_values=True, encoding="utf-8", errors="replace",
                              max_num_fields=MAX_FIELDS)
        except ValueError:
            raise Ec2Error("MalformedQueryString",
                           f"The request has more than {MAX_FIELDS} parameters") from None
        for name, value in pairs:
            values.setdefault(name, value)
    match = _CREDENTIAL_REGION.search(request.headers.get("authorization", ""))
    if match is None and "X-Amz-Credential" in values:  # a presigned URL
        match = _CREDENTIAL_REGION.search("Credential=" + values["X-Amz-Credential"])
    return Params(values, match.group(1) if match else None)


_INSTANCE_ID_N = re.compile(r"^InstanceId\.([1-9]\d{0,5})$")
_FILTER_NAME = re.compile(r"^Filter\.([1-9]\d{0,5})\.Name$")
_FILTER_VALUE = re.compile(r"^Filter\.([1-9]\d{0,5})\.Value\.([1-9]\d{0,5})$")
_DESCRIBE_PARAMS = frozenset({"DryRun", "MaxResults", "NextToken", "IncludeAllInstances", "IncludeManagedResources"})
_MODIFY_PARAMS = frozenset({"DryRun", "InstanceId", "InstanceEventId", "NotBefore"})


def _indexed(params: Params, pattern: re.Pattern) -> list[tuple[tuple[int, ...], str]]:
    found = []
    for name, value in params.values.items():
        match = pattern.match(name)
        if match:
            found.append((tuple(int(g) for g in match.groups()), value))
    return sorted(found)


# ------------------------------------------------------------------------------------------------------- the API
class Ec2Api:
    def __init__(self, service: Maintenance):
        self.service = service
        self._order_key: tuple[int, int] | None = None
        self._order: list[str] = []
        self._actions: dict[str, Callable[[Params, str], Response]] = {
            "DescribeInstanceStatus": self.describe_instance_status,
            "ModifyInstanceEventStartTime": self.modify_instance_event_start_time,
        }

    @property
    def engine(self) -> Engine:
        return self.service.engine

    # ------------------------------------------------------------------------------------------------ dispatch
    async def endpoint(self, request: Request) -> Response:
        request_id = str(uuid.uuid4())
        try:
            if request.method not in ("GET", "POST", "HEAD"):
                raise Ec2Error("MethodNotAllowed", f"The HTTP method {request.method} is not supported; use POST or GET.",
                               405)
            params = await _read_params(request)
            return self.dispatch(params, request_id)
        except Ec2Error as error:
            return _error_response(error, request_id)
        except StoreError as error:
            return _error_response(Ec2Error("ServiceUnavailable", f"Nothing was changed; the store failed: {error}",
                                            503), request_id)
        except Exception:  # a bug: still answer in EC2's shape (retryable), and say so in the log
            log.exception("EC2 API request %s failed", request_id)
            return _error_response(Ec2Error("InternalError", "forewarn failed to process the request; see its log "
                                            f"(request {request_id}).", 503), request_id)

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
        return [event for event in self.engine.ec2_events_of(instance_id)
                if event.state is Ec2EventState.ACTIVE
                or (event.ended_at is not None and now - event.ended_at <= EVENT_HISTORY)]

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
        return InstanceView(instance, state, availability_zone_id(instance.availability_zone), system, status, ebs,
                            self._shown_events(instance_id, now))

    # -------------------------------------------------------------------------------------------------- paging
    def _query_digest(self, filters: list[Filter], include_all: bool, ids: list[str] | None,
                      region: str | None) -> str:
        canonical = json.dumps([sorted((f.name, sorted(f.values)) for f in filters), include_all,
                                sorted(ids) if ids is not None else None, region], separators=(",", ":"))
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
        params.check_known(lambda name: name in _DESCRIBE_PARAMS or bool(
            _INSTANCE_ID_N.match(name) or _FILTER_NAME.match(name) or _FILTER_VALUE.match(name)))
        ids = list(dict.fromkeys(value for _, value in _indexed(params, _INSTANCE_ID_N)))
        for instance_id in ids:
            if not WELL_FORMED_ID.match(instance_id):
                raise Ec2Error("InvalidInstanceID.Malformed", f'Invalid id: "{instance_id}"')
        if len(ids) > MAX_INSTANCE_IDS:
            raise Ec2Error("InvalidRequest", f"{len(ids)} exceeds the maximum number of instance IDs that can be "
                           f"specificied ({MAX_INSTANCE_IDS}). Please specify fewer than {MAX_INSTANCE_IDS} instance IDs.")
        filters = self._filters(params)
        max_text = params.get("MaxResults")
        limit = DEFAULT_PAGE
        if max_text is not None:
            if ids:
                raise Ec2Error("InvalidParameterCombination",
                               "The parameter instancesSet cannot be used with the parameter maxResults")
            try:
                limit = int(max_text.strip())
            except ValueError:
                raise _bad_value("maxResults", max_text, "Expecting an integer.") from None
            if limit < MIN_RESULTS:
                raise _bad_value("maxResults", f" {limit} ", f"Expecting a value greater than {MIN_RESULTS}.")
            if limit > MAX_RESULTS:
                raise _bad_value("maxResults", f" {limit} ",
                                 f"Expecting a value less than or equal to {MAX_RESULTS}.")
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
        body.append("<instanceStatusSet>" + "".join(items) + "</instanceStatusSet>" if items else "<instanceStatusSet/>")
        if next_token is not None:
            body.append(f"<nextToken>{next_token}</nextToken>")
        body.append("</DescribeInstanceStatusResponse>")
        return _xml_response("".join(body), request_id)

    def _filters(self, params: Params) -> list[Filter]:
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
            if name not in FILTERS:
                raise Ec2Error("InvalidParameterValue", f"The filter '{name}' is invalid")
            filters.append(Filter(name, values.get(number, [])))
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
            raise _bad_value("NotBefore", given["NotBefore"],
                             "Expecting an ISO 8601 date and time, such as 2019-03-25T10:00:00Z.")
        if params.boolean("DryRun"):
            raise _dry_run()
        self.service.catch_up()
        if not self._visible(instance_id, params.region, self.service.now()):
            raise _not_found([instance_id])
        try:
            changes = self.service.perform(lambda engine: engine.reschedule_ec2(instance_id, event_id, not_before))
        except RescheduleRefused as refused:
            raise Ec2Error("InvalidInstanceEventStartTime",
                           "The specified scheduled event start time does not meet the requirements for rescheduling "
                           f"a scheduled event: {refused}.") from None
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
            f"{_event_xml(event, 'event')}</ModifyInstanceEventStartTimeResponse>", request_id)


def create_ec2_app(service: Maintenance) -> Starlette:
    """The EC2 Query API over ``service``, as an ASGI app (serve it as an EC2 endpoint)."""
    api = Ec2Api(service)
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]  # other methods are answered in EC2's shape
    app = Starlette(routes=[Route("/{path:path}", api.endpoint, methods=methods)])
    app.state.ec2 = api
    return app
