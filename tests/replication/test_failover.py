"""Three processes on one schema; the leader is killed (-9) again and again while clients approve events and step the
clock through whichever process they talk to. Counted and printed: commands acknowledged 2xx and found afterwards,
DocumentIncarnation never going backwards for any one client, replicas converging to the same bytes, a replica
started late catching up, and the failover and replication times.

``FOREWARN_KILL_CYCLES`` sets the number of kills (20 by default, as CI runs it; more for a longer run)."""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

import requests

from helpers import T0
from replication_helpers import VMS, converged, role, shared_server, until, vm_url

CYCLES = int(os.environ.get("FOREWARN_KILL_CYCLES", "20"))
STEP_SECONDS = 30


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    approvals_acked: set[str] = field(default_factory=set)
    approvals_refused: int = 0  # retryable answers (no leader) and connection errors
    steps_acked: int = 0
    steps_sent: int = 0
    steps_refused: int = 0
    documents_read: int = 0
    backwards: list[str] = field(default_factory=list)


def reader(server_of, vm: str, tally: Tally, stop: threading.Event) -> None:
    """One VM's agent: polls its document at the process it is pinned to, approves what is Scheduled."""
    last = 0
    session = requests.Session()
    while not stop.is_set():
        server = server_of()
        try:
            answer = session.get(vm_url(server, vm), headers={"Metadata": "true"}, timeout=3)
        except requests.RequestException:
            time.sleep(0.05)
            continue
        if answer.status_code != 200:
            time.sleep(0.05)
            continue
        body = answer.json()
        with tally.lock:
            tally.documents_read += 1
            if body["DocumentIncarnation"] < last:
                tally.backwards.append(f"{vm}: {last} then {body['DocumentIncarnation']}")
        last = max(last, body["DocumentIncarnation"])
        scheduled = [e["EventId"] for e in body["Events"] if e["EventStatus"] == "Scheduled"]
        if not scheduled:
            time.sleep(0.02)
            continue
        try:
            approved = session.post(
                vm_url(server, vm),
                headers={"Metadata": "true"},
                json={"StartRequests": [{"EventId": event_id} for event_id in scheduled]},
                timeout=5,
            )
        except requests.RequestException:
            approved = None
        with tally.lock:
            if approved is not None and approved.status_code == 200:
                tally.approvals_acked.update(scheduled)
            else:
                tally.approvals_refused += 1
        time.sleep(0.02)


def stepper(servers, tally: Tally, stop: threading.Event, seed: int) -> None:
    """Steps the manual clock through any process, at random."""
    chance = random.Random(seed)
    session = requests.Session()
    while not stop.is_set():
        server = chance.choice(servers)
        with tally.lock:
            tally.steps_sent += 1
        try:
            answer = session.post(f"{server.control}/v1/clock/advance", json={"by": f"{STEP_SECONDS}s"}, timeout=5)
        except requests.RequestException:
            answer = None
        with tally.lock:
            if answer is not None and answer.status_code == 200:
                tally.steps_acked += 1
            else:
                tally.steps_refused += 1
        time.sleep(chance.uniform(0.05, 0.3))


def leader_of(servers):
    for server in servers:
        if server.process is not None and server.process.poll() is None and role(server) == "leader":
            return server
    return None


def knows(server, event_id: str) -> bool:
    """Whether a process holds the event (its own engine answers the control API's GET)."""
    try:
        return requests.get(f"{server.control}/v1/events/{event_id}", timeout=3).status_code == 200
    except requests.RequestException:
        return False


def schedule_anywhere(servers) -> list[dict]:
    """Schedules a Reboot for every VM through whichever process takes it (retried through a failover)."""

    def attempt():
        for server in servers:
            try:
                answer = requests.post(
                    f"{server.control}/v1/events", json={"type": "Reboot", "vms": VMS, "notice": "15m"}, timeout=5
                )
            except requests.RequestException:
                continue
            if answer.status_code == 201:
                return answer.json()
        return None

    return until(attempt, timeout=30, what="scheduling through any process")


