"""Several processes on one PostgreSQL schema: one leader, metadata replicas that follow it and forward writes to it
(docs/replicas.md)."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime
from email.utils import parsedate_to_datetime

import psycopg
import requests

from helpers import ROOT
from replication_helpers import SHARED_FLEET, converged, document, health, role, shared_server, until, vm_url


def test_a_replica_serves_the_leaders_committed_documents_and_forwards_writes(tmp_path, postgres_url):
    with shared_server(tmp_path, "a", postgres_url) as leader, shared_server(tmp_path, "b", postgres_url) as replica:
        assert (role(leader), role(replica)) == ("leader", "replica")
        assert health(replica)["leader"]["node"] == health(leader)["node"]
        scheduled = leader.schedule(type="Reboot", vms=["vm1"], notice="15m")[0]
        until(lambda: converged([leader, replica]), what="the replica holds the leader's documents")
        assert scheduled["event_id"] in document(replica, "vm1").text

        # A VM's approval at the replica is committed by the leader, and answered as the leader answers it.
        approval = requests.post(
            vm_url(replica, "vm1"),
            headers={"Metadata": "true"},
            json={"StartRequests": [{"EventId": scheduled["event_id"]}]},
            timeout=10,
        )
        assert (approval.status_code, approval.content) == (200, b"")
        assert "x-forewarn-position" not in approval.headers  # between processes only
        assert leader.get(f"/v1/events/{scheduled['event_id']}")["status"] == "Started"
        # The replica answered once it held its own write: the VM reads it there next.
        assert document(replica, "vm1").json()["Events"][0]["EventStatus"] == "Started"
        # Another VM's event is not this VM's to start: the leader resolved the VM behind the replica's connection.
        other = leader.schedule(type="Reboot", vms=["vm2"], notice="15m")[0]
        refused, direct = (
            requests.post(
                vm_url(server, "vm1"),
                headers={"Metadata": "true"},
                json={"StartRequests": [{"EventId": other["event_id"]}]},
                timeout=10,
            )
            for server in (replica, leader)
        )
        assert refused.status_code == 400 and (refused.content, refused.headers["content-type"]) == (
            direct.content,
            direct.headers["content-type"],
        )
        assert leader.get(f"/v1/events/{other['event_id']}")["status"] == "Scheduled"

        # A control command at the replica: the leader's status and body.
        advanced = requests.post(f"{replica.control}/v1/clock/advance", json={"by": "1m"}, timeout=10)
        assert advanced.status_code == 200 and advanced.json()["now"] == leader.get("/v1/clock")["now"]
        assert replica.get("/v1/clock")["now"] == advanced.json()["now"]
        assert "x-forewarn-position" not in advanced.headers
        bad = requests.post(f"{replica.control}/v1/clock/advance", json={"by": "soon"}, timeout=10)
        direct = requests.post(f"{leader.control}/v1/clock/advance", json={"by": "soon"}, timeout=10)
        assert (bad.status_code, bad.json()) == (direct.status_code, direct.json()) and bad.status_code == 400

        # ARM and EC2 commands at the replica: the leader's answers; URLs in them name the replica, as asked.
        restarted = requests.post(
            f"{replica.arm}/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/forewarn-rg/providers/"
            "Microsoft.Compute/virtualMachines/vm0/restart?api-version=2024-07-01",
            timeout=10,
        )
        assert restarted.status_code == 202, restarted.text
        assert restarted.headers["location"].startswith(f"{replica.arm}/")
        assert "x-forewarn-position" not in restarted.headers
        assert requests.get(restarted.headers["location"], timeout=10).status_code in (200, 202)
        registered = requests.post(
            replica.ec2,
            data={
                "Action": "RegisterInstanceEventNotificationAttributes",
                "Version": "2016-11-15",
                "InstanceTagAttribute.IncludeAllTagsOfInstance": "true",
            },
            timeout=10,
        )
        assert registered.status_code == 200 and b"<includeAllTagsOfInstance>true" in registered.content
        until(lambda: converged([leader, replica]), what="the replica follows the approval and the clock")
        ready = requests.get(f"{replica.control}/readyz", timeout=5)
        assert ready.status_code == 200 and ready.json()["role"] == "replica"
        assert ready.json()["lag"]["changes"] == 0 and ready.json()["database"]["reachable"] is True
        metrics = requests.get(f"{replica.control}/metrics", timeout=5)
        assert metrics.headers["content-type"].startswith("text/plain")
        assert 'forewarn_requests_total{status="200",surface="azure_imds"}' in metrics.text
        assert "forewarn_leader 0.0" in metrics.text
        assert "forewarn_leader 1.0" in requests.get(f"{leader.control}/metrics", timeout=5).text


def test_a_replica_takes_over_when_the_leader_is_killed(tmp_path, postgres_url):
    with shared_server(tmp_path, "a", postgres_url) as first, shared_server(tmp_path, "b", postgres_url) as second:
        event = first.schedule(type="Reboot", vms=["vm0"], notice="15m")[0]
        until(lambda: converged([first, second]), what="the replica follows")
        before = document(second, "vm0").content
        first.kill()
        until(lambda: role(second) == "leader", timeout=10, what="the replica takes over")
        assert document(second, "vm0").content == before  # nothing committed was lost, nothing uncommitted shown
        assert health(second)["failovers"] == 1 and health(second)["leader"]["term"] == 2
        assert second.advance("20m")["now"].startswith("2026-04-20T22:3")
        assert second.get(f"/v1/events/{event['event_id']}")["status"] != "Scheduled"
        # The killed process comes back as a replica of the new leader, and catches up.
        first.start()
        assert role(first) == "replica"
        until(lambda: converged([first, second]), what="the restarted process catches up")


def test_a_replica_without_a_leader_answers_reads_and_refuses_writes_in_each_surfaces_own_terms(tmp_path, postgres_url):
    with shared_server(tmp_path, "a", postgres_url) as leader:
        with shared_server(tmp_path, "b", postgres_url, role="replica") as replica:
            event = leader.schedule(type="Reboot", vms=["vm3"], notice="15m")[0]
            until(lambda: converged([leader, replica]), what="the replica follows")
            served = document(replica, "vm3").content
            leader.kill()
            assert role(replica) == "replica"  # --role replica never leads
            assert document(replica, "vm3").content == served
            imds = requests.post(
                vm_url(replica, "vm3"),
                headers={"Metadata": "true"},
                json={"StartRequests": [{"EventId": event["event_id"]}]},
                timeout=10,
            )
            assert imds.status_code == 500 and imds.json() == {"error": "Internal server error. Retry the request."}
            control = requests.post(f"{replica.control}/v1/clock/advance", json={"by": "1m"}, timeout=10)
            assert control.status_code == 503 and control.json()["error"]["code"] == "StoreUnavailable"
            assert control.headers["retry-after"] == "1"
            assert "replica" in control.json()["error"]["message"]
            arm = requests.post(
                f"{replica.arm}/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/forewarn-rg/"
                "providers/Microsoft.Compute/virtualMachines/vm3/restart?api-version=2024-07-01",
                timeout=10,
            )
            assert arm.status_code == 503 and arm.json()["error"]["code"] == "ServiceUnavailable"
            # A new leader: the replica follows it and forwards to it.
            with shared_server(tmp_path, "c", postgres_url) as successor:
                assert role(successor) == "leader"
                until(lambda: role_is_following(replica, successor), what="the replica follows the new leader")
                approved = requests.post(
                    vm_url(replica, "vm3"),
                    headers={"Metadata": "true"},
                    json={"StartRequests": [{"EventId": event["event_id"]}]},
                    timeout=10,
                )
                assert approved.status_code == 200
                until(lambda: converged([successor, replica]), what="the replica follows the new leader's commits")


def role_is_following(replica, leader) -> bool:
    return (health(replica).get("leader") or {}).get("node") == health(leader)["node"]


def test_a_shared_role_needs_postgresql(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(SHARED_FLEET)
    finished = subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", "--db", str(tmp_path / "x.db"), "--fleet", str(fleet)]
        + ["--role", "replica", "--port", "0", "--imds-port", "0", "--arm-port", "0", "--ec2-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert finished.returncode != 0
    assert "needs PostgreSQL" in finished.stderr and "SQLite serves one process only" in finished.stderr


def test_a_replica_that_loses_the_database_keeps_serving_and_says_so(tmp_path, postgres_url, proxy):
    from pg_proxy import through as proxied  # a TCP proxy the test can cut

    through = proxied(postgres_url, proxy.port)
    with shared_server(tmp_path, "a", postgres_url) as leader:
        with shared_server(tmp_path, "b", through, role="replica") as replica:
            leader.schedule(type="Reboot", vms=["vm4"], notice="15m")
            until(lambda: converged([leader, replica]), what="the replica follows")
            served = document(replica, "vm4").content
            proxy.cut()
            until(lambda: health(replica)["database"]["reachable"] is False, what="the replica notices")
            assert document(replica, "vm4").content == served  # what it has, as it was
            assert requests.get(f"{replica.control}/readyz", timeout=5).status_code == 200
            leader.schedule(type="Redeploy", vms=["vm4"], notice="15m")
            leader.advance("1m")
            assert document(replica, "vm4").content == served
            # Meanwhile the leader pruned the journal past the replica's position (as after 10 minutes).
            with psycopg.connect(postgres_url, autocommit=True) as connection:
                connection.execute(
                    "DELETE FROM forewarn_changes WHERE position < (SELECT MAX(position) FROM forewarn_changes)"
                )
            proxy.open()
            until(lambda: converged([leader, replica]), what="the replica catches up once the database is back")
            assert health(replica)["database"]["reachable"] is True
            metrics = requests.get(f"{replica.control}/metrics", timeout=5).text
            assert "forewarn_replica_full_reloads_total 1.0" in metrics  # the journal could not tell
    log = (tmp_path / "b" / "server.log").read_text()
    assert "database unreachable" in log and "serving the last state replicated" in log
    assert "the database is reachable again" in log


def test_without_a_leader_a_replica_never_shows_an_event_as_scheduled_after_its_notbefore(tmp_path, postgres_url):
    """Real clock: the leader dies before the deadline; past NotBefore the replica shows the event Started, as the
    leader will commit it (the engine is deterministic), never Scheduled."""
    with shared_server(tmp_path, "a", postgres_url, extra=["--clock", "real"]) as leader:
        with shared_server(tmp_path, "b", postgres_url, role="replica", extra=["--clock", "real"]) as replica:
            event = leader.schedule(type="Freeze", vms=["vm5"], notice="3s")[0]
            until(lambda: event["event_id"] in document(replica, "vm5").text, what="the replica follows")
            leader.kill()
            scheduled = document(replica, "vm5").json()
            assert scheduled["Events"][0]["EventStatus"] == "Scheduled"
            not_before = parsedate_to_datetime(scheduled["Events"][0]["NotBefore"])
            simulated_now = datetime.fromisoformat(replica.get("/v1/clock")["now"].replace("Z", "+00:00"))
            wait_until = time.time() + (not_before - simulated_now).total_seconds() + 0.2  # a real clock: wall time
            until(lambda: time.time() > wait_until, timeout=10, what="NotBefore passes")
            after = document(replica, "vm5").json()
            assert after["Events"][0]["EventStatus"] == "Started"
            assert after["DocumentIncarnation"] == scheduled["DocumentIncarnation"] + 1
            assert health(replica)["projected"] is True
            # The next leader commits the same document.
            with shared_server(tmp_path, "c", postgres_url, extra=["--clock", "real"]) as successor:
                assert role(successor) == "leader"
                committed = document(successor, "vm5").json()
                assert committed["DocumentIncarnation"] >= after["DocumentIncarnation"]
                until(lambda: converged([successor, replica], ["vm5"]), what="the replica takes the committed state")


def test_a_replica_serves_the_hosts_it_is_given(tmp_path, postgres_url):
    """--hosts: vm0 runs on host-01, vm1 on host-02, vm2 on host-03. A machine on another host is a caller this
    metadata service does not know: Azure's 400 (approvals are not forwarded for it); it follows a redeploy."""
    with shared_server(tmp_path, "a", postgres_url) as leader:
        with shared_server(tmp_path, "b", postgres_url, role="replica", extra=["--hosts", "host-0[12]"]) as replica:
            event = leader.schedule(type="Reboot", vms=["vm2"], notice="15m")[0]
            until(lambda: converged([leader, replica], ["vm0", "vm1"]), what="the replica follows")
            assert document(replica, "vm0").content == document(leader, "vm0").content
            other = document(replica, "vm2")
            assert other.status_code == 400
            assert other.json() == {
                "error": "Bad request. vm2 runs on host host-03, whose metadata this server does not serve "
                "(--hosts host-0[12])"
            }
            approval = requests.post(
                vm_url(replica, "vm2"),
                headers={"Metadata": "true"},
                json={"StartRequests": [{"EventId": event["event_id"]}]},
                timeout=10,
            )
            assert approval.status_code == 400 and approval.json() == other.json()
            assert leader.get(f"/v1/events/{event['event_id']}")["status"] == "Scheduled"  # not forwarded
            # A redeploy moves vm1 to host-03: from then on, another host's metadata service answers it.
            leader.post("/v1/vms/redeploy", {"vms": ["vm1"]}, expect=200)
            leader.advance("1h")
            until(lambda: document(replica, "vm1").status_code == 400, what="the replica follows the redeploy")
            assert "vm1 runs on host host-03" in document(replica, "vm1").text
            assert document(leader, "vm1").status_code == 200


