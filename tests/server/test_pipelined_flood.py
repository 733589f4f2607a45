"""One connection pipelining a flood of GETs to the metadata port of a real ``forewarn serve``: every request is
answered, in order, while another client's metadata GET and the control API's ``/healthz`` are still answered
promptly; and the metadata ports queue a burst of connects instead of dropping them.

Before the server parsed a connection's input a slice per turn of its event loop, a read of 256 KiB (and libuv's
up to 32 reads in a row of one connection) was answered request after request before anything else ran: during a
50,000-GET flood the other clients waited about 3 s.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from helpers import Server

FLOOD = 50_000
GET = (
    b"GET /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\nHost: 169.254.169.254\r\nMetadata: true\r\n\r\n"
)
# The longest another client may wait during the flood. The flood keeps the server's core busy, so each of the
# other clients' requests waits for the slice under way (about 1 ms of work) and its share of a loaded 2-core
# machine; 250 ms leaves room for the scheduler of a busy machine, against seconds without the slicing.
BOUND = 0.25

# The flooding client, in its own process so that its reading does not take this process's GIL from the probes.
FLOODER = """
import socket, sys
port, count, request = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode().decode("unicode_escape").encode()
sock = socket.create_connection(("127.0.0.1", port))
print("flooding", flush=True)
import threading
answers, order = [0], []
def read():
    tail = b""
    while answers[0] < count:
        data = sock.recv(1 << 20)
        if not data:
            break
        answers[0] += (tail + data).count(b"HTTP/1.1 ") - tail.count(b"HTTP/1.1 ")
        tail = data[-16:]
reader = threading.Thread(target=read)
reader.start()
sock.sendall(request * count)
reader.join(120)
print("answers", answers[0], flush=True)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("flood")) as running:
        yield running


class Probe(threading.Thread):
    """GETs ``url`` over one keep-alive connection, timing each answer, until stopped."""

    def __init__(self, url: str, headers: dict[str, str] | None = None):
        super().__init__(daemon=True)
        self.url, self.headers = url, headers or {}
        self.waits: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with requests.Session() as session:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    answer = session.get(self.url, headers=self.headers, timeout=30)
                except requests.RequestException as error:
                    self.failures.append(repr(error))
                    continue
                self.waits.append(time.monotonic() - started)
                if answer.status_code != 200:
                    self.failures.append(f"{answer.status_code} {answer.text[:80]}")
                self.stop.wait(0.01)


def test_a_pipelined_flood_on_one_connection_does_not_stall_other_clients(server):
    probes = [
        Probe(f"{server.imds}/metadata/scheduledevents?api-version=2020-07-01", {"Metadata": "true"}),
        Probe(f"{server.control}/healthz"),
    ]
    for probe in probes:
        probe.start()
    time.sleep(0.2)  # connected and warm
    for probe in probes:
        probe.waits.clear()
    flooder = subprocess.Popen(
        [sys.executable, "-c", FLOODER, str(server.imds_port), str(FLOOD), GET.decode().encode("unicode_escape")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        output, _ = flooder.communicate(timeout=180)
    finally:
        flooder.kill()
        for probe in probes:
            probe.stop.set()
            probe.join(30)
    assert output.split() == ["flooding", "answers", str(FLOOD)], output
    for probe in probes:
        assert not probe.failures, probe.failures
        assert len(probe.waits) >= 5, f"too few requests of {probe.url} measured during the flood"
        assert max(probe.waits) < BOUND, (
            f"{probe.url}: longest wait {max(probe.waits) * 1000:.0f} ms over {len(probe.waits)} requests"
        )


def test_the_metadata_port_queues_a_burst_of_connects(server):
    """asyncio listens with a queue of 100 unless told otherwise; a connect that finds it full is retried by the
    client's kernel a second later (15 of 2,000 quick connects took 1.03 s)."""
    listening = subprocess.run(
        ["ss", "-Hltn", f"sport = :{server.imds_port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    backlog = int(listening[2])  # State Recv-Q Send-Q ...: Send-Q is a listening socket's queue size
    assert backlog >= min(4096, int(Path("/proc/sys/net/core/somaxconn").read_text())), listening
