"""Recordings: record a real forewarn server's scheduled events, replay them through the IMDS surface."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest
import requests

from forewarn.azure.imds.errors import (
    METHOD_NOT_ALLOWED,
    MISSING_METADATA_HEADER,
    NOT_FOUND,
    bad_api_version,
)
from forewarn.azure.imds.replay import ReplayHandler
from forewarn.azure.imds.scheduled_events import (
    BAD_START_REQUESTS,
    NEWEST_SCHEDULED_EVENTS_VERSIONS,
)
from forewarn.gcp.metadata.replay import GceReplayHandler
from forewarn.recording import (
    Entry,
    Recording,
    Replay,
    http_fetch,
    load_recording,
    record,
    save_recording,
    serve_replay,
)
from forewarn.recording.model import AZURE, GCE, RecordingError
from forewarn.recording.recorder import scheduled_events_url
from forewarn.recording.replay import replay_handler
from helpers import ROOT, Server

VERSION = "2020-07-01"


class FakeTime:
    """A monotonic clock and a sleep that advances it (no real waiting); ``between`` runs at each sleep."""

    def __init__(self, between=None):
        self.now = 0.0
        self.between = between
        self.sleeps = 0

    def clock(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return datetime(2026, 4, 20, 22, 11, 58, tzinfo=UTC) + timedelta(seconds=self.now)

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        if self.between is not None:
            self.between(self.sleeps)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("recorded")) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


def test_round_trip_of_a_freeze(server, tmp_path):
    """Record the default VM through a Freeze (Scheduled, Started, gone), replay it: the same bytes at each time."""
    seen = [server.scheduled_events().content]  # what a client reads directly, after each step
    event_ids = []

    def step(n: int) -> None:
        if n == 1:
            event_ids.extend(e["event_id"] for e in server.schedule(type="Freeze", vms=["solo"]))
        elif n == 3:
            server.advance("15m")  # NotBefore: Started
        elif n == 4:
            server.advance("6m")  # over: the event leaves the document
        seen.append(server.scheduled_events().content)

    fake = FakeTime(step)
    url = scheduled_events_url(server.imds, VERSION)
    fetch, close = http_fetch(url)
    try:
        recorded = record(
            fetch,
            url=url,
            api_version=VERSION,
            interval=1.0,
            until_empty=True,
            sleep=fake.sleep,
            clock=fake.clock,
            wall=fake.wall,
        )
    finally:
        close()
    assert fake.sleeps == 4  # stopped by --until-empty right after the empty document
    # the poll after step 2 saw the same document as after step 1: not recorded again
    assert [e.offset_seconds for e in recorded.entries] == [0.0, 1.0, 3.0, 4.0]
    assert recorded.entries[0].at == "2026-04-20T22:11:58.000Z"
    assert all(e.status == 200 for e in recorded.entries)
    distinct = [seen[0], seen[1], seen[3], seen[4]]
    assert seen[2] == seen[1]
    assert [e.body.encode() for e in recorded.entries] == distinct
    documents = [json.loads(body) for body in distinct]
    assert [d["DocumentIncarnation"] for d in documents] == [1, 2, 3, 4]
    assert [[e["EventStatus"] for e in d["Events"]] for d in documents] == [[], ["Scheduled"], ["Started"], []]
    assert documents[1]["Events"][0]["EventId"] == documents[2]["Events"][0]["EventId"] == event_ids[0]

    # through the file and back
    path = tmp_path / "freeze.json"
    save_recording(recorded, path)
    data = json.loads(path.read_text())
    assert data["format"] == "forewarn-recording/1" and data["url"] == url and data["interval_seconds"] == 1.0
    assert set(data["entries"][0]) == {"offset_seconds", "at", "status", "body"}
    replay = Replay(load_recording(path))
    expected = [
        (0, seen[0]),
        (0.99, seen[0]),
        (1, seen[1]),
        (2.5, seen[1]),
        (3, seen[3]),
        (3.5, seen[3]),
        (4, seen[4]),
        (1000, seen[4]),
    ]
    for offset, body in expected:
        assert replay.document_at(offset) == (200, body), offset
    looping = Replay(load_recording(path), loop=True)
    assert looping.document_at(5.0) == (200, seen[0])  # period: last offset + one interval
    assert looping.document_at(6.5) == (200, seen[1])


def test_record_keeps_outages_and_stops_after_duration():
    answers = iter(
        [
            (200, '{"DocumentIncarnation":1,"Events":[]}'),
            (500, '{"error": "x"}'),
            (0, ""),
            (0, ""),
            (200, '{"DocumentIncarnation":1,"Events":[]}'),
        ]
        + [(200, '{"DocumentIncarnation":1,"Events":[]}')] * 10
    )
    fake = FakeTime()
    seen = []
    recorded = record(
        lambda: next(answers),
        url="u",
        api_version=VERSION,
        interval=2.0,
        duration=9.0,
        sleep=fake.sleep,
        clock=fake.clock,
        wall=fake.wall,
        on_entry=lambda r, e: seen.append(e),
    )
    assert [(e.offset_seconds, e.status) for e in recorded.entries] == [(0, 200), (2, 500), (4, 0), (8, 200)]
    assert seen == recorded.entries
    assert fake.now == 9.0  # the last poll at the duration
    replay = Replay(recorded)
    assert replay.document_at(5) == (0, b"")


def test_scheduled_events_url():
    assert (
        scheduled_events_url("http://169.254.169.254", "2019-08-01")
        == "http://169.254.169.254/metadata/scheduledevents?api-version=2019-08-01"
    )
    assert (
        scheduled_events_url("127.0.0.1:9010/metadata/scheduledevents?api-version=2017-11-01", VERSION)
        == "http://127.0.0.1:9010/metadata/scheduledevents?api-version=2017-11-01"
    )


def test_bad_recording_files(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"format": "other"}')
    with pytest.raises(RecordingError):
        load_recording(path)
    path.write_text(
        '{"format": "forewarn-recording/1", "url": "u", "api_version": "v", "started_at": "t",'
        ' "interval_seconds": 1, "entries": []}'
    )
    with pytest.raises(RecordingError):
        load_recording(path)


SCHEDULED = (
    '{"DocumentIncarnation":2,"Events":[{"EventId":"C7061BAC-AFDC-4513-B24B-AA5F13A16123",'
    '"EventStatus":"Scheduled","EventType":"Freeze","ResourceType":"VirtualMachine","Resources":["solo"],'
    '"NotBefore":"Mon, 20 Apr 2026 22:26:58 GMT"}]}'
)


@pytest.fixture
def replay_server():
    recording = Recording(
        "u",
        VERSION,
        "2026-04-20T22:11:58.000Z",
        1.0,
        [
            Entry(0.0, "a", 200, '{"DocumentIncarnation":1,"Events":[]}'),
            Entry(10.0, "b", 200, SCHEDULED),
            Entry(20.0, "c", 500, '{"error": "Internal server error. Retry the request."}'),
            Entry(30.0, "d", 200, '{"DocumentIncarnation":3,"Events":[]}'),
        ],
    )
    fake = FakeTime()
    logged = []
    handler = ReplayHandler(Replay(recording), speed=2.0, clock=fake.clock, wall=fake.wall, on_approval=logged.append)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve_replay(handler, sock, stop),), daemon=True)
    thread.start()
    base = "http://127.0.0.1:%d/metadata/scheduledevents" % sock.getsockname()[1]
    yield base, fake, logged
    loop.call_soon_threadsafe(stop.set)
    thread.join(5)
    loop.close()


def test_replay_over_http(replay_server):
    base, fake, logged = replay_server
    session = requests.Session()
    session.trust_env = False

    def get(version=VERSION, **headers):
        return session.get(base, params={"api-version": version}, headers={"Metadata": "true", **headers}, timeout=5)

    first = get()
    assert (first.status_code, first.content) == (200, b'{"DocumentIncarnation":1,"Events":[]}')
    assert first.headers["content-type"] == "application/json; charset=utf-8"
    fake.now = 5.0  # speed 2: recording offset 10
    assert get().content == SCHEDULED.encode()
    fake.now = 11.0  # offset 22: the recorded outage
    outage = get()
    assert (outage.status_code, outage.content) == (500, b'{"error": "Internal server error. Retry the request."}')
    fake.now = 500.0  # after the end: the last document stays
    assert get().content == b'{"DocumentIncarnation":3,"Events":[]}'

    fake.now = 6.0
    no_header = session.get(base, params={"api-version": VERSION}, timeout=5)
    assert (no_header.status_code, no_header.content) == (400, MISSING_METADATA_HEADER)
    assert get(version="2099-01-01").content == bad_api_version(NEWEST_SCHEDULED_EVENTS_VERSIONS)
    assert get(version="2099-01-01").status_code == 400
    assert session.get(base, headers={"Metadata": "true"}, timeout=5).status_code == 400  # no api-version
    assert get(version="2017-03-01").status_code == 200  # the preview needs no header
    missing = session.get(base.replace("scheduledevents", "nothing"), timeout=5)
    assert (missing.status_code, missing.content) == (404, NOT_FOUND)
    wrong = session.put(base, params={"api-version": VERSION}, headers={"Metadata": "true"}, timeout=5)
    assert (wrong.status_code, wrong.content, wrong.headers["allow"]) == (405, METHOD_NOT_ALLOWED, "GET, POST")

    approve = session.post(
        base,
        params={"api-version": VERSION},
        headers={"Metadata": "true"},
        timeout=5,
        json={
            "StartRequests": [
                {"EventId": "c7061bac-afdc-4513-b24b-aa5f13a16123"},
                {"EventId": "00000000-0000-0000-0000-000000000000"},
            ]
        },
    )
    assert (approve.status_code, approve.content) == (200, b"")
    [approval] = logged
    assert approval["offset_seconds"] == 12.0
    assert approval["event_ids"] == ["C7061BAC-AFDC-4513-B24B-AA5F13A16123", "00000000-0000-0000-0000-000000000000"]
    assert approval["not_in_document"] == ["00000000-0000-0000-0000-000000000000"]
    assert approval["caller"].startswith("127.0.0.1:")
    assert approval["at"] == "2026-04-20T22:12:04.000Z"
    assert get().content == SCHEDULED.encode()  # the replay did not react

    for body in (b"not json", b"[]", b'{"StartRequests": [{"Id": 1}]}', b""):
        bad = session.post(base, params={"api-version": VERSION}, headers={"Metadata": "true"}, data=body, timeout=5)
        assert (bad.status_code, bad.content) == (400, BAD_START_REQUESTS), body
    unauthenticated = session.post(
        base, params={"api-version": VERSION}, timeout=5, json={"StartRequests": [{"EventId": "X"}]}
    )
    assert unauthenticated.status_code == 400
    assert len(logged) == 1


def test_cli_help_and_replay_command(tmp_path):
    env = {"PYTHONPATH": str(ROOT / "src")}
    for command in ("record", "replay"):
        run = subprocess.run(
            [sys.executable, "-m", "forewarn", command, "--help"], capture_output=True, text=True, timeout=30, env=env
        )
        assert run.returncode == 0, run.stderr
        assert "Usage: forewarn " + command in run.stdout
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    run = subprocess.run(
        [sys.executable, "-m", "forewarn", "replay", str(broken)], capture_output=True, text=True, timeout=30, env=env
    )
    assert run.returncode == 1 and "forewarn-recording/1" in run.stderr


def test_cli_record_then_replay(server, tmp_path):
    """The commands themselves, briefly on real time: record 0.3 s of the idle VM, serve it, approve."""
    from helpers import free_port

    env = {"PYTHONPATH": str(ROOT / "src")}
    out = tmp_path / "idle.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "forewarn",
            "record",
            "--url",
            server.imds,
            "--out",
            str(out),
            "--interval",
            "100ms",
            "--duration",
            "300ms",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert "incarnation 1: 0 events" in run.stdout and "1 document recorded" in run.stdout
    [entry] = load_recording(out).entries
    assert entry.body == server.scheduled_events().text

    port = free_port()
    approvals = tmp_path / "approvals.jsonl"
    replaying = subprocess.Popen(
        [sys.executable, "-m", "forewarn", "replay", str(out), "--port", str(port), "--approvals", str(approvals)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert f"http://127.0.0.1:{port}/metadata/scheduledevents" in replaying.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        assert server.scheduled_events(base).content == entry.body.encode()
        approve = requests.post(
            f"{base}/metadata/scheduledevents",
            params={"api-version": VERSION},
            timeout=5,
            headers={"Metadata": "true"},
            json={"StartRequests": [{"EventId": "abc"}]},
        )
        assert approve.status_code == 200
        assert "approval at" in replaying.stdout.readline()
        assert json.loads(approvals.read_text())["event_ids"] == ["ABC"]
    finally:
        replaying.terminate()
        replaying.wait(10)


def test_a_recording_is_served_by_the_cloud_whose_surface_it_is_of():
    def recording(source: str) -> Recording:
        entry = Entry(0.0, "2026-04-20T22:00:00Z", 200, "NONE", etag="a1")
        return Recording("http://169.254.169.254/x", "", "2026-04-20T22:00:00Z", 1.0, [entry], source=source)

    assert isinstance(replay_handler(Replay(recording(AZURE))), ReplayHandler)
    assert isinstance(replay_handler(Replay(recording(GCE))), GceReplayHandler)
    with pytest.raises(ValueError, match="no registered cloud serves a recording of 'ec2-metadata'"):
        replay_handler(Replay(recording("ec2-metadata")))
