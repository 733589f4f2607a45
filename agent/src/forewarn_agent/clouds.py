"""Each cloud's metadata service, read the way its documentation advises, as a list of :class:`Notice`.

A watcher knows its machine (``identify``), gives the notices that concern it now (``poll``), waits between polls
(``wait``) and, where the cloud takes one, sends an early approval (``approve``)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any, Dict, List, MutableMapping, Optional, Tuple

from forewarn_agent.http import Answer, Unreachable, request
from forewarn_agent.notice import Notice, ec2_time_seconds, iso_seconds, rfc1123_seconds

LINK_LOCAL = "http://169.254.169.254"


class MetadataError(Exception):
    """The metadata service answered, but not with what was asked (throttled, a server error, a body not parsed)."""


def _expect(answer: Answer, what: str, ok: Tuple[int, ...] = (200,)) -> Answer:
    if answer.status not in ok:
        raise MetadataError(f"{what}: HTTP {answer.status} {answer.text[:200]!r}")
    return answer


class Watcher:
    cloud = ""
    interval = 1.0

    def __init__(self, endpoint: Optional[str] = None, timeout: float = 5.0):
        self.endpoint = (endpoint or LINK_LOCAL).rstrip("/")
        self.timeout = timeout
        self.machine = ""
        self.clock_offset = 0.0
        self._stop = threading.Event()

    def now(self) -> float:
        """The cloud's time as its metadata service last told it (its ``Date`` header), else this machine's: a VM's
        clock may be off, and a simulated cloud's clock may run at another pace than the wall's."""
        return time.time() + self.clock_offset

    def _call(
        self,
        method: str,
        url: str,
        headers: Optional[Dict[str, str]] = None,
        body: Optional[bytes] = None,
        timeout: float = 5.0,
    ) -> Answer:
        answer = request(method, url, headers, body, timeout)
        told = rfc1123_seconds(answer.headers.get("date", ""))
        if told is not None:
            self.clock_offset = told - time.time()
        return answer

    def gone_phase(self, record: Dict[str, Any], now: float) -> str:
        """What an event of this machine that left the metadata became: ``ended`` once it started (the agent saw it
        Started, or approved it, which starts it) or its NotBefore passed; ``canceled`` otherwise."""
        not_before = record.get("not_before")
        if record.get("started") or record.get("approved") or (not_before is not None and now >= not_before):
            return "ended"
        return "canceled"

    def identify(self) -> str:
        raise NotImplementedError

    def poll(self) -> List[Notice]:
        raise NotImplementedError

    def approve(self, notice: Notice) -> None:
        raise MetadataError(f"{self.cloud} takes no approval")

    def wait(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def stop(self) -> None:
        self._stop.set()


# -------------------------------------------------------------------------------------------------------- Azure
class AzureWatcher(Watcher):
    """Azure Scheduled Events ("Azure Metadata Service: Scheduled Events for Linux VMs"): polled once a second (the
    page's advice), with ``If-None-Match`` on the document's ETag; an event that names this VM in ``Resources`` is
    its own, the others reach it because they name its availability set or placement group."""

    cloud = "azure"
    API = "api-version=2020-07-01"
    HEADERS = {"Metadata": "true"}

    def __init__(self, endpoint: Optional[str] = None, timeout: float = 5.0):
        super().__init__(endpoint, timeout)
        self._etag: Optional[str] = None
        self._document: Dict[str, Any] = {"Events": []}

    def identify(self) -> str:
        url = f"{self.endpoint}/metadata/instance/compute?api-version=2021-02-01"
        answer = _expect(self._call("GET", url, self.HEADERS, timeout=self.timeout), "instance metadata")
        self.machine = str(answer.json().get("name", ""))
        return self.machine

    def poll(self) -> List[Notice]:
        headers = dict(self.HEADERS)
        if self._etag:
            headers["If-None-Match"] = self._etag
        answer = self._call(
            "GET", f"{self.endpoint}/metadata/scheduledevents?{self.API}", headers, timeout=self.timeout
        )
        if answer.status != 304:
            _expect(answer, "scheduled events")
            try:
                self._document = answer.json()
            except ValueError as error:
                raise MetadataError(f"scheduled events: not JSON: {error}") from error
            self._etag = answer.headers.get("etag")
        return [self._notice(event) for event in self._document.get("Events", [])]

    def _notice(self, event: Dict[str, Any]) -> Notice:
        resources = tuple(str(name) for name in event.get("Resources", []))
        status = str(event.get("EventStatus", ""))
        return Notice(
            key=f"azure:{event.get('EventId')}",
            cloud=self.cloud,
            event_id=str(event.get("EventId", "")),
            kind=str(event.get("EventType", "")),
            status=status,
            not_before=rfc1123_seconds(str(event.get("NotBefore", ""))),
            resources=resources,
            own=self.machine in resources,
            approvable=status == "Scheduled",
            description=str(event.get("Description", "")),
            raw=event,
        )

    def approve(self, notice: Notice) -> None:
        body = json.dumps({"StartRequests": [{"EventId": notice.event_id}]}).encode()
        headers = dict(self.HEADERS, **{"Content-Type": "application/json"})
        url = f"{self.endpoint}/metadata/scheduledevents?{self.API}"
        _expect(self._call("POST", url, headers, body, self.timeout), "approval", (200, 201, 202, 204))


# ---------------------------------------------------------------------------------------------------------- EC2
class Ec2Watcher(Watcher):
    """Amazon EC2 instance metadata with IMDSv2 tokens ("Use the Instance Metadata Service to access instance
    metadata"), renewed before they expire: scheduled events ("Scheduled events for your instances"), the Spot
    instance-action notice and rebalance recommendations (checked every 5 seconds as "Spot Instance interruption
    notices" advises: the agent's default interval is shorter), and Auto Scaling's target-lifecycle-state."""

    cloud = "aws"
    TTL = 21600

    def __init__(self, endpoint: Optional[str] = None, timeout: float = 5.0):
        super().__init__(endpoint, timeout)
        self._token = ""
        self._token_until = 0.0

    def _fresh_token(self) -> str:
        if time.time() < self._token_until:
            return self._token
        answer = self._call(
            "PUT",
            f"{self.endpoint}/latest/api/token",
            {"X-aws-ec2-metadata-token-ttl-seconds": str(self.TTL)},
            timeout=self.timeout,
        )
        self._token = _expect(answer, "IMDSv2 token").text
        self._token_until = time.time() + self.TTL * 0.9  # renewed before it expires
        return self._token

    def _get(self, path: str) -> Answer:
        answer = self._call(
            "GET", self.endpoint + path, {"X-aws-ec2-metadata-token": self._fresh_token()}, None, self.timeout
        )
        if answer.status == 401:  # expired or revoked early: one new token, once
            self._token_until = 0.0
            headers = {"X-aws-ec2-metadata-token": self._fresh_token()}
            answer = self._call("GET", self.endpoint + path, headers, None, self.timeout)
        return answer

    def gone_phase(self, record: Dict[str, Any], now: float) -> str:
        """An event that left ``scheduled`` is in ``history`` with its State ("Scheduled events for your instances":
        completed or canceled); an event that is in neither is judged by its time."""
        try:
            answer = self._get("/latest/meta-data/events/maintenance/history")
            events = answer.json() if answer.status == 200 and answer.body.strip() else []
        except (Unreachable, ValueError):
            events = []
        for event in events if isinstance(events, list) else []:
            if isinstance(event, dict) and event.get("EventId") == record.get("event_id"):
                return "canceled" if event.get("State") == "canceled" else "ended"
        return super().gone_phase(record, now)

    def identify(self) -> str:
        self.machine = _expect(self._get("/latest/meta-data/instance-id"), "instance-id").text.strip()
        return self.machine

    def poll(self) -> List[Notice]:
        found = self._scheduled()
        found += self._optional_json("/latest/meta-data/spot/instance-action", self._spot)
        found += self._optional_json("/latest/meta-data/events/recommendations/rebalance", self._rebalance)
        lifecycle = self._get("/latest/meta-data/autoscaling/target-lifecycle-state")
        if lifecycle.status == 200 and lifecycle.text.strip() == "Terminated":
            found.append(self._simple("autoscaling:Terminated", "autoscaling-terminate", None, lifecycle.text))
        elif lifecycle.status not in (200, 404):
            _expect(lifecycle, "target-lifecycle-state")
        return found

    def _scheduled(self) -> List[Notice]:
        answer = _expect(self._get("/latest/meta-data/events/maintenance/scheduled"), "scheduled events")
        try:
            events = answer.json() if answer.body.strip() else []
        except ValueError as error:
            raise MetadataError(f"scheduled events: not JSON: {error}") from error
        notices = []
        for event in events:
            state = str(event.get("State", "active"))
            finished = {"completed": "ended", "canceled": "canceled"}.get(state)
            notices.append(
                Notice(
                    key=f"aws:{event.get('EventId')}",
                    cloud=self.cloud,
                    event_id=str(event.get("EventId", "")),
                    kind=str(event.get("Code", "")),
                    status="Scheduled",
                    not_before=ec2_time_seconds(str(event.get("NotBefore", ""))),
                    resources=(self.machine,),
                    description=str(event.get("Description", "")),
                    finished=finished,
                    raw=event,
                )
            )
        return notices

    def _optional_json(self, path: str, make: Any) -> List[Notice]:
        answer = self._get(path)
        if answer.status == 404:
            return []
        _expect(answer, path)
        try:
            return [make(answer.json())]
        except (ValueError, AttributeError) as error:
            raise MetadataError(f"{path}: not the JSON expected: {error}") from error

    def _spot(self, data: Dict[str, Any]) -> Notice:
        at = str(data.get("time", ""))
        return self._simple(f"spot:{at}", f"spot-{data.get('action', '')}", iso_seconds(at), data)

    def _rebalance(self, data: Dict[str, Any]) -> Notice:
        return self._simple(f"rebalance:{data.get('noticeTime', '')}", "rebalance-recommendation", None, data)

    def _simple(self, key: str, kind: str, not_before: Optional[float], raw: Any) -> Notice:
        return Notice(
            key=f"aws:{key}",
            cloud=self.cloud,
            event_id=key,
            kind=kind,
            status="Scheduled",
            not_before=not_before,
            resources=(self.machine,),
            raw=raw if isinstance(raw, dict) else {"value": raw},
        )


# ------------------------------------------------------------------------------------------------ Compute Engine
class GceWatcher(Watcher):
    """Compute Engine's metadata server ("About host events", "Query metadata server for maintenance event
    notices"): a ``wait_for_change`` GET held on ``maintenance-event`` and one on ``preempted``, each with the ETag it
    last saw, reconnecting after a dropped connection. ``maintenance-event`` has no id: the agent numbers each
    occurrence (kept in its state file, so that a restart in the middle of one does not run its hooks again).
    ``upcoming-maintenance`` ("Monitor and plan for a host maintenance event") is held the same way while it exists;
    while it does not (404, which no GET can wait on) it is asked again every ``ABSENT_EVERY`` seconds."""

    cloud = "gcp"
    HEADERS = {"Metadata-Flavor": "Google"}
    HOLD = 60  # timeout_sec of each held GET
    ABSENT_EVERY = 1.0
    UPCOMING = "upcoming-maintenance"
    NOTICE = {"MIGRATE_ON_HOST_MAINTENANCE": 60.0, "TERMINATE_ON_HOST_MAINTENANCE": 60.0}

    def __init__(
        self, endpoint: Optional[str] = None, timeout: float = 5.0, memory: Optional[MutableMapping[str, Any]] = None
    ):
        super().__init__(endpoint, timeout)
        self.memory: MutableMapping[str, Any] = memory if memory is not None else {}
        self._values: Dict[str, str] = {}
        self._errors: Dict[str, str] = {}
        self._changed = threading.Condition()
        self._threads: List[threading.Thread] = []

    def _url(self, key: str) -> str:
        return f"{self.endpoint}/computeMetadata/v1/instance/{key}"

    def identify(self) -> str:
        answer = _expect(self._call("GET", self._url("name"), self.HEADERS, timeout=self.timeout), "instance name")
        self.machine = answer.text.strip()
        return self.machine

    def start(self) -> None:
        for key in ("maintenance-event", "preempted", self.UPCOMING):
            thread = threading.Thread(target=self._hold, args=(key,), name=f"gce-{key}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _hold(self, key: str) -> None:
        etag = ""
        backoff = 1.0
        while not self._stop.is_set():
            query = f"?wait_for_change=true&last_etag={etag}&timeout_sec={self.HOLD}" if etag else ""
            try:
                answer = self._call("GET", self._url(key) + query, self.HEADERS, timeout=self.HOLD + 10)
            except Unreachable as error:
                self._set(key, None, str(error))
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            if answer.status == 404 and key == self.UPCOMING:  # none announced
                etag = ""
                self._set(key, "", None)
                self._stop.wait(self.ABSENT_EVERY)
                continue
            if answer.status != 200:  # 503 during maintenance: the page says to retry
                self._set(key, None, f"HTTP {answer.status}")
                self._stop.wait(1.0)
                continue
            backoff = 1.0
            etag = answer.headers.get("etag", "")
            self._set(key, answer.text.strip(), None)

    def _set(self, key: str, value: Optional[str], error: Optional[str]) -> None:
        with self._changed:
            if value is not None:
                self._values[key] = value
                self._errors.pop(key, None)
            if error is not None:
                self._errors[key] = error
            self._changed.notify_all()

    def wait(self, seconds: float) -> None:
        with self._changed:
            self._changed.wait(seconds)

    def stop(self) -> None:
        super().stop()
        with self._changed:
            self._changed.notify_all()

    def poll(self) -> List[Notice]:
        if not self._threads:
            self.start()
        with self._changed:
            if "maintenance-event" not in self._values and not self._changed.wait_for(
                lambda: "maintenance-event" in self._values or bool(self._errors), self.timeout
            ):
                raise MetadataError("maintenance-event: no answer yet")
            values = dict(self._values)
            errors = dict(self._errors)
        if "maintenance-event" not in values:
            raise MetadataError("; ".join(f"{key}: {error}" for key, error in errors.items()))
        notices = self._maintenance(values["maintenance-event"]) + self._upcoming(values.get(self.UPCOMING, ""))
        if values.get("preempted") == "TRUE":  # the instance stops 30 seconds later ("Preemption process")
            notices.append(self._notice("preempted", "PREEMPTED", self._first_seen("preempted") + 30.0))
        else:
            self.memory.pop("preempted-since", None)
        return notices

    def gone_phase(self, record: Dict[str, Any], now: float) -> str:
        """``maintenance-event`` back to ``NONE``, or a preempted instance started again: the notice was given, so
        what it announced happened."""
        return "ended"

    def _maintenance(self, value: str) -> List[Notice]:
        current = self.memory.get("maintenance")
        if value in ("", "NONE"):
            self.memory.pop("maintenance", None)
            return []
        if not current or current.get("value") != value:
            current = {"value": value, "id": f"maintenance-{int(time.time() * 1000)}", "since": self.now()}
            self.memory["maintenance"] = current
        not_before = current["since"] + self.NOTICE.get(value, 60.0)
        return [self._notice(current["id"], value, not_before)]

    def _upcoming(self, value: str) -> List[Notice]:
        try:
            announced = json.loads(value) if value else None
        except ValueError:
            return []
        if not isinstance(announced, dict):
            return []
        start = str(announced.get("window_start_time", ""))
        kind = f"UPCOMING_{announced.get('type', 'MAINTENANCE')}"
        notice = self._notice(f"upcoming-{start}", kind, iso_seconds(start))
        return [replace(notice, advance=True, raw=announced)]

    def _first_seen(self, what: str) -> float:
        return float(self.memory.setdefault(f"{what}-since", self.now()))

    def _notice(self, event_id: str, kind: str, not_before: Optional[float]) -> Notice:
        return Notice(
            key=f"gcp:{event_id}",
            cloud=self.cloud,
            event_id=event_id,
            kind=kind,
            status="Scheduled",
            not_before=not_before,
            resources=(self.machine,),
        )


WATCHERS = {"azure": AzureWatcher, "aws": Ec2Watcher, "gcp": GceWatcher}
