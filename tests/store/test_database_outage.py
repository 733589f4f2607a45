"""A PostgreSQL database lost under write load, at the very COMMIT of a command, and out of reach for longer than the
store waits to learn that commit's outcome: the engine then holds a change the database may lack, and cannot be
rebuilt from it. The server waits for its database (it used to exit with status 70): every read and write is
refused, each surface in its own retryable shape, /healthz says the database is unreachable, and once the database
is back the engine is rebuilt from it and everything acknowledged is there. A real ``forewarn serve`` process, real
HTTP clients, and a TCP proxy in front of PostgreSQL that the test cuts and restores."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from forewarn.store.postgres import RESOLVE_WITHIN
from helpers import Server
from pg_proxy import through
from replication_helpers import until

psycopg = pytest.importorskip("psycopg")

FLEET = """
default_vm: vm0
hosts: [{name: host-01}, {name: host-02}, {name: host-03}]
vms:
""" + "".join(f"  - {{name: vm{i}, host: host-0{i % 3 + 1}}}\n" for i in range(8))
WRITERS = 4
REFUSED_WITHIN = 2.0  # seconds: a request refused while the database is out of reach is refused at once
BACK_WITHIN = 15.0  # seconds: the store's reconnecting backoff tops out at 5 s; the probe runs every 2 s


def write_load(server: Server, stop: threading.Event, acknowledged: list[str], answers: list[int], vm: str) -> None:
    """Freeze after Freeze on one VM, through the group commit, as fast as the server answers."""
    while not stop.is_set():
        try:
            response = requests.post(f"{server.control}/v1/events", json={"type": "Freeze", "vms": [vm]}, timeout=30)
        except requests.RequestException:
            answers.append(0)
            continue
        answers.append(response.status_code)
        if response.status_code == 201:
            acknowledged.extend(event["event_id"] for event in response.json())
        else:
            time.sleep(0.05)  # as a client told to retry would wait


def stored(url: str) -> tuple[set[str], str]:
    with psycopg.connect(url) as connection:
        events = {row[0] for row in connection.execute("SELECT event_id FROM forewarn_azure_events")}
        [clock] = connection.execute("SELECT value FROM forewarn_meta WHERE key = 'now'").fetchone()
    return events, clock


def timed(call):
    started = time.monotonic()
    response = call()
    elapsed = time.monotonic() - started
    assert elapsed < REFUSED_WITHIN, f"a refusal took {elapsed:.2f} s"
    return response


def test_a_database_lost_at_a_commit_is_waited_for_with_503s_and_nothing_acknowledged_is_lost(
    tmp_path, postgres_url, proxy
):
    with Server(tmp_path, fleet_text=FLEET, db=through(postgres_url, proxy.port)) as server:
        moved = server.advance("1h")["now"]  # acknowledged: it must survive the outage
        acknowledged: list[str] = []
        answers: list[int] = []
        stop = threading.Event()
        writers = [
            threading.Thread(target=write_load, args=(server, stop, acknowledged, answers, f"vm{i}"), daemon=True)
            for i in range(WRITERS)
        ]
        for writer in writers:
            writer.start()
        until(lambda: len(acknowledged) >= 10, what="the write load commits")
        proxy.commit_trap = "outage"  # the next commit's COMMIT never arrives, and the database stays away
        assert proxy.trapped.wait(10)
        cut_at = time.monotonic()
        # The commit waits up to RESOLVE_WITHIN for the database, fails, and the engine cannot be reloaded: this is
        # where the server used to exit (status 70).
        time.sleep(RESOLVE_WITHIN + 3)
        assert server.process.poll() is None, server.log_path.read_text()[-2000:]
        log = server.log_path.read_text()
        assert "answering 503 until the database is back" in log

        write = timed(lambda: server.post("/v1/events", {"type": "Reboot", "vms": ["vm7"]}))
        assert write.status_code == 503 and write.json()["error"]["code"] == "StoreUnavailable"
        assert int(write.headers["retry-after"]) >= 1
        # The engine may hold the lost commit's change: nothing is read from it until it is rebuilt.
        read = timed(lambda: requests.get(f"{server.control}/v1/events", timeout=10))
        assert read.status_code == 503 and read.json()["error"]["code"] == "StoreUnavailable"
        document = timed(lambda: server.scheduled_events())
        assert document.status_code == 500  # Azure IMDS answers its own failures so, and agents retry
        assert document.json() == {"error": "Internal server error. Retry the request."}
        health = server.get("/healthz")["database"]
        assert health["reachable"] is False and health["error"]

        proxy.open()
        restored = time.monotonic()
        until(lambda: server.get("/healthz")["database"]["reachable"], timeout=BACK_WITHIN, what="reachable again")
        until(lambda: len(answers) and answers[-1] == 201, timeout=BACK_WITHIN, what="the write load commits again")
        back_after = time.monotonic() - restored
        stop.set()
        for writer in writers:
            writer.join(35)
        in_memory = {event["event_id"] for event in server.get("/v1/events", all="true")}
        assert server.get("/v1/clock")["now"] == moved
        assert "reloaded the engine from the database after a failed commit; serving again" in (
            server.log_path.read_text()
        )
    events, clock = stored(postgres_url)
    assert set(acknowledged) <= events  # nothing acknowledged is lost
    assert in_memory == events  # and memory holds what the database holds, the lost commit's change not included
    assert clock >= moved.replace("Z", "+00:00")
    print(
        f"\n{len(acknowledged)} acknowledged; {answers.count(503)} refused (503); outage {restored - cut_at:.1f} s; "
        f"writes committed again {back_after:.1f} s after the database came back"
    )