def test_a_vm_that_asks_only_its_replica_is_enabled_and_kept_enabled_by_the_leader(tmp_path, postgres_url):
    """--require-enabling: a VM's first request enables its scope, and a scope idle for --disable-after is disabled
    again. A VM served by a replica never asks the leader, yet its events get their notice, as the leader's own."""
    enabling = ["--require-enabling", "--first-call-delay", "0s", "--disable-after", "1h"]
    with shared_server(tmp_path, "a", postgres_url, extra=enabling) as leader:
        with shared_server(tmp_path, "b", postgres_url, role="replica", extra=enabling) as replica:
            [unwarned] = leader.schedule(type="Reboot", vms=["vm4"])  # nobody asked: no notice
            assert unwarned["status"] == "Started"
            assert document(replica, "vm0").status_code == 200  # asked at the replica only

            enabled = {"what": "enabled", "scope": "vm:00000000-0000-0000-0000-000000000000/forewarn-rg/vm0"}
            until(
                lambda: any(enabled.items() <= entry.items() for entry in leader.get("/v1/journal")),
                what="the leader enables the scope its VM asked the replica for",
            )
            [event] = leader.schedule(type="Freeze", vms=["vm0"], notice="15m")
            assert event["status"] == "Scheduled"
            leader.post(f"/v1/events/{event['event_id']}/cancel", expect=200)
            # The report's endpoint, between processes: a malformed report is refused, names that are no scope are
            # passed over, and a replica (which does not enable anything) sends its reporter elsewhere.
            seen = "/v1/replication/seen"
            assert requests.post(f"{leader.control}{seen}", json={"scopes": "vm0"}, timeout=5).status_code == 400
            assert requests.post(f"{leader.control}{seen}", json={"scopes": ["no-such-scope"]}, timeout=5).ok
            assert requests.post(f"{replica.control}{seen}", json={"scopes": []}, timeout=5).status_code == 503
            # Asked at the replica every 40 minutes, the scope stays enabled past --disable-after (1 h): the leader
            # moves its idle timer too (without, 80 minutes idle, the event below would start at once).
            for _ in range(2):
                leader.advance("40m")
                until(lambda: converged([leader, replica]), what="the replica follows the clock")
                assert document(replica, "vm0").status_code == 200
                time.sleep(1.0)  # the replica reports on its own (real) time, every 0.5 s: nothing to poll for
            [event] = leader.schedule(type="Freeze", vms=["vm0"], notice="15m")
            assert event["status"] == "Scheduled"
