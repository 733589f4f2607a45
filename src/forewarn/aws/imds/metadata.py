"""Amazon EC2 instance metadata service (IMDSv1 and IMDSv2) for the simulated EC2 instances.

A synchronous handler served by ``server/http1.py``, like :class:`~forewarn.azure.imds.scheduled_events.AzureImds`: paths
``/``, ``/latest...`` and ``/<version>...``. A GET resolves the caller, checks its token (a dict lookup), and returns
the response rendered once per (instance, path) since the instance's last change; nothing is encoded per request.
What is kept is dropped once a change to the instance is committed (announced after its commit), so a GET answers what
the database holds without waiting for a group commit under way (app/runtime.py); only a miss reads the engine.

Wire rules (the AWS EC2 User Guide's "Retrieve instance metadata" and IMDSv2 pages, and the Amazon EC2 Metadata
Mock, aws/amazon-ec2-metadata-mock): everything is
``text/plain``; listings are newline-separated with sub-trees ending in ``/`` and no final newline; maintenance
events are JSON in the real IMDS pretty-printed style (``[ {`` / two-space indent / ``"Key" : "value"``); error
pages are the real XHTML pages. Every choice is listed, with its source, in docs/aws-imds.md.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import logging
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.aws.changes import Ec2EventChanged, Ec2StateChanged
from forewarn.aws.component import Ec2Component
from forewarn.aws.model import Ec2Event, Ec2EventState, Ec2Instance, Ec2State, InstanceState, availability_zone_id
from forewarn.core.changes import Rebuilt
from forewarn.net.browser_guard import Refusal
from forewarn.net.callers import CallerResolver, UnknownCaller
from forewarn.net.http import DROP, RENDERED_AS_LANDED, Deferred, Fresh, Request, Response

log = logging.getLogger("forewarn.ec2imds")
_IMDS_PATH = re.compile(r"^/($|latest(/|$)|\d{4}-\d{2}-\d{2}(/|$)|1\.0(/|$))")

TEXT = b"text/plain"  # "All instance metadata is returned as text (HTTP content type text/plain)" (AWS user guide)
HTML = b"text/html"  # error pages (as the AWS-behaviour mocks send them)
SERVER = (b"server", b"EC2ws")  # what real IMDS sends (kubernetes-sigs/cluster-api-provider-aws#1609)
_PLAIN_HEADERS = (SERVER,)

TOKEN_PATH = "/latest/api/token"
HISTORY_PATH = "/meta-data/events/maintenance/history"  # after a version: the one answer the database serves too
TOKEN_HEADER = b"x-aws-ec2-metadata-token"
TTL_HEADER = b"x-aws-ec2-metadata-token-ttl-seconds"
MAX_TTL = 21600
# Rendered answers kept per instance; beyond this, answers are rendered per request (bounds memory under scans).
MAX_PATHS_PER_INSTANCE = 4096

# The versions the AWS user guide's example lists ("Get the available versions of the instance metadata").
VERSIONS = (
    "1.0",
    "2007-01-19",
    "2007-03-01",
    "2007-08-29",
    "2007-10-10",
    "2007-12-15",
    "2008-02-01",
    "2008-09-01",
    "2009-04-04",
    "2011-01-01",
    "2011-05-01",
    "2012-01-12",
    "2014-02-25",
    "2014-11-05",
    "2015-10-20",
    "2016-04-19",
    "2016-06-30",
    "2016-09-02",
    "2018-03-28",
    "2018-08-17",
    "2018-09-24",
    "2019-10-01",
    "2020-10-27",
    "2021-01-03",
    "2021-03-23",
    "latest",
)
_DATED = frozenset(VERSIONS[:-1])
_VERSIONS_AND_LATEST = frozenset(VERSIONS)


def error_page(title: str) -> bytes:
    """The XHTML page real IMDS answers errors with (as aws/amazon-ec2-metadata-mock serves it), byte for byte, no
    final newline."""
    return (
        '<?xml version="1.0" encoding="iso-8859-1"?>\n'
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"\n'
        '\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
        '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
        " <head>\n"
        f"  <title>{title}</title>\n"
        " </head>\n"
        " <body>\n"
        f"  <h1>{title}</h1>\n"
        " </body>\n"
        "</html>"
    ).encode("latin-1")


NOT_FOUND_PAGE = error_page("404 - Not Found")
BAD_REQUEST_PAGE = error_page("400 - Missing or Invalid Parameters")
UNAUTHORIZED_PAGE = error_page("401 - Unauthorized")
FORBIDDEN_PAGE = error_page("403 - Forbidden")
METHOD_NOT_ALLOWED_PAGE = error_page("405 - Method Not Allowed")

NOT_FOUND: Response = (404, NOT_FOUND_PAGE, HTML, _PLAIN_HEADERS)
BAD_REQUEST: Response = (400, BAD_REQUEST_PAGE, HTML, _PLAIN_HEADERS)
UNAUTHORIZED: Response = (401, UNAUTHORIZED_PAGE, HTML, _PLAIN_HEADERS)
FORBIDDEN: Response = (403, FORBIDDEN_PAGE, HTML, _PLAIN_HEADERS)
ALLOW_METADATA = b"GET, HEAD, OPTIONS"
ALLOW_TOKEN = b"OPTIONS, PUT"  # real IMDS's answer to OPTIONS /latest/api/token (cluster-api-provider-aws#1609)
METHOD_NOT_ALLOWED: Response = (405, METHOD_NOT_ALLOWED_PAGE, HTML, (SERVER, (b"allow", ALLOW_METADATA)))
TOKEN_METHOD_NOT_ALLOWED: Response = (405, METHOD_NOT_ALLOWED_PAGE, HTML, (SERVER, (b"allow", ALLOW_TOKEN)))
OPTIONS_METADATA: Response = (200, b"", TEXT, (SERVER, (b"allow", ALLOW_METADATA)))
OPTIONS_TOKEN: Response = (200, b"", TEXT, (SERVER, (b"allow", ALLOW_TOKEN)))
_DROPPED: Response = (DROP, b"", TEXT, ())


@dataclass(frozen=True)
class Ec2ImdsSettings:
    """How the EC2 metadata service behaves; the instance metadata options of real EC2, for the whole fleet."""

    # HttpTokens: "optional" (IMDSv1 and v2; a token that is sent must be valid) or "required" (IMDSv2 only).
    tokens: str = "optional"
    # HttpEndpoint: "disabled" answers every request 403, as real IMDS does when it is turned off.
    endpoint: str = "enabled"
    # InstanceMetadataTags: whether meta-data/tags/instance exists (real default: disabled; ours: enabled, since a
    # fleet file's tags are there to be read).
    instance_tags: bool = True
    # Whether maintenance events carry NotBeforeDeadline (never seen in real IMDS samples).
    not_before_deadline: bool = False
    # "answer": an instance that is stopped, terminated or in the middle of a reboot still gets answers; "drop": its
    # connections are dropped unanswered, as a real instance that is down cannot ask.
    while_down: str = "answer"
    # IMDSv2 tokens kept per instance: beyond this, the instance's own oldest token is dropped (AWS documents no
    # count, only per-instance query throttling; our choice, docs/aws-imds.md).
    tokens_per_instance: int = 5_000
    # Tokens kept for the whole fleet (about 250 bytes each): beyond this, the oldest token of the instance holding
    # the most is dropped, so one instance's flood never costs a quieter instance its token.
    tokens_total: int = 200_000

    def __post_init__(self) -> None:
        if not 1 <= self.tokens_per_instance <= self.tokens_total:
            raise ValueError("tokens_per_instance must be at least 1 and at most tokens_total")
        for name, value, allowed in (
            ("tokens", self.tokens, ("optional", "required")),
            ("endpoint", self.endpoint, ("enabled", "disabled")),
            ("while_down", self.while_down, ("answer", "drop")),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")


# A node of an instance's metadata tree: a directory (name -> node, in listing order), a value, or a value rendered
# on first request.
Node = dict | str | Callable[[], str]


class Ec2Imds:
    """The EC2 metadata endpoints as a synchronous handler: :class:`Request` in, :data:`Response` out."""

    def __init__(self, service: Maintenance, resolver: CallerResolver, settings: Ec2ImdsSettings = Ec2ImdsSettings()):
        self.service = service
        self.resolver = resolver
        self.settings = settings
        self._required = settings.tokens == "required"
        self._disabled = settings.endpoint == "disabled"
        self._drop_down = settings.while_down == "drop"
        self._answers: dict[str, dict[str, Response]] = {}  # instance id -> path -> response
        self._trees: dict[str, dict[str, dict]] = {}  # instance id -> version -> its version-level tree
        self._down: dict[str, bool] = {}  # instance id -> whether it is down (``while_down``: asked on every GET)
        self._tokens: dict[bytes, tuple[str, float]] = {}  # token -> (instance id, wall time it expires)
        self._tokens_of: dict[str, dict[bytes, float]] = {}  # instance id -> its tokens, oldest first
        self._swept_at: dict[str | None, float] = {}  # instance id (None: the fleet) -> wall time of its last sweep
        service.subscribe(self._on_change)

    # ------------------------------------------------------------------------------------------ read model
    def _on_change(self, changes) -> None:
        if isinstance(changes[0], Rebuilt):  # the service rebuilt its engine: forget everything
            self._answers.clear()
            self._trees.clear()
            self._down.clear()
            return
        kept: dict[str, list[str]] = {}  # the instances whose answers were kept, with the paths asked
        for change in changes:
            if isinstance(change, Ec2EventChanged):
                instance_id = change.event.instance_id
            elif isinstance(change, Ec2StateChanged):
                instance_id = change.state.instance_id
            else:
                continue
            answers = self._answers.pop(instance_id, None)
            self._trees.pop(instance_id, None)
            down = self._down.pop(instance_id, None)
            if (answers or down is not None) and len(kept) < RENDERED_AS_LANDED:
                kept[instance_id] = [*kept.get(instance_id, ()), *(answers or ())]
        for instance_id, paths in kept.items():  # the engine holds what was committed: render them now
            for path in paths:
                self.answer(instance_id, path)
            if self._drop_down:
                self._is_down(instance_id)

    def answer(self, instance_id: str, path: str) -> Response:
        """The GET response for an instance and a path, rendered once per change of the instance."""
        per_instance = self._answers.get(instance_id)
        if per_instance is None:
            per_instance = self._answers[instance_id] = {}
        found = per_instance.get(path)
        if found is None:
            found = self._render(instance_id, path)
            if len(per_instance) < MAX_PATHS_PER_INSTANCE:
                per_instance[path] = found
        return found

    def document(self, instance_id: str, path: str) -> bytes:
        """The bytes an instance gets for a path (``/latest/meta-data/events/maintenance/scheduled``)."""
        return self.answer(instance_id, path)[1]

    # ------------------------------------------------------------------------------------------- requests
    # ---------------------------------------------------------------- one of the listener's surfaces (cloud.py)
    def claims(self, path: str) -> bool:
        """IMDS's paths: /latest, a dated version, /1.0, and the root that lists them (//latest/... too)."""
        return _IMDS_PATH.match(path if "//" not in path else collapse_slashes(path)) is not None

    def refuse(self, path: str, refusal: Refusal) -> Response:
        return browser_refusal(refusal)

    def serve(self, request: Request) -> Response | Deferred:
        """``handle``, with a read that meets the engine waiting to be rebuilt from a database out of reach
        (app/runtime.py) answered as a retryable 503 with the server's header."""
        try:
            return self.handle(request)
        except Unavailable as error:
            log.error("%s %s: %s", request.method, request.path, error)
            return (503, b"Service Unavailable\n", TEXT, (SERVER,))

    def handle(self, request: Request) -> Response | Deferred:
        if "//" in request.path:  # clients that build paths by concatenation; real IMDS serves them
            request.path = collapse_slashes(request.path)
        method = request.method
        if method == "GET" or method == "HEAD":
            if self._disabled:
                return FORBIDDEN
            path = request.path
            if path == TOKEN_PATH:
                return TOKEN_METHOD_NOT_ALLOWED
            token = None
            for key, value in request.headers:
                if key == TOKEN_HEADER:
                    token = value
                    break
            instance = self._caller(request)
            if instance is None:
                return NOT_FOUND
            instance_id = instance.instance_id
            if token:  # an empty header counts as no token
                held = self._tokens.get(token)
                if held is None or held[0] != instance_id or self.service.wall() >= held[1]:
                    return UNAUTHORIZED
            elif self._required:
                return UNAUTHORIZED
            service = self.service
            if service.wall() >= service.due_wall:
                try:
                    service.catch_up()
                except Unavailable as error:  # serve the last committed state; the timer retries the deadline
                    log.error("applying a due deadline failed: %s", error)
            if self._reads_engine(instance_id, path):
                # What it needs is to be read from the engine, which a transaction under way may hold ahead of the
                # database: this answer waits for it to land, not the event loop with every other request.
                answer = Deferred()
                if service.after_landing(lambda: self._answer_later(answer, request)):
                    return answer
            if self._drop_down and self._is_down(instance_id):
                return _DROPPED
            found = self.answer(instance_id, path)
            if method == "HEAD":
                return (found[0], b"", found[2], found[3])
            return found
        if self._disabled:
            return FORBIDDEN
        if method == "PUT":
            return self._put(request)
        if method == "OPTIONS":
            return OPTIONS_TOKEN if request.path == TOKEN_PATH else OPTIONS_METADATA
        return TOKEN_METHOD_NOT_ALLOWED if request.path == TOKEN_PATH else METHOD_NOT_ALLOWED

    def _reads_engine(self, instance_id: str, path: str) -> bool:
        """Whether answering this GET reads the engine: its answer, or (down instances dropped) whether the instance
        is down, is not kept yet."""
        if self._drop_down and instance_id not in self._down:
            return True
        answers = self._answers.get(instance_id)
        if answers is not None and path in answers:
            return False
        if path == "/" or not path.startswith("/"):
            return False  # the versions' list, or a 404: neither reads the engine
        if path.rstrip("/").endswith(HISTORY_PATH):
            return True  # read from the database as well, after the transaction under way
        trees = self._trees.get(instance_id)
        return trees is None or path.split("/", 2)[1] not in trees  # a path rendered on its kept tree reads none

    def _answer_later(self, answer: Deferred, request: Request) -> None:
        then = self.serve(request)
        if isinstance(then, Deferred):  # another transaction under way by now
            then.attach(answer.resolve)
        else:
            answer.resolve(then)

    def _caller(self, request: Request) -> Ec2Instance | None:
        """The EC2 instance asking, or None (unknown callers and Azure VMs get a 404)."""
        try:
            machine = self.resolver.resolve(request.local, request.peer)
        except UnknownCaller:
            return None
        return machine if machine.__class__ is Ec2Instance else None

    def _is_down(self, instance_id: str) -> bool:
        """Whether the instance is stopped, terminated or in the middle of a reboot, as committed."""
        found = self._down.get(instance_id)
        if found is None:
            state = self.service.settled_engine().component(Ec2Component).ec2_states.get(instance_id)
            found = state is not None and (state.state is not InstanceState.RUNNING or state.impacted_by is not None)
            self._down[instance_id] = found
        return found

    # ------------------------------------------------------------------------------------------------ IMDSv2
    def _put(self, request: Request) -> Response:
        path = request.path
        if path != TOKEN_PATH:
            version = path.split("/", 2)[1] if path.startswith("/") else ""
            # "PUT requests to any version-specific path, for example /2021-03-23/api/token, will result in the
            # metadata service returning 403 Forbidden errors" (AWS user guide).
            return FORBIDDEN if version in _DATED else METHOD_NOT_ALLOWED
        ttl_value = None
        for key, value in request.headers:
            if key == b"x-forwarded-for":
                return FORBIDDEN  # IMDSv2 refuses token requests that went through a proxy
            if key == TTL_HEADER and ttl_value is None:
                ttl_value = value
        instance = self._caller(request)
        if instance is None:
            return NOT_FOUND
        ttl = parse_ttl(ttl_value)
        if ttl is None:
            return BAD_REQUEST
        token = self._issue(instance.instance_id, ttl)
        return Fresh((200, token, TEXT, (SERVER, (TTL_HEADER, str(ttl).encode()))))

    def _issue(self, instance_id: str, ttl: int) -> bytes:
        now = self.service.wall()
        own = self._tokens_of.get(instance_id)
        if own is None:
            own = self._tokens_of[instance_id] = {}
        if len(own) >= self.settings.tokens_per_instance:
            self._sweep(instance_id, own, now)
            if len(own) >= self.settings.tokens_per_instance:
                self._drop_oldest(instance_id, own)
        if len(self._tokens) >= self.settings.tokens_total:
            self._sweep_fleet(now)
            if len(self._tokens) >= self.settings.tokens_total:
                holder = max(self._tokens_of, key=lambda held_by: len(self._tokens_of[held_by]))
                self._drop_oldest(holder, self._tokens_of[holder])
        token = base64.b64encode(secrets.token_bytes(42))
        expires = now + ttl
        self._tokens[token] = (instance_id, expires)
        own[token] = expires
        self._tokens_of[instance_id] = own  # a fleet sweep may have let go of the (then empty) dict
        log.debug("token for %s, %s s", instance_id, ttl)
        return token

    def _sweep(self, instance_id: str, own: dict[bytes, float], now: float) -> None:
        """Forget an instance's expired tokens; at most once a wall second per instance, so that a flood of token
        requests from a full instance costs one dict operation each, not a scan."""
        if now < self._swept_at.get(instance_id, 0.0) + 1.0:
            return
        self._swept_at[instance_id] = now
        for token in [token for token, expires in own.items() if now >= expires]:
            del own[token]
            del self._tokens[token]

    def _sweep_fleet(self, now: float) -> None:
        if now < self._swept_at.get(None, 0.0) + 1.0:
            return
        self._swept_at[None] = now
        for instance_id, own in list(self._tokens_of.items()):
            self._swept_at.pop(instance_id, None)
            self._sweep(instance_id, own, now)
            if not own:
                del self._tokens_of[instance_id]
                self._swept_at.pop(instance_id, None)

    def _drop_oldest(self, instance_id: str, own: dict[bytes, float]) -> None:
        oldest = next(iter(own))
        del own[oldest]
        del self._tokens[oldest]
        log.debug("%s holds too many tokens: its oldest is dropped", instance_id)

    def tokens_held(self, instance_id: str) -> int:
        """How many tokens are kept for an instance (expired ones included until they are swept)."""
        return len(self._tokens_of.get(instance_id, ()))

    # ------------------------------------------------------------------------------------------------ paths
    def _render(self, instance_id: str, path: str) -> Response:
        if path == "/":
            return _text("\n".join(VERSIONS))
        parts = path.split("/")  # "/latest/meta-data/" -> ["", "latest", "meta-data", ""]
        if len(parts) < 2 or parts[0] != "" or parts[1] not in _VERSIONS_AND_LATEST:
            return NOT_FOUND
        rest = parts[2:]
        if rest and rest[-1] == "":
            rest.pop()  # a trailing slash: a directory's listing, or (as real IMDS answers it) a value
        node: Node = self._tree(instance_id, parts[1])
        for name in rest:
            if not isinstance(node, dict) or name not in node:
                return NOT_FOUND
            node = node[name]
        if isinstance(node, dict):
            if not rest:  # the version level lists "dynamic" and "meta-data" without slashes, as real IMDS does
                return _text("\n".join(node))
            return _text("\n".join(name + "/" if isinstance(child, dict) else name for name, child in node.items()))
        return _text(node() if callable(node) else node)

    def _tree(self, instance_id: str, version: str) -> dict:
        per_version = self._trees.get(instance_id)
        if per_version is None:
            per_version = self._trees[instance_id] = {}
        found = per_version.get(version)
        if found is None:
            component = self.service.settled_engine().component(Ec2Component)
            instance = component.ec2_instances[instance_id]
            state = component.ec2_states[instance_id]
            found = {}
            if version >= DYNAMIC_SINCE:
                found["dynamic"] = dynamic_tree(instance, state)
            found["meta-data"] = self._meta_data(instance, state, component.ec2_events_of(instance_id), version)
            per_version[version] = found
        return found

    def _meta_data(self, instance: Ec2Instance, state: Ec2State, events: list[Ec2Event], version: str) -> dict:
        """The ``meta-data/`` tree as ``version`` shows it: a category appears from the version that introduced it
        (the AWS page "Instance metadata categories"; version strings compare as dates, "1.0" first, "latest"
        last). Listings are alphabetical, as real IMDS sends them."""

        def since(date: str) -> bool:
            return version >= date

        hostname = local_hostname(instance)
        network = network_of(instance)
        tree: dict = {
            "ami-id": instance.ami_id,
            "ami-launch-index": "0",
            "ami-manifest-path": "(unknown)",  # the guide: EBS-backed AMIs answer "unknown"; ours have no manifest
            "hostname": hostname,
            "instance-id": instance.instance_id,
            "local-ipv4": instance.private_ip,
            "profile": "default-hvm",  # on every real HVM instance; undocumented, so shown in every version
            "reservation-id": network.reservation_id,
            "security-groups": "\n".join(network.security_group_names),
        }
        if since("2007-01-19"):
            tree["local-hostname"] = hostname
        if since("2007-08-29"):
            tree["instance-type"] = instance.instance_type
        if since("2007-12-15"):
            tree["block-device-mapping"] = block_device_mapping(instance)
        if since("2008-02-01"):
            tree["placement"] = placement_tree(instance, version)
        if since("2008-09-01"):
            tree["instance-action"] = "none"
        if since("2011-01-01"):
            tree["mac"] = network.mac
            tree["network"] = {"interfaces": {"macs": {network.mac: interface_tree(instance, network, version)}}}
        if since("2014-02-25"):
            domain, partition = services_of(instance.region)
            tree["services"] = {"domain": domain, **({"partition": partition} if since("2015-10-20") else {})}
        spot = spot_tree(state, version)
        if spot:
            tree["spot"] = spot
        if since("2018-05-23"):
            tree["identity-credentials"] = identity_credentials_tree(instance, state, network)
        if since("2018-08-17"):
            tree["events"] = self._events_tree(state, events, version)
        if since("2019-10-01"):
            tree["instance-life-cycle"] = "spot" if instance.spot else "on-demand"
        if since("2021-03-23") and self.settings.instance_tags:
            tree["tags"] = {"instance": {key: value for key, value in instance.tags.items() if tag_addressable(key)}}
        if since("2021-07-15") and instance.auto_scaling_group is not None:
            tree["autoscaling"] = {"target-lifecycle-state": state.lifecycle_state}
        if since("2022-09-24"):
            tree["system"] = "nitro"  # our choice: every simulated instance is a Nitro instance
        return dict(sorted(tree.items()))

    def _events_tree(self, state: Ec2State, maintenance: list[Ec2Event], version: str) -> dict:
        """``events/``: the maintenance events (the instance's, as committed when its tree was built: the tree is
        dropped once a change to them is), rendered when asked, and from 2020-10-27 the rebalance recommendation."""
        deadline = self.settings.not_before_deadline

        def scheduled() -> str:
            return render_events([e for e in maintenance if e.state is Ec2EventState.ACTIVE], deadline)

        def history() -> str:
            # Every event that ended, the older ones read from the database: a GET of it waits for a transaction
            # under way to land, not the event loop (``_reads_engine``).
            ended = self.service.settled_engine().component(Ec2Component).ended_ec2_events_of(state.instance_id)
            return render_events(ended, deadline)

        events: dict = {"maintenance": {"history": history, "scheduled": scheduled}}
        if version >= "2020-10-27":
            recommendations: dict = {}
            if state.rebalance_at is not None:
                recommendations["rebalance"] = json.dumps({"noticeTime": iso_z(state.rebalance_at)})
            events["recommendations"] = recommendations
        return events


