"""The record loop: poll a scheduled-events endpoint every interval, keep each answer that differs from the last.

A Compute Engine metadata server's ``maintenance-event`` is recorded with hanging GETs (``wait_for_change=true`` and
the last ETag): each request is answered when the value changes, or after ``timeout_sec``, so a change is recorded
when it happens, not at the next poll; the interval then only spaces the requests out.

Time comes in as functions (``clock``: monotonic seconds, ``sleep``, ``wall``: an aware UTC datetime), so tests
drive it without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from forewarn.recording.model import AZURE, Entry, Recording

SCHEDULED_EVENTS_PATH = "/metadata/scheduledevents"
MAINTENANCE_EVENT_PATH = "/computeMetadata/v1/instance/maintenance-event"
# A fetch returns (status, body text) or (status, body text, ETag); status 0 when no answer came (connection refused,
# reset, timed out).
Fetch = Callable[[], "tuple[int, str] | tuple[int, str, str | None]"]


def scheduled_events_url(url: str, api_version: str) -> str:
    """``url`` with the scheduled-events path (when only a base was given) and ``api-version`` (unless given)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    path = parts.path.rstrip("/")
    if not path.endswith(SCHEDULED_EVENTS_PATH):
        path += SCHEDULED_EVENTS_PATH
    query = parse_qsl(parts.query, keep_blank_values=True)
    if not any(name == "api-version" for name, _ in query):
        query.append(("api-version", api_version))
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), ""))


def maintenance_event_url(url: str) -> str:
    """``url`` with the maintenance-event path when only a base was given (``http://metadata.google.internal``)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    path = parts.path.rstrip("/")
    if "/computeMetadata/" not in path + "/":
        path += MAINTENANCE_EVENT_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def gce_fetch(url: str, wait: float = 60.0) -> tuple[Fetch, Callable[[], None]]:
    """A fetch function for a metadata server key: a hanging GET with ``Metadata-Flavor: Google``,
    ``wait_for_change=true``, the ETag of the previous answer (``0`` at first, which no value has: answered at once,
    as in Google's sample) and ``timeout_sec`` (``wait``); and the function that closes its connection pool."""
    import httpx

    seconds = max(1, round(wait))
    # A little past timeout_sec: a server whose clock does not run with the wall's (forewarn on a manual clock) may
    # hold the request longer; giving up then means "no change yet", not an outage.
    client = httpx.Client(
        timeout=httpx.Timeout(5.0, read=seconds + 2.0), trust_env=False, headers={"Metadata-Flavor": "Google"}
    )
    last_etag = "0"
    previous: tuple[int, str, str | None] | None = None

    def fetch() -> tuple[int, str, str | None]:
        nonlocal last_etag, previous
        params = {"wait_for_change": "true", "last_etag": last_etag, "timeout_sec": str(seconds)}
        try:
            response = client.get(url, params=params)
        except httpx.ReadTimeout:
            return previous if previous is not None else (0, "", None)
        except httpx.HTTPError:
            return 0, "", None
        tag = response.headers.get("etag")
        if response.status_code == 200 and tag:
            last_etag = tag
        previous = (response.status_code, response.content.decode("utf-8", errors="replace"), tag)
        return previous

    return fetch, client.close


def http_fetch(url: str, timeout: float = 5.0) -> tuple[Fetch, Callable[[], None]]:
    """A fetch function for ``url`` (GET with ``Metadata: true``, no proxies: IMDS must be reached directly) and
    the function that closes its connection pool."""
    import httpx

    client = httpx.Client(timeout=timeout, trust_env=False, headers={"Metadata": "true"})

    def fetch() -> tuple[int, str]:
        try:
            response = client.get(url)
        except httpx.HTTPError:
            return 0, ""
        return response.status_code, response.content.decode("utf-8", errors="replace")

    return fetch, client.close


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record(
    fetch: Fetch,
    *,
    url: str,
    api_version: str,
    interval: float = 1.0,
    duration: float | None = None,
    until_empty: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    on_entry: Callable[[Recording, Entry], None] | None = None,
    recording: Recording | None = None,
    source: str = AZURE,
) -> Recording:
    """Poll until ``duration`` seconds have passed, or (``until_empty``) a document without events follows one
    with events, or forever (the caller stops it with Ctrl-C: ``recording``, when given, is filled in place, so
    what was recorded survives the interrupt). Polls are at start + k * interval; a slow answer skips the polls
    it overran rather than bunching them."""
    if interval <= 0:
        raise ValueError("the interval must be positive")
    started = clock()
    if recording is None:
        recording = Recording(url, api_version, "", interval, source=source)
    if not recording.started_at:
        recording.started_at = _iso(wall())
    last: tuple[int, str] | tuple[int, str, str | None] | None = None
    had_events = False
    polls = 0
    while True:
        offset = clock() - started
        answer = fetch()
        if recording.source != AZURE:  # a hanging GET's answer counts from when it came (the change)
            offset = clock() - started
        if answer != last:
            last = answer
            entry = Entry(round(offset, 3), _iso(wall()), answer[0], answer[1], answer[2] if len(answer) > 2 else None)
            recording.entries.append(entry)
            if on_entry is not None:
                on_entry(recording, entry)
            busy = entry.busy(recording.source)
            if busy is not None:
                if until_empty and had_events and not busy:
                    return recording
                had_events = busy
        if duration is not None and clock() - started >= duration:
            return recording
        polls += 1
        now = clock() - started
        while polls * interval <= now:  # overran: skip to the next poll still ahead
            polls += 1
        next_poll = polls * interval
        if duration is not None:
            next_poll = min(next_poll, duration)
        sleep(max(0.0, next_poll - now))
