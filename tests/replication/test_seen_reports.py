"""A replica's reports of the scopes its VMs asked for (replication/forward.py SeenReporter), against a stand-in for
the leader's control port: split into requests the control port takes, and nothing lost when one is refused."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from forewarn.replication import forward
from forewarn.replication.forward import SEEN_PATH, Leaders, SeenReporter


class Leader(BaseHTTPRequestHandler):
    """Takes reports, and refuses (503) every one from the one numbered ``refuse`` (1-based) on, as a leader that lost
    its database."""

    reports: list[list[str]] = []
    refuse: int | None = None

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == SEEN_PATH and self.headers["Authorization"] == "Bearer token"
        Leader.reports.append(body["scopes"])
        status = 503 if Leader.refuse is not None and len(Leader.reports) >= Leader.refuse else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def leader():
    Leader.reports, Leader.refuse = [], None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Leader)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def report_once(control: str, seen: set[str]) -> set[str]:
    """One round of the reporter of a replica that noted ``seen``; what it keeps for the next round."""
    replica = SimpleNamespace(role="replica", seen_here=set(seen))
    leaders = Leaders("token")
    leaders.addresses["control"] = control

    async def one_round():
        await SeenReporter(replica, leaders).report()  # type: ignore[arg-type]
        await leaders.client.aclose()

    asyncio.run(one_round())
    return replica.seen_here


def test_a_large_report_goes_in_parts_the_control_port_takes(leader, monkeypatch):
    monkeypatch.setattr(forward, "SEEN_PER_REPORT", 3)
    scopes = {f"vm{i}" for i in range(8)}
    assert report_once(leader, scopes) == set()
    assert [len(part) for part in Leader.reports] == [3, 3, 2]
    assert sorted(sum(Leader.reports, [])) == sorted(scopes)


def test_a_refused_part_and_the_parts_after_it_are_kept_for_the_next_round(leader, monkeypatch):
    monkeypatch.setattr(forward, "SEEN_PER_REPORT", 3)
    Leader.refuse = 2
    kept = report_once(leader, {f"vm{i}" for i in range(8)})
    assert Leader.reports[0] == ["vm0", "vm1", "vm2"] and Leader.reports[1] == ["vm3", "vm4", "vm5"]
    assert len(Leader.reports) == 2 and kept == {f"vm{i}" for i in range(3, 8)}  # for the next round