def placement_tree(instance: Ec2Instance, version: str) -> dict:
    """``placement/`` as ``version`` shows it (from 2008-02-01)."""
    placement = {"availability-zone": instance.availability_zone}
    if version >= "2019-10-01":
        placement["availability-zone-id"] = availability_zone_id(instance.availability_zone)
    if version >= "2020-08-24":
        if instance.dedicated_host is not None:
            placement["host-id"] = instance.dedicated_host
        placement["region"] = instance.region
    return placement


def browser_refusal(refusal: Refusal) -> Response:
    """What the metadata listener's guard refused (net/browser_guard.py): the 403 page, as IMDS answers a token
    request with X-Forwarded-For."""
    return FORBIDDEN


def _text(value: str) -> Response:
    return (200, value.encode(), TEXT, _PLAIN_HEADERS)


def parse_ttl(value: bytes | None) -> int | None:
    """The token TTL in seconds (1 to 21600), or None when missing or invalid."""
    if value is None:
        return None
    value = value.strip()
    if not value.isdigit() or len(value) > 6:
        return None
    ttl = int(value)
    return ttl if 1 <= ttl <= MAX_TTL else None


# ----------------------------------------------------------------------------------------------- wire format
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def imds_time(moment: datetime) -> str:
    """``1 Jan 2021 02:00:00 GMT``: the day is not zero-padded (the user guide's example;
    aws-node-termination-handler#147)."""
    m = moment.astimezone(UTC)
    return f"{m.day} {_MONTHS[m.month - 1]} {m.year} {m.hour:02d}:{m.minute:02d}:{m.second:02d} GMT"