def test_killing_the_leader_again_and_again_loses_nothing_acknowledged(tmp_path, postgres_url):
    servers = [shared_server(tmp_path, name, postgres_url).start() for name in ("a", "b", "c")]
    late = None
    tally = Tally()
    stop = threading.Event()
    failovers: list[float] = []
    propagation: list[float] = []
    chance = random.Random(14)
    try:
        threads = [
            threading.Thread(target=reader, args=(lambda i=i: servers[i % 3], vm, tally, stop), daemon=True)
            for i, vm in enumerate(VMS)
        ] + [threading.Thread(target=stepper, args=(servers, tally, stop, seed), daemon=True) for seed in (1, 2)]
        for thread in threads:
            thread.start()
        for cycle in range(CYCLES):
            scheduled = schedule_anywhere(servers)
            if cycle % 2 == 0:
                started = time.monotonic()
                event_id = scheduled[0]["event_id"]
                until(lambda: all(knows(s, event_id) for s in servers), what="every process has it")  # noqa: B023
                propagation.append(time.monotonic() - started)
                time.sleep(chance.uniform(0.2, 1.2))  # clock steps in flight
            else:  # the kill lands while the agents are approving the new events
                time.sleep(chance.uniform(0.0, 0.3))
            leader = until(lambda: leader_of(servers), what="a leader")
            leader.kill()
            killed_at = time.monotonic()
            others = [s for s in servers if s is not leader]
            until(lambda: leader_of(others), timeout=20, what="another takes over")  # noqa: B023
            failovers.append(time.monotonic() - killed_at)
            leader.start()  # back as a replica, on the same ports
        time.sleep(1.0)
        stop.set()
        for thread in threads:
            thread.join(10)

        until(lambda: converged(servers), timeout=20, what="every process converges")
        late = shared_server(tmp_path, "late", postgres_url, role="replica").start()
        until(lambda: converged([*servers, late]), timeout=20, what="a replica started late catches up")

        leader = until(lambda: leader_of(servers), what="a leader")
        events = {e["event_id"]: e for e in leader.get("/v1/events", all="true")}
        lost_approvals = sorted(e for e in tally.approvals_acked if events[e]["status"] == "Scheduled")
        moved = (datetime.fromisoformat(leader.get("/v1/clock")["now"].replace("Z", "+00:00")) - T0).total_seconds()
        print(
            f"\n{CYCLES} kill cycles: failover median {statistics.median(failovers):.2f} s, worst {max(failovers):.2f} s;"
            f" a new event on every process after median {statistics.median(propagation) * 1000:.0f} ms, worst "
            f"{max(propagation) * 1000:.0f} ms\n"
            f"approvals acknowledged {len(tally.approvals_acked)}, found committed "
            f"{len(tally.approvals_acked) - len(lost_approvals)}, refused or unanswered {tally.approvals_refused}\n"
            f"clock steps acknowledged {tally.steps_acked} of {tally.steps_sent} sent ({tally.steps_refused} refused "
            f"or unanswered): the clock moved {moved:.0f} s, at least the {tally.steps_acked * STEP_SECONDS} s "
            f"acknowledged\ndocuments read {tally.documents_read}, DocumentIncarnation backwards "
            f"{len(tally.backwards)} times; {len(servers) + 1} processes answer the same bytes for {len(VMS)} VMs"
        )
        assert not lost_approvals, lost_approvals
        assert tally.steps_acked * STEP_SECONDS <= moved <= tally.steps_sent * STEP_SECONDS
        assert not tally.backwards, tally.backwards
        assert tally.approvals_acked and tally.steps_acked and tally.documents_read
    finally:
        stop.set()
        for server in [*servers, *([late] if late else [])]:
            server.stop()
