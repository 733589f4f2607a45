"""Recordings of a Compute Engine metadata server's maintenance-event: recorded with wait_for_change hanging GETs
from a real forewarn (web-1 of the demo fleet, on a manual clock), each value with its ETag, and served back with the
metadata server's request rules and hanging GETs of its own."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

from forewarn.gcp.metadata.replay import GceReplayHandler
from forewarn.recording import Entry, Recording, Replay, load_recording, record, save_recording, serve_replay
from forewarn.recording.model import GCE, RecordingError
from forewarn.recording.recorder import gce_fetch, maintenance_event_url
from helpers import ROOT, Server, free_port

FLAVOR = {"Metadata-Flavor": "Google"}
PATH = "/computeMetadata/v1/instance/maintenance-event"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    demo_fleet = (ROOT / "src/forewarn/data/demo-fleet.yaml").read_text()
    with Server(tmp_path_factory.mktemp("gce-recorded"), fleet_text=demo_fleet) as running:
        yield running


def test_maintenance_event_url():
    assert maintenance_event_url("http://metadata.google.internal") == "http://metadata.google.internal" + PATH
    assert maintenance_event_url("127.0.0.40:8169/") == "http://127.0.0.40:8169" + PATH
    given = "http://h/computeMetadata/v1/instance/preempted"
    assert maintenance_event_url(given) == given


def test_record_a_live_migration_with_hanging_gets_then_replay_it(demo, tmp_path):
    url = f"http://127.0.0.40:{demo.imds_port}{PATH}"
    fetch, close = gce_fetch(url, wait=30)
    recorded = Recording(url, "v1", "", 0.01, source=GCE)
    seen: list[Entry] = []
    arrived = threading.Semaphore(0)

    def on_entry(_, entry: Entry) -> None:
        seen.append(entry)
        arrived.release()

    worker = threading.Thread(
        target=record,
        args=(fetch,),
        kwargs={
            "url": url,
            "api_version": "v1",
            "interval": 0.01,
            "until_empty": True,
            "on_entry": on_entry,
            "recording": recorded,
            "source": GCE,
        },
        daemon=True,
    )
    worker.start()
    try:
        assert arrived.acquire(timeout=10)  # NONE at once (last_etag=0): web-1 now watches the key
        demo.post("/v1/gce/maintenance", {"instances": ["web-1"], "notice": "10m"}, expect=201)
        demo.post("/v1/clock/next", expect=200)  # the notice: the hanging GET answers
        assert arrived.acquire(timeout=10)
        notified = requests.get(url, headers=FLAVOR, timeout=10)
        demo.post("/v1/clock/next", expect=200)  # the migration starts: the value stays
        demo.post("/v1/clock/next", expect=200)  # and ends: NONE, and the recorder stops (until_empty)
        assert arrived.acquire(timeout=10)
        worker.join(10)
        assert not worker.is_alive()
    finally:
        close()
    none = requests.get(url, headers=FLAVOR, timeout=10)
    assert [(e.status, e.body) for e in seen] == [
        (200, "NONE"),
        (200, "MIGRATE_ON_HOST_MAINTENANCE"),
        (200, "NONE"),
    ]
    assert [e.etag for e in seen] == [none.headers["etag"], notified.headers["etag"], none.headers["etag"]]
    assert seen[0].offset_seconds <= seen[1].offset_seconds <= seen[2].offset_seconds

    path = tmp_path / "gce.json"
    save_recording(recorded, path)
    data = json.loads(path.read_text())
    assert data["source"] == "gce-maintenance-event" and data["entries"][1]["etag"] == notified.headers["etag"]
    loaded = load_recording(path)
    assert loaded.source == GCE and loaded.entries == seen

    # Served back: the same bytes and ETags, at their recorded offsets, with the metadata server's rules.
    now = [0.0]
    handler = GceReplayHandler(Replay(loaded), clock=lambda: now[0])
    with replaying(handler) as base:
        for entry in loaded.entries:
            now[0] = entry.offset_seconds + 0.0001
            answer = requests.get(base + PATH, headers=FLAVOR, timeout=5)
            assert (answer.status_code, answer.text, answer.headers["etag"]) == (200, entry.body, entry.etag)
            assert answer.headers["metadata-flavor"] == "Google"
        refused = requests.get(base + PATH, timeout=5)
        assert refused.status_code == 403 and "Missing Metadata-Flavor:Google header." in refused.text
        assert requests.get(base + "/computeMetadata/v1/instance/preempted", headers=FLAVOR).status_code == 404


def test_replay_answers_a_hanging_get_when_the_next_value_comes():
    recording = Recording(
        "http://127.0.0.40:8169" + PATH,
        "v1",
        "2026-04-20T22:11:58.000Z",
        1.0,
        [
            Entry(0.0, "a", 200, "NONE", "etag-none"),
            Entry(15.0, "b", 200, "TERMINATE_ON_HOST_MAINTENANCE", "etag-terminate"),
            Entry(90.0, "c", 200, "NONE", "etag-none"),
        ],
        source=GCE,
    )
    # Real time: the change comes 1.5 s in, and the value holds for 7.5 s after. The first GET must come before the
    # change and the timed-out one before the next: on a loaded machine a request took longer than 0.2 s (with the
    # change 0.2 s in, a full-suite run's first GET saw the changed value), and at 0.4 s of hold, a busy CI run saw
    # the timed-out GET answer NONE.
    handler = GceReplayHandler(Replay(recording), speed=10.0)
    with replaying(handler) as base:
        began = time.monotonic()
        first = requests.get(base + PATH, headers=FLAVOR, params={"wait_for_change": "true", "last_etag": "0"})
        assert (first.text, first.headers["etag"]) == ("NONE", "etag-none")  # another ETag: at once
        changed = requests.get(
            base + PATH, headers=FLAVOR, params={"wait_for_change": "True", "last_etag": "etag-none"}, timeout=5
        )
        assert (changed.text, changed.headers["etag"]) == ("TERMINATE_ON_HOST_MAINTENANCE", "etag-terminate")
        assert 1.4 < time.monotonic() - began < 5
        # timeout_sec is recording time: 1 s at speed 10 answers after 0.1 s, with the value unchanged.
        timed_out = requests.get(
            base + PATH,
            headers=FLAVOR,
            params={"wait_for_change": "true", "last_etag": "etag-terminate", "timeout_sec": "1"},
            timeout=5,
        )
        assert timed_out.text == "TERMINATE_ON_HOST_MAINTENANCE"
        bad = requests.get(base + PATH, headers=FLAVOR, params={"wait_for_change": "true", "timeout_sec": "x"})
        assert bad.status_code == 400 and bad.text == "Invalid value for timeout_sec: x\n"
        assert not handler.waiting


def test_a_recording_of_an_unknown_source_is_refused():
    data = Recording("u", "v1", "t", 1.0, [Entry(0.0, "a", 200, "NONE")], source=GCE).to_json()
    data["source"] = "oracle-cloud"
    with pytest.raises(RecordingError, match="unknown source 'oracle-cloud'"):
        Recording.from_json(data)


def test_cli_records_and_replays_a_gce_maintenance_event(demo, tmp_path):
    env = {"PYTHONPATH": str(ROOT / "src")}
    out = tmp_path / "gce.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "forewarn",
            "record",
            "--gce",
            "--url",
            f"http://127.0.0.42:{demo.imds_port}",
            "--out",
            str(out),
            "--duration",
            "300ms",
            "--timeout",
            "1s",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert "status 200: NONE (ETag " in run.stdout and "1 document recorded" in run.stdout
    recorded = load_recording(out)
    assert recorded.source == GCE and recorded.url.endswith(":%d%s" % (demo.imds_port, PATH))
    port = free_port()
    replay = subprocess.Popen(
        [sys.executable, "-m", "forewarn", "replay", str(out), "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert f"http://127.0.0.1:{port}{PATH}" in replay.stdout.readline()
        answer = requests.get(f"http://127.0.0.1:{port}{PATH}", headers=FLAVOR, timeout=5)
        assert (answer.text, answer.headers["etag"]) == ("NONE", recorded.entries[0].etag)
    finally:
        replay.terminate()
        replay.wait(10)


class replaying:
    """A replay handler served on a free loopback port from a thread of its own, for the length of a with block."""

    def __init__(self, handler: GceReplayHandler):
        self.handler = handler

    def __enter__(self) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        self.thread = threading.Thread(
            target=self.loop.run_until_complete, args=(serve_replay(self.handler, sock, self.stop),), daemon=True
        )
        self.thread.start()
        return "http://127.0.0.1:%d" % sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(5)
        self.loop.close()
