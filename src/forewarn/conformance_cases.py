"""What a conformance run is made of: cases (read from a cloud's YAML files), the calls a handler made, the probes'
answers, and each check's grade. Plain data, no cloud named here: a cloud gives its cases and an :class:`Observer`
(``Cloud.conformance()``), which reads its own metadata answers."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

PASS, FAIL, NOT_JUDGED = "pass", "fail", "not judged"
TIMINGS = ("fast", "realistic")


@dataclass(frozen=True)
class Step:
    """One action of a case: a control-API call (``call: POST /v1/events``, ``body``), a signal to the handler
    (``kill: SIGKILL``, then started again after ``restart``), its metadata connections dropped for ``drop``
    seconds (those open, and each one opened meanwhile, closed unanswered), its metadata calls answered 429 for
    ``throttle`` seconds, the session tokens it was given so far expired (``expire``: the request header that
    carries them), or the simulated clock moved ``advance`` seconds ahead at once, at ``at`` seconds after the case starts, or after the handler first saw the case's event
    (``after: noticed``). A call with ``port`` (a port of the server other than the control API's, ``ec2``) is a
    form POST of ``body`` there, for what only a cloud's own API does."""

    at: float
    call: str | None = None
    body: Any = None
    kill: str | None = None
    restart: float | None = None
    after: str | None = None
    machine: str | None = None
    drop: float | None = None
    advance: float | None = None
    port: str | None = None
    throttle: float | None = None
    expire: str | None = None
    target: str | None = None  # with ``port``: a JSON call of that API action (``X-Amz-Target``), not a form POST


@dataclass(frozen=True)
class Check:
    kind: str  # noticed, drained_in_time, approved_before_not_before, not_approved, not_drained, ...
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    name: str
    cloud: str
    title: str
    machines: Sequence[str]
    steps: Sequence[Step]
    checks: Sequence[Check]
    source: str
    limit: float  # the longest a case runs, in seconds of wall time
    settle: float  # how long it goes on once every event of the case left Scheduled
    required: bool = True
    file: str = ""
    serve: Sequence[str] = ()  # options of ``forewarn serve`` the case needs: it runs on a server of its own
    # What kind of handler the case is for: ``metadata`` (one process per machine, given its metadata address) or
    # another the cloud names (``queue``: a handler given a queue URL); a run takes one mode's cases unless it names
    # its cases.
    mode: str = "metadata"
    # The server's port the handler's observed endpoint leads to, instead of its machine's metadata endpoint (``ec2``:
    # a queue-mode handler reads SQS and calls Auto Scaling there); None: the metadata endpoint.
    endpoint: str | None = None
    setup: Sequence[Step] = ()  # calls made once the server is reset, before the handlers start (a queue, a rule)
    # More placeholders of the command (``{name}``, and ``FOREWARN_NAME`` in its environment); a value may hold
    # ``{endpoint_url}``, the handler's observed endpoint (``queue_url: "{endpoint_url}/123456789012/q"``).
    placeholders: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """A metadata request the handler made, as the observing proxy saw it (times: seconds since the case began)."""

    machine: str
    at: float
    done: float
    method: str
    path: str  # with its query
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    status: int  # 0: no answer from the server
    answer: bytes


@dataclass(frozen=True)
class Approval:
    machine: str
    at: float
    event_id: str


@dataclass(frozen=True)
class EventState:
    """A case's event as the server reports it after the case (``not_before``, ``ended``: seconds since the case
    began; ``ended`` where the cloud says when an event ended)."""

    event_id: str
    status: str
    resources: Sequence[str]
    not_before: float | None
    approved_by: Sequence[str]
    ended: float | None = None


@dataclass
class Observation:
    """Everything seen during one case."""

    case: Case
    observer: Observer
    calls: list[Call] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)
    appeared: dict[str, float] = field(default_factory=dict)  # event id: when its step's call returned
    events: dict[str, EventState] = field(default_factory=dict)
    drained: dict[str, list[float]] = field(default_factory=dict)  # machine: times the drained probe said yes
    restored: dict[str, list[float]] = field(default_factory=dict)
    exits: list[tuple[str, float, int]] = field(default_factory=list)  # machine, time, status (not ours)
    kills: list[tuple[str, float]] = field(default_factory=list)
    cancels: list[float] = field(default_factory=list)  # when a step canceled something
    steps_done: list[tuple[float, str, Any]] = field(default_factory=list)  # when, the call made, its answer
    notes: list[str] = field(default_factory=list)
    probes: tuple[bool, bool] = (False, False)  # whether --drained, --restored were given
    wall: float = 0.0
    approvals: list[Approval] = field(default_factory=list)


@dataclass(frozen=True)
class Grade:
    check: str
    grade: str
    reason: str


@dataclass(frozen=True)
class CaseResult:
    case: Case
    grade: str
    grades: Sequence[Grade]
    wall: float
    notes: Sequence[str] = ()


class Observer(Protocol):
    """A cloud's reading of what only it knows: which events a case's calls made, which metadata calls approve
    them, and their state on the server."""

    def event_ids(self, answer: Any) -> list[str]:
        """The ids of the events (notices) a step's control-API answer created."""
        ...

    def seen(self, call: Call, event_id: str) -> bool:
        """Whether this call's answer told the handler of the event."""
        ...

    def approvals(self, calls: Sequence[Call]) -> list[Approval]:
        """The approvals among a handler's metadata calls (an empty list where the cloud has none)."""
        ...

    def event_states(self, client: Any, event_ids: Sequence[str], seconds_since_start: Any) -> dict[str, EventState]:
        """The events' state now, read through the control API (``client.call(method, path)``);
        ``seconds_since_start(iso)`` turns a simulated time into seconds since the case began."""
        ...

    def settled(self, states: Mapping[str, EventState], now: float) -> bool:
        """Whether every event has left the phase in which a handler acts on it (``now``: seconds since the case
        began)."""
        ...

    def checks(self) -> Mapping[str, Callable[[Observation, Check], Grade]]:
        """The cloud's own checks, beside the common ones (EC2: IMDSv2 token use)."""
        ...


class ObserverWithoutApproval:
    """What the observers of clouds whose handlers approve nothing (EC2, Compute Engine) share: no call approves, and
    an event is over for the handler once it has left the ``live`` statuses or its start (NotBefore) has come, after
    which what happens is the platform's."""

    live: Collection[str] = ()

    def approvals(self, calls: Sequence[Call]) -> list[Approval]:
        return []

    def settled(self, states: Mapping[str, EventState], now: float) -> bool:
        return all(
            state.status not in self.live or (state.not_before is not None and state.not_before <= now)
            for state in states.values()
        )

    def listed_events(self, client: Any, path: str) -> dict[str, dict[str, Any]]:
        """Every event the control API lists at ``path`` (the ended ones too), by its id."""
        return {str(event["event_id"]): event for event in client.call("GET", path, all="true")}


@dataclass(frozen=True)
class CloudCases:
    """What ``Cloud.conformance()`` returns: the cloud's case files and its observer."""

    cloud: str
    files: Sequence[Any]  # paths or importlib.resources Traversables
    observer: Observer


def worst(grades: Sequence[str]) -> str:
    if FAIL in grades:
        return FAIL
    if NOT_JUDGED in grades:
        return NOT_JUDGED
    return PASS
