"""One writer per PostgreSQL database (store/writer.py), with real ``forewarn serve`` processes on one schema.

- A second ``--role single`` server is refused at start, and the refusal names the server that holds the database.
- A single server and a shared process exclude each other, whichever starts first (a shared process cannot follow a
  single server: it journals nothing for replicas).
- A single server that lost the database while another took its lock comes back stale: it writes no more, says so
  in /healthz and in each refusal, and does not exit; the other server's commits stand.
"""

from __future__ import annotations

import secrets
import time

import pytest
import requests

from forewarn.scenarios.server import ServerError
from helpers import Server
from pg_proxy import through
from replication_helpers import SHARED_FLEET, health, role, shared_server, until

psycopg = pytest.importorskip("psycopg")

FLEET = SHARED_FLEET  # the shared processes' fleet: every server of a test serves the same one


def server_in(tmp_path, name: str, url: str, extra: list[str] | None = None) -> Server:
    where = tmp_path / name
    where.mkdir()
    return Server(where, fleet_text=FLEET, db=url, extra=extra)


def refusal(server: Server) -> str:
    with pytest.raises(ServerError) as refused:
        server.start()
    return str(refused.value)


def event_ids(server: Server) -> list[str]:
    return [event["event_id"] for event in server.get("/v1/events", all="true")]


def stored_event_ids(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        return {row[0] for row in connection.execute("SELECT event_id FROM forewarn_azure_events")}


def test_a_second_single_server_on_one_database_is_refused_and_told_which_server_holds_it(tmp_path, postgres_url):
    with server_in(tmp_path, "first", postgres_url) as first:
        [event] = first.schedule(type="Freeze", vms=["vm0"])
        message = refusal(server_in(tmp_path, "second", postgres_url))
        assert "exited with status 1" in message
        assert "another process writes to this database (a forewarn server (role single, " in message
        assert f":{first.process.pid}, since " in message
        # The first goes on alone: nothing of the second reached the database.
        [later] = first.schedule(type="Reboot", vms=["vm1"])
        assert event_ids(first) == [event["event_id"], later["event_id"]]
        assert first.get("/healthz")["database"]["reachable"] is True
    assert stored_event_ids(postgres_url) == {event["event_id"], later["event_id"]}


def test_a_single_server_and_a_shared_process_exclude_each_other(tmp_path, postgres_url):
    with server_in(tmp_path, "single", postgres_url) as single:
        for process_role in ("shared", "replica"):
            message = refusal(shared_server(tmp_path, process_role, postgres_url, role=process_role))
            assert "(role single, " in message and f":{single.process.pid}, " in message
            assert "writes to this database alone; a shared process can only follow a leader" in message
        single.schedule(type="Freeze", vms=["vm0"])
    with shared_server(tmp_path, "leader", postgres_url) as leader:
        until(lambda: role(leader) == "leader", what="the shared process leads")
        message = refusal(server_in(tmp_path, "late-single", postgres_url))
        assert "another process writes to this database (a forewarn server (role leader, " in message
        assert f":{leader.process.pid}, " in message
        leader.schedule(type="Reboot", vms=["vm1"])
        assert len(event_ids(leader)) == 2


def test_a_server_that_lost_its_lock_to_another_writes_no_more_and_says_so(tmp_path, postgres_url, proxy):
    name = f"forewarn-{secrets.token_hex(4)}"
    with server_in(tmp_path, "cut-off", f"{through(postgres_url, proxy.port)}&application_name={name}") as cut_off:
        [first] = cut_off.schedule(type="Freeze", vms=["vm0"])
        proxy.cut()
        until(lambda: not sessions(postgres_url, name), what="PostgreSQL ends the cut-off server's session")
        with server_in(tmp_path, "taker", postgres_url) as taker:
            [taken] = taker.schedule(type="Reboot", vms=["vm1"])
            proxy.open()
            # Its probe (every 2 s) reconnects, finds the lock taken and stops writing for good.
            stale = until(lambda: cut_off.get("/healthz")["database"].get("stale"), what="the server says stale")
            assert "another process took its writer's lock (a forewarn server (role single, " in stale
            assert f":{taker.process.pid}, " in stale
            refused = cut_off.post("/v1/events", {"type": "Freeze", "vms": ["vm1"]})
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "StoreUnavailable"
            assert "writes no more" in refused.json()["error"]["message"]
            assert cut_off.process.poll() is None
            assert "lost the database while another process took its writer's lock" in cut_off.log_path.read_text()
            [after] = taker.schedule(type="Freeze", vms=["vm1"])
            assert event_ids(taker) == [first["event_id"], taken["event_id"], after["event_id"]]
    assert stored_event_ids(postgres_url) == {first["event_id"], taken["event_id"], after["event_id"]}


def sessions(url: str, name: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as admin:
        return [
            row[0] for row in admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))
        ]


def test_a_leader_that_took_over_after_losing_the_database_reports_it_reachable(tmp_path, postgres_url, proxy):
    """A replica that lost the database, then took over once it was back, reported it unreachable for as long as it
    led (a flag only its replica loop cleared): /healthz and forewarn_database_reachable follow the latest operation
    now."""
    with shared_server(tmp_path, "first", postgres_url) as first:
        until(lambda: role(first) == "leader", what="the first process leads")
        with shared_server(tmp_path, "second", through(postgres_url, proxy.port)) as second:
            until(lambda: role(second) == "replica", what="the second process follows")
            proxy.cut()
            until(lambda: health(second)["database"]["reachable"] is False, what="the replica sees the outage")
            first.kill()
            proxy.open()
            until(lambda: role(second) == "leader", what="the second process takes over")
            took_over = time.monotonic()
            second.schedule(type="Freeze", vms=["vm0"])
            until(lambda: health(second)["database"]["reachable"], timeout=5.0, what="/healthz: reachable")
            metrics = requests.get(f"{second.control}/metrics", timeout=5).text
            assert "forewarn_database_reachable 1.0" in metrics
            assert time.monotonic() - took_over < 10.0


def test_replicas_that_outlived_a_single_server_load_what_it_wrote_once_a_leader_is_back(tmp_path, postgres_url):
    """A single server journals nothing for replicas: a replica that followed an earlier leader would never see its
    commits. The next leader journals a reset, and every replica loads the whole state."""
    first = shared_server(tmp_path, "first", postgres_url).start()
    try:
        until(lambda: role(first) == "leader", what="the first process leads")
        with shared_server(tmp_path, "replica", postgres_url, role="replica") as replica:
            [before] = first.schedule(type="Freeze", vms=["vm0"])
            until(lambda: before["event_id"] in event_ids(replica), what="the replica follows")
            first.stop()
            with server_in(tmp_path, "single", postgres_url) as single:
                [alone] = single.schedule(type="Reboot", vms=["vm1"])
            with shared_server(tmp_path, "next", postgres_url) as leader:
                until(lambda: role(leader) == "leader", what="the next process leads")
                until(
                    lambda: alone["event_id"] in event_ids(replica),
                    what="the replica loads the single server's commits",
                )
                assert event_ids(replica) == event_ids(leader) == [before["event_id"], alone["event_id"]]
            assert "a single server" in (tmp_path / "replica" / "server.log").read_text()
    finally:
        first.stop()
