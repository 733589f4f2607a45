"""PostgreSQL connections that drop under a running server: a real ``forewarn serve`` process on a PostgreSQL database,
real HTTP clients, and (where the test must cut the network) a small TCP proxy on loopback between the two.

- A session ended by ``pg_terminate_backend`` is replaced and the next writes go through.
- A database out of reach: writes are refused at once in each surface's retryable shape, reads from memory go on,
  the process stays up; once the database is back, writes work again and nothing acknowledged is lost.
- A connection lost during COMMIT: the outcome is read back from PostgreSQL, never guessed (no lost or doubled write).
- Deadlines that fell due while the database was out of reach are applied once it is back (real clock).
- The outbox sender outlives a store failure.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import xml.etree.ElementTree as ET

import pytest
import requests

from forewarn.app.outbox import OutboxSender
from forewarn.app.runtime import Maintenance
from forewarn.store import StoreUnavailable
from helpers import T0, Server, open_store, small_fleet
from pg_proxy import through

psycopg = pytest.importorskip("psycopg")

SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
FLEET = f"""
defaults: {{subscription: {SUB}, resource_group: Contoso-RG, location: westeurope}}
default_vm: solo
hosts: [{{name: host-01}}, {{name: host-02}}]
vms:
  - {{name: solo, host: host-01}}
  - {{name: other, host: host-02}}
ec2_instances:
  - {{id: i-0aaaaaaaaaaaaaaa1, host: host-02}}
"""
VM_PATH = f"/subscriptions/{SUB}/resourceGroups/contoso-rg/providers/Microsoft.Compute/virtualMachines/solo"
WRITE_BOUND = 2.0  # seconds within which a write must be refused while the database is out of reach
BACK_WITHIN = 15.0  # seconds within which writes must work again once the database is back


# ------------------------------------------------------------------------------------------------ helpers
def sessions(admin_url: str, name: str) -> list[int]:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        return [
            row[0] for row in admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))
        ]


def terminate(admin_url: str, name: str) -> None:
    """End the server's session (found by its application_name) and wait until PostgreSQL has let it go."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
        assert ended == [(True,)]
        deadline = time.monotonic() + 5
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone():
            assert time.monotonic() < deadline, "the terminated session did not end"
            time.sleep(0.02)


def imds_approve(server: Server, event_id: str) -> requests.Response:
    return requests.post(
        f"{server.imds}/metadata/scheduledevents",
        params={"api-version": "2020-07-01"},
        headers={"Metadata": "true"},
        json={"StartRequests": [{"EventId": event_id}]},
        timeout=10,
    )


def arm_restart(server: Server) -> requests.Response:
    return requests.post(f"{server.arm}{VM_PATH}/restart", params={"api-version": "2024-07-01"}, timeout=10)


def ec2_register(server: Server) -> requests.Response:
    return requests.post(
        server.ec2,
        data={
            "Action": "RegisterInstanceEventNotificationAttributes",
            "Version": "2016-11-15",
            "InstanceTagAttribute.IncludeAllTagsOfInstance": "true",
        },
        timeout=10,
    )


def all_events(server: Server) -> list[dict]:
    return server.get("/v1/events", all="true")


