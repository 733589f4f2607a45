"""The first start of a shared forewarn (docs/replicas.md): processes started on one new PostgreSQL database in any
order all come up, and the one given the fleet initializes it (replication/start.py).

- A ``shared`` process without ``--fleet`` started first waits for the database to be initialized instead of leading
  an empty database (and exiting: "the database is empty; give a fleet file"); once a process given the fleet
  starts, that one leads and the first follows it.
- The three processes of docs/replicas.md (``shared`` with the fleet, ``shared`` and ``replica`` without), started at
  the same moment on a fresh schema, all come up with one leader, round after round.
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from forewarn.scenarios.server import PortTaken, launch_serve
from helpers import Server
from replication_helpers import FAST, SHARED_FLEET, converged, role, until

psycopg = pytest.importorskip("psycopg")

ROUNDS = 3
START_WAIT = 60.0  # seconds to wait for a start (launch_serve gives up after 30 s, and says why)


def process(tmp_path, name: str, url: str, role_name: str, fleet: bool) -> Server:
    where = tmp_path / name
    where.mkdir()
    return Server(where, fleet_text=SHARED_FLEET if fleet else None, db=url, extra=["--role", role_name, *FAST])


@contextmanager
def fresh_schema(postgres_url: str) -> Iterator[str]:
    """Another fresh schema beside the fixture's, for one more round."""
    base, options = postgres_url.split("?options=-csearch_path%3D")
    schema = f"{options}_{secrets.token_hex(2)}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            yield f"{base}?options=-csearch_path%3D{schema}"
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def start_together(servers: list[Server]) -> list[BaseException]:
    """Start every server at once (each launch waits for its /healthz); what each start raised."""
    failures: list[BaseException] = []

    def start(server: Server) -> None:
        try:
            server.start()
        except BaseException as error:  # reported by the test, with the server's log
            failures.append(error)

    threads = [threading.Thread(target=start, args=(server,)) for server in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(START_WAIT + 10)
    return failures


def test_a_shared_process_without_a_fleet_started_first_waits_for_the_one_given_the_fleet(tmp_path, postgres_url):
    without = process(tmp_path, "without", postgres_url, "shared", fleet=False)
    given = process(tmp_path, "given", postgres_url, "shared", fleet=True)
    waiting = threading.Thread(target=without.start)
    waiting.start()
    try:
        until(lambda: "waiting for a process given a fleet" in _log(without), what="the first process waits")
        assert without.process is None or without.process.poll() is None, _log(without)
        with given:
            waiting.join(START_WAIT)
            assert role(given) == "leader"
            assert role(without) == "replica", _log(without)
            until(lambda: converged([given, without]), what="both serve the same documents")
    finally:
        waiting.join(START_WAIT)
        without.stop()


def test_the_three_processes_of_the_replicas_page_started_together_all_come_up(tmp_path, postgres_url):
    for round_number in range(ROUNDS):
        with fresh_schema(postgres_url) as url:
            where = tmp_path / f"round-{round_number}"
            where.mkdir()
            servers = [
                process(where, "replica", url, "replica", fleet=False),
                process(where, "shared", url, "shared", fleet=False),
                process(where, "given", url, "shared", fleet=True),
            ]
            try:
                failures = start_together(servers)
                assert failures == [], "\n".join(str(failure) for failure in failures)
                assert sorted(role(server) or "down" for server in servers) == ["leader", "replica", "replica"]
                assert role(servers[2]) == "leader"  # the only one that could fill the database
                until(lambda started=servers: converged(started), what="every process serves the same documents")
            finally:
                for server in servers:
                    server.stop()


def test_a_process_whose_port_is_taken_neither_leads_nor_fills_the_database(tmp_path, postgres_url):
    """A start that cannot listen stops before it opens the store: the lock and the empty database are left for the
    process started again on free ports (a test's retry, an operator's), which then leads, as given the fleet."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        given = process(tmp_path, "given", postgres_url, "shared", fleet=True)
        given.args[given.args.index("--port") + 1] = str(taken.getsockname()[1])
        with pytest.raises(PortTaken):
            launch_serve(given.args, given.log_path, given.control)
    with psycopg.connect(postgres_url, autocommit=True) as database:
        assert database.execute("SELECT to_regclass('forewarn_meta')").fetchone() == (None,)
        free = database.execute("SELECT pg_try_advisory_lock(hashtext('forewarn:' || current_schema()))").fetchone()
        assert free == (True,)  # the leader's lock (store/writer.py's LOCK_KEY); let go as this connection closes
    with process(tmp_path, "again", postgres_url, "shared", fleet=True) as again:
        assert role(again) == "leader"


def _log(server: Server) -> str:
    return server.log_path.read_text() if server.log_path.exists() else ""