def iso_z(moment: datetime) -> str:
    """``2017-09-18T08:22:00Z`` (spot and rebalance notices, the identity document)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pretty_json(value) -> str:
    """JSON as real IMDS prints it (Jackson's default pretty printer): ``[ {``, objects indented two spaces per
    level, ``"Key" : value``, arrays inline (``}, {``), ``[ ]`` and ``{ }`` when empty, no final newline."""
    return _pretty(value, 0)


def _pretty(value, depth: int) -> str:
    if isinstance(value, dict):
        if not value:
            return "{ }"
        inner = "\n" + "  " * (depth + 1)
        entries = ",".join(
            inner + json.dumps(key, ensure_ascii=False) + " : " + _pretty(item, depth + 1)
            for key, item in value.items()
        )
        return "{" + entries + "\n" + "  " * depth + "}"
    if isinstance(value, list):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(_pretty(item, depth) for item in value) + " ]"
    return json.dumps(value, ensure_ascii=False)


def event_item(event: Ec2Event, with_deadline: bool = False) -> dict:
    """One maintenance event in the real key order: NotBefore, then Code, Description, EventId, NotAfter
    (omitted when there is none), [NotBeforeDeadline,] State."""
    item = {
        "NotBefore": imds_time(event.not_before),
        "Code": event.code.value,
        "Description": event.shown_description,
        "EventId": event.event_id,
    }
    if event.not_after is not None:
        item["NotAfter"] = imds_time(event.not_after)
    if with_deadline and event.not_before_deadline is not None:
        item["NotBeforeDeadline"] = imds_time(event.not_before_deadline)
    item["State"] = event.state.value
    return item


def render_events(events: list[Ec2Event], with_deadline: bool = False) -> str:
    return pretty_json([event_item(event, with_deadline) for event in events])


def spot_tree(state: Ec2State, version: str = "latest") -> dict:
    """``spot/`` exists only while a Spot interruption is pending or has happened on this boot: after the instance is
    started again (a stop or hibernate interruption), the notice is gone. ``termination-time`` is 2014-11-05,
    ``instance-action`` 2016-11-15 (the AWS page "Instance metadata categories")."""
    if state.spot_action is None or state.spot_action_time is None or state.booted_at > state.spot_action_time:
        return {}
    at = iso_z(state.spot_action_time)
    tree = {}
    if version >= "2016-11-15":
        tree["instance-action"] = json.dumps({"action": state.spot_action, "time": at})
    if state.spot_action == "terminate" and version >= "2014-11-05":
        tree["termination-time"] = at
    return tree


# dynamic/ and its categories (fws/instance-monitoring, instance-identity/) are 2009-04-04.
DYNAMIC_SINCE = "2009-04-04"


def dynamic_tree(instance: Ec2Instance, state: Ec2State) -> dict:
    """``dynamic/``. Real IMDS lists ``document``, ``pkcs7``, ``rsa2048`` and ``signature`` under
    ``instance-identity/``; the three signatures are AWS's own (DSA and RSA keys whose certificates AWS publishes),
    which forewarn cannot make, and a fake one would only fail later, at the verifier, looking like tampering. So
    they are neither listed nor served (404): a client that walks the tree never asks for them, and one that asks
    is told plainly that there is none."""
    return {
        "fws": {"instance-monitoring": "disabled"},
        "instance-identity": {"document": lambda: identity_document(instance, state)},
    }


_ARM = re.compile(r"^[a-z]+\d+g")  # Graviton families: t4g, m6g, c7gn, r8g, x2gd, im4gn, is4gen, g5g...


def architecture(instance_type: str) -> str:
    return "arm64" if _ARM.match(instance_type) else "x86_64"


def identity_document(instance: Ec2Instance, state: Ec2State) -> str:
    """``dynamic/instance-identity/document``, in the real key order and style (no signature is offered)."""
    return pretty_json(
        {
            "accountId": instance.account_id,
            "architecture": architecture(instance.instance_type),
            "availabilityZone": instance.availability_zone,
            "billingProducts": None,
            "devpayProductCodes": None,
            "marketplaceProductCodes": None,
            "imageId": instance.ami_id,
            "instanceId": instance.instance_id,
            "instanceType": instance.instance_type,
            "kernelId": None,
            "pendingTime": iso_z(state.launched_at),
            "privateIp": instance.private_ip,
            "ramdiskId": None,
            "region": instance.region,
            "version": "2017-09-30",
        }
    )


def collapse_slashes(path: str) -> str:
    """``//latest//meta-data/`` → ``/latest/meta-data/``: real IMDS treats repeated slashes as one."""
    return _SLASHES.sub("/", path)


_SLASHES = re.compile(r"/{2,}")


def _hex17(*parts: str) -> str:
    """17 hex digits derived from ``parts``: the shape of real EC2 resource ids (``eni-0f95d3625f5c521cc``)."""
    return hashlib.blake2b("\x00".join(parts).encode(), digest_size=9).hexdigest()[:17]


@dataclass(frozen=True)
class Network:
    """The network identity of an instance's one interface, derived from the instance so that every answer agrees
    (and stays the same across restarts): a VPC per account and region (10.x.0.0/16), a subnet per availability
    zone and /24 (the one holding the private address), the VPC's "default" security group. Our choice: the fleet
    file describes no network."""

    mac: str
    interface_id: str
    reservation_id: str
    vpc_id: str
    vpc_cidr: str
    subnet_id: str
    subnet_cidr: str
    security_group_ids: tuple[str, ...]
    security_group_names: tuple[str, ...]


def network_of(instance: Ec2Instance) -> Network:
    address = ipaddress.IPv4Address(instance.private_ip)
    vpc_cidr = str(ipaddress.IPv4Network(f"{address}/16", strict=False))
    subnet_cidr = str(ipaddress.IPv4Network(f"{address}/24", strict=False))
    vpc_id = "vpc-" + _hex17("vpc", instance.account_id, instance.region)
    return Network(
        mac=mac_address(instance.instance_id),
        interface_id="eni-" + _hex17("eni", instance.instance_id),
        reservation_id="r-" + _hex17("reservation", instance.instance_id),
        vpc_id=vpc_id,
        vpc_cidr=vpc_cidr,
        subnet_id="subnet-" + _hex17("subnet", vpc_id, instance.availability_zone, subnet_cidr),
        subnet_cidr=subnet_cidr,
        security_group_ids=("sg-" + _hex17("security-group", vpc_id, "default"),),
        security_group_names=("default",),
    )


def interface_tree(instance: Ec2Instance, network: Network, version: str) -> dict:
    """``network/interfaces/macs/<mac>/``: the keys of a private interface (no public address, no IPv6, one network
    card, so none of ``public-*``, ``ipv4-associations/``, ``ipv6s``, ``*-ipv6-cidr-blocks`` or
    ``network-card-index``, which real IMDS also leaves out then). All are 2011-01-01 but
    ``vpc-ipv4-cidr-blocks`` (2016-06-30)."""
    tree = {
        "device-number": "0",
        "interface-id": network.interface_id,
        "local-hostname": local_hostname(instance),
        "local-ipv4s": instance.private_ip,
        "mac": network.mac,
        "owner-id": instance.account_id,
        "security-group-ids": "\n".join(network.security_group_ids),
        "security-groups": "\n".join(network.security_group_names),
        "subnet-id": network.subnet_id,
        "subnet-ipv4-cidr-block": network.subnet_cidr,
        "vpc-id": network.vpc_id,
        "vpc-ipv4-cidr-block": network.vpc_cidr,
    }
    if version >= "2016-06-30":
        tree["vpc-ipv4-cidr-blocks"] = network.vpc_cidr
    return tree


def block_device_mapping(instance: Ec2Instance) -> dict:
    """``block-device-mapping/``: an EBS root is ``/dev/xvda`` (Amazon Linux's name); an instance-store root is the
    older ``sda1`` with its first instance-store volume as ``ephemeral0`` (our choice of names)."""
    if instance.root_device == "ebs":
        return {"ami": "/dev/xvda", "root": "/dev/xvda"}
    return {"ami": "sda1", "ephemeral0": "sdb", "root": "/dev/sda1"}


def identity_credentials_tree(instance: Ec2Instance, state: Ec2State, network: Network) -> dict:
    """``identity-credentials/ec2/``: "[Internal use only]" credentials that identify the instance to AWS features
    (EC2 Instance Connect) and carry no API permission. forewarn's are well formed but FAKE: the key id has the
    ``ASIA`` shape, the secret and token are derived from the instance, and the token decodes to a sentence saying
    what it is. They are valid nowhere. LastUpdated is the instance's boot, Expiration six hours later."""
    seed = hashlib.blake2b(f"identity-credentials:{instance.instance_id}".encode(), digest_size=40).digest()
    updated = state.booted_at
    info = {"Code": "Success", "LastUpdated": iso_z(updated), "AccountId": instance.account_id}
    token = base64.b64encode(
        f"forewarn simulated identity credentials of {instance.instance_id} "
        f"({network.interface_id}); not valid at AWS".encode()
    ).decode()
    credentials = {
        "Code": "Success",
        "LastUpdated": iso_z(updated),
        "Type": "AWS-HMAC",
        "AccessKeyId": "ASIA" + base64.b32encode(seed[:10]).decode()[:16],
        "SecretAccessKey": base64.b64encode(seed[10:40]).decode(),
        "Token": token,
        "Expiration": iso_z(updated + timedelta(hours=6)),
    }
    return {"ec2": {"info": pretty_json(info), "security-credentials": {"ec2-instance": pretty_json(credentials)}}}


def local_hostname(instance: Ec2Instance) -> str:
    """``ip-10-0-0-10.ec2.internal`` in us-east-1, ``ip-10-0-0-10.<region>.compute.internal`` elsewhere."""
    name = "ip-" + instance.private_ip.replace(".", "-")
    region = instance.region
    return f"{name}.ec2.internal" if region == "us-east-1" else f"{name}.{region}.compute.internal"


def mac_address(instance_id: str) -> str:
    """A stable, locally administered MAC derived from the instance id (real: ``02:29:96:8f:6a:2d``)."""
    digest = hashlib.blake2b(instance_id.encode(), digest_size=5).hexdigest()
    return "02:" + ":".join(digest[i : i + 2] for i in range(0, 10, 2))


def services_of(region: str) -> tuple[str, str]:
    """``services/domain`` and ``services/partition`` for a region."""
    if region.startswith("cn-"):
        return "amazonaws.com.cn", "aws-cn"
    if region.startswith("us-gov-"):
        return "amazonaws.com", "aws-us-gov"
    return "amazonaws.com", "aws"


def tag_addressable(key: str) -> bool:
    """Tags IMDS can show: a key with ``/`` or a space cannot be a path segment (real EC2 refuses to enable
    instance metadata tags on such instances); ``.`` and ``..`` would be path navigation."""
    return bool(key) and "/" not in key and " " not in key and key not in (".", "..")