def stored(postgres_url: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """What the database holds, read directly: each event's status, and each event's journal."""
    with psycopg.connect(postgres_url) as connection:
        statuses = dict(connection.execute("SELECT event_id, status FROM forewarn_azure_events").fetchall())
        journals: dict[str, list[str]] = {}
        for event_id, kind in connection.execute(
            "SELECT event_id, kind FROM forewarn_journal WHERE event_id IS NOT NULL ORDER BY seq"
        ):
            journals.setdefault(event_id, []).append(kind)
    return statuses, journals


# -------------------------------------------------------------------------------------------------- tests
def test_the_session_is_named_forewarn_unless_the_url_names_it(postgres_url):
    store = open_store(postgres_url)
    try:
        assert store.connection.execute("SHOW application_name").fetchone()[0] == "forewarn"
    finally:
        store.close()
    store = open_store(f"{postgres_url}&application_name=fleet-a")
    try:
        assert store.connection.execute("SHOW application_name").fetchone()[0] == "fleet-a"
    finally:
        store.close()


def test_a_terminated_session_is_replaced_and_the_next_writes_gothrough(tmp_path, postgres_url):
    name = f"forewarn-test-{secrets.token_hex(4)}"
    url = f"{postgres_url}&application_name={name}"
    with Server(tmp_path, fleet_text=FLEET, db=url) as server:
        assert len(sessions(postgres_url, name)) == 1
        terminate(postgres_url, name)
        [event] = server.schedule(type="Freeze", vms=["solo"])
        terminate(postgres_url, name)
        approved = imds_approve(server, event["event_id"])
        assert approved.status_code == 200, approved.text
        assert server.process.poll() is None
        assert len(sessions(postgres_url, name)) == 1
        log = server.log_path.read_text()
        assert log.count("database connection lost") == 2 and log.count("reconnected to the database after") == 2
        before = all_events(server)
    with Server(tmp_path, fleet_text=FLEET, db=url) as again:
        after = all_events(again)
        assert after == before
        assert [(e["event_id"], e["status"], e["approvals"]) for e in after] == [
            (event["event_id"], "Started", ["solo"])
        ]


def test_a_database_out_of_reach_refuses_writes_in_each_surface_shape_and_nothing_acknowledged_is_lost(
    tmp_path, postgres_url, proxy
):
    url = through(postgres_url, proxy.port)
    with Server(tmp_path, fleet_text=FLEET, db=url) as server:
        [first] = server.schedule(type="Freeze", vms=["solo"])
        document = server.scheduled_events()
        assert document.status_code == 200
        proxy.cut()

        def timed(call):
            started = time.monotonic()
            response = call()
            elapsed = time.monotonic() - started
            assert elapsed < WRITE_BOUND, f"a refusal took {elapsed:.2f} s"
            return response

        control = timed(lambda: server.post("/v1/events", {"type": "Reboot", "vms": ["other"]}))
        imds = timed(lambda: imds_approve(server, first["event_id"]))
        arm = timed(lambda: arm_restart(server))
        ec2 = timed(lambda: ec2_register(server))
        clock = timed(lambda: server.post("/v1/clock/advance", {"by": "1m"}))

        assert control.status_code == 503 and control.json()["error"]["code"] == "StoreUnavailable"
        assert int(control.headers["retry-after"]) >= 1
        assert clock.status_code == 503 and clock.json()["error"]["code"] == "StoreUnavailable"
        assert imds.status_code == 500 and imds.json() == {"error": "Internal server error. Retry the request."}
        assert arm.status_code == 503 and arm.json()["error"]["code"] == "ServiceUnavailable"
        assert int(arm.headers["retry-after"]) >= 1
        assert ec2.status_code == 503
        error = ET.fromstring(ec2.text).find("Errors/Error")
        assert error.findtext("Code") == "ServiceUnavailable", ec2.text

        # Reads are served from memory, unchanged: nothing refused above left a trace.
        again = server.scheduled_events()
        assert again.status_code == 200 and again.content == document.content
        assert [e["event_id"] for e in server.get("/v1/events")] == [first["event_id"]]
        # Ended events are read from the database (they leave memory once committed): the listing that includes them
        # is refused while it is out of reach, in the control API's retryable shape.
        history = timed(lambda: requests.get(f"{server.control}/v1/events", params={"all": "true"}, timeout=10))
        assert history.status_code == 503 and history.json()["error"]["code"] == "StoreUnavailable"
        assert server.get("/v1/clock")["mode"] == "manual"
        assert server.process.poll() is None

        proxy.open()
        deadline = time.monotonic() + BACK_WITHIN
        while True:
            retried = server.post("/v1/events", {"type": "Reboot", "vms": ["other"]})
            if retried.status_code == 201:
                break
            assert retried.status_code == 503 and time.monotonic() < deadline, retried.text
            time.sleep(0.1)
        [second] = retried.json()
        assert imds_approve(server, first["event_id"]).status_code == 200
        assert arm_restart(server).status_code == 202
        assert ec2_register(server).status_code == 200
        log = server.log_path.read_text()
        assert "database connection lost" in log and "reconnected to the database after" in log
        described = requests.post(
            server.ec2,
            data={"Action": "DescribeInstanceEventNotificationAttributes", "Version": "2016-11-15"},
            timeout=10,
        )
        assert "<includeAllTagsOfInstance>true</includeAllTagsOfInstance>" in described.text
        acknowledged = all_events(server)
    # Memory and database agree, and hold what was acknowledged: the first event approved (Started), the Reboot
    # scheduled once the database was back, and one user restart (the refused one left nothing).
    statuses, journals = stored(postgres_url)
    assert statuses == {e["event_id"]: e["status"] for e in acknowledged}
    assert statuses[first["event_id"]] == "Started" and second["event_id"] in statuses
    assert [e["source"] for e in acknowledged].count("User") == 1
    assert journals[first["event_id"]] == ["scheduled", "approved", "started"]


@pytest.mark.parametrize("cut", ["after", "before"])
def test_a_connection_lost_during_commit_is_resolved_from_the_database(tmp_path, postgres_url, proxy, cut):
    """``after``: PostgreSQL committed, the answer never came: the command is answered as done, and is not written
    twice. ``before``: it rolled back: the same rows are written again on a new connection."""
    url = through(postgres_url, proxy.port)
    with Server(tmp_path, fleet_text=FLEET, db=url) as server:
        proxy.commit_trap = cut
        [event] = server.schedule(type="Freeze", vms=["solo"])
        assert proxy.trapped.is_set()
        log = server.log_path.read_text()
        assert "database connection lost" in log
        assert ("had committed" in log) == (cut == "after")
        assert ("writing it again" in log) == (cut == "before")
        assert [e["event_id"] for e in all_events(server)] == [event["event_id"]]
        journal = server.get(f"/v1/events/{event['event_id']}/journal")
        assert [entry["what"] for entry in journal] == ["scheduled"]
        assert server.process.poll() is None
    assert stored(postgres_url) == ({event["event_id"]: "Scheduled"}, {event["event_id"]: ["scheduled"]})


def test_deadlines_due_while_the_database_is_out_of_reach_are_applied_once_it_is_back(tmp_path, postgres_url, proxy):
    url = through(postgres_url, proxy.port)
    # x60: a minute of notice is a wall second; the Freeze then lasts five wall seconds.
    with Server(tmp_path, fleet_text=FLEET, db=url, clock="real", extra=["--speed", "60"]) as server:
        [event] = server.schedule(type="Freeze", vms=["solo"], notice="1m")
        proxy.cut()
        due = time.monotonic() + 1.2
        while time.monotonic() < due:  # the deadline passes while the database is out of reach
            response = server.scheduled_events()
            assert response.status_code == 200
            assert [e["EventStatus"] for e in response.json()["Events"]] == ["Scheduled"]
            time.sleep(0.1)
        assert server.process.poll() is None
        proxy.open()
        deadline = time.monotonic() + BACK_WITHIN
        while stored(postgres_url)[0][event["event_id"]] == "Scheduled":
            assert time.monotonic() < deadline, "the deadline was not applied once the database was back"
            time.sleep(0.1)
        assert stored(postgres_url)[1][event["event_id"]][:2] == ["scheduled", "started"]
        response = server.scheduled_events()
        assert response.status_code == 200
        assert [e["EventStatus"] for e in response.json()["Events"]] in (["Started"], [])  # Completed: gone


def test_the_outbox_sender_outlives_a_store_failure_between_its_reads(tmp_path):
    """A store that fails after the due messages were read (while the sender works out how long to sleep) used to end
    the sender's task for good: no delivery was ever sent again."""
    service = Maintenance.open(open_store(str(tmp_path / "f.db")), small_fleet(), "manual", 1.0, T0, "seed")
    reads = []
    working = service.store.next_delivery_at

    def flaky(*args, **kwargs):
        reads.append(time.monotonic())
        if len(reads) == 1:
            raise StoreUnavailable("the database connection was lost; reconnecting")
        return working(*args, **kwargs)

    service.store.next_delivery_at = flaky

    async def run():
        sender = asyncio.create_task(OutboxSender(service).run())
        deadline = time.monotonic() + 5
        while len(reads) < 2:
            assert not sender.done(), sender.exception()
            assert time.monotonic() < deadline, "the sender never read the outbox again"
            await asyncio.sleep(0.05)
        sender.cancel()

    asyncio.run(run())
