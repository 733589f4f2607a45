"""Attacks on the HTTP servers of a real ``forewarn serve``, over raw sockets: each is bounded or refused, and while
it runs another client's metadata GET is still answered within 100 ms.

The server runs with short deadlines (``--imds-limit``/``--api-limit``) so that the slow-client attacks end in a
few seconds; sizes and connection caps are the defaults.
"""

from __future__ import annotations

import resource
import select
import socket
import statistics
import threading
import time

import pytest

from forewarn.scenarios.testnet import loopback_address
from helpers import Server

SHORT = ["header_timeout=1", "body_timeout=1", "idle_timeout=2"]
GET = (
    b"GET /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\nHost: 169.254.169.254\r\nMetadata: true\r\n"
    b"Connection: close\r\n\r\n"
)
KEEP_ALIVE_GET = GET.replace(b"Connection: close\r\n", b"")
PROBE_BOUND = 0.1  # seconds: the bound the task sets on another client's GET during an attack


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    extra = [f"--imds-limit={item}" for item in SHORT] + [f"--api-limit={item}" for item in SHORT]
    with Server(tmp_path_factory.mktemp("limits"), extra=extra) as running:
        yield running


def connect(port: int, source: str = "127.0.0.1", timeout: float = 5.0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # the source port is chosen at connect(), knowing the destination: a port bound first could meet a TIME_WAIT of
    # an earlier connection to the same server and stall the connect for a SYN retry (1 s)
    sock.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24), 1)
    sock.settimeout(timeout)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def read_answer(sock: socket.socket, timeout: float = 5.0) -> tuple[int, bytes, bytes]:
    """Status, header block and body of one answer (by its Content-Length, or up to the close)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.lower().split(b"\r\n")
                if line.startswith(b"content-length:")
            ),
            None,
        )
        while length is not None and len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    except ConnectionResetError:
        head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 "):
        return 0, head, body
    return int(head[9:12]), head, body


def send_until_answered(sock: socket.socket, prefix: bytes, piece: bytes, most_bytes: int, most_seconds: float):
    """Send prefix then piece after piece, until the server answers, closes, or the budget runs out."""
    sock.sendall(prefix)
    sent, started = len(prefix), time.monotonic()
    while sent < most_bytes and time.monotonic() - started < most_seconds:
        if select.select([sock], [], [], 0)[0]:
            return
        try:
            sock.sendall(piece)
        except OSError:
            return
        sent += len(piece)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes the connection (after any answer) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


class Prober(threading.Thread):
    """GETs the scheduled-events document on fresh connections, from its own address, while an attack runs.

    The bound applies to the answer: the time from sending the GET to reading the whole answer. The connect is timed
    apart and only has to succeed, because the kernel, not the server, completes the handshake (even while the
    server's loop is stalled): a slow connect is the host's doing, such as a SYN dropped and sent again 1 s later on
    a loaded CI machine, and a stalled server shows in the answer time instead."""

    def __init__(self, port: int, source: str = "127.0.0.9"):
        super().__init__(daemon=True)
        self.port, self.source = port, source
        self.latencies: list[float] = []
        self.connects: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                with connect(self.port, self.source) as sock:  # closed by us first: no TIME_WAIT at the server
                    connected = time.monotonic()
                    sock.sendall(KEEP_ALIVE_GET)
                    status, _, body = read_answer(sock)
                    answered = time.monotonic()
                if status != 200 or not body.startswith(b"{"):
                    self.failures.append(f"{status} {body[:80]!r}")
            except OSError as error:
                self.failures.append(repr(error))
            else:
                self.connects.append(connected - started)
                self.latencies.append(answered - connected)
            self.stop.wait(0.02)

    def rounds(self, minimum: int = 5, most_seconds: float = 8.0):
        """Repeat the attack (one round per iteration) until at least ``minimum`` GETs were measured during it."""
        started = time.monotonic()
        yield 0
        count = 1
        while len(self.latencies) < minimum and time.monotonic() - started < most_seconds:
            yield count
            count += 1

    def __enter__(self) -> Prober:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join(10)
        assert not self.failures, self.failures
        assert len(self.latencies) >= 5, "too few GETs measured during the attack"
        # every GET, not the median: the point is that no single client is frozen out
        assert max(self.latencies) < PROBE_BOUND, (
            f"GET answer times during the attack: max {max(self.latencies) * 1000:.0f} ms, "
            f"median {statistics.median(self.latencies) * 1000:.0f} ms over {len(self.latencies)} "
            f"(connects: max {max(self.connects) * 1000:.0f} ms)"
        )


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def post_chunked(port: int, path: bytes, chunks: int, chunk: bytes = b"x") -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nHost: 169.254.169.254\r\nMetadata: true\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n" + (b"%x\r\n%s\r\n" % (len(chunk), chunk)) * chunks + b"0\r\n\r\n"
    )


# ------------------------------------------------------------------------------------------- metadata port
def test_a_body_of_many_tiny_chunks_costs_time_proportional_to_its_size(server):
    """80,000 one-byte chunks (480 KB on the wire) once froze every surface for 78 s."""
    request = post_chunked(server.imds_port, b"/metadata/scheduledevents?api-version=2020-07-01", 80_000)
    with Prober(server.imds_port) as probe:
        for _ in probe.rounds():
            started = time.monotonic()
            with connect(server.imds_port) as sock:
                sock.sendall(request)
                status, head, body = read_answer(sock)
            assert status == 400 and b'"error"' in body  # not JSON: IMDS's own answer, after the whole body
            assert time.monotonic() - started < 2


def test_a_chunked_body_over_the_limit_is_refused_while_it_arrives(server):
    with connect(server.imds_port) as sock:
        send_until_answered(
            sock,
            post_chunked(server.imds_port, b"/metadata/scheduledevents", 0)[:-5],
            b"10000\r\n" + b"x" * 65536 + b"\r\n",
            most_bytes=64 << 20,
            most_seconds=5,
        )
        status, _, body = read_answer(sock)
    assert (status, body) == (413, b"request body too large")


def test_huge_headers_are_refused_early_and_memory_stays_bounded(server):
    """A request with 200 MB of headers once got 200 and left the process at 2.2 GB."""

    def attempt():
        with connect(server.imds_port) as sock:
            send_until_answered(
                sock,
                b"GET /metadata/scheduledevents HTTP/1.1\r\nX-Big: ",
                b"a" * 65536,
                most_bytes=64 << 20,
                most_seconds=5,
            )
            status, head, body = read_answer(sock)
        assert status == 431 and b"content-type: text/plain" in head
        assert body == b"request headers longer than 32768 bytes"

    attempt()  # the first one also pays for code paths and buffers seen once in a process's life: not what is measured
    before = vm_rss_kib(server.process.pid)
    with Prober(server.imds_port) as probe:
        for _ in probe.rounds():
            attempt()
    grown = vm_rss_kib(server.process.pid) - before
    # Each attempt carries 64 MiB: a server that kept one attempt's headers would grow by at least that. What does
    # show is the allocator's own ebb and flow over the hundreds of refused connections a busy round makes (measured:
    # between 2 and 18 MiB, up and down, never climbing with the count).
    assert grown < 40 * 1024, f"the process grew by {grown} KiB"


@pytest.mark.parametrize(
    "headers, message",
    [
        (b"X-Long: " + b"a" * 9000 + b"\r\n", b"a request header longer than 8192 bytes"),
        (b"".join(b"X-%d: %s\r\n" % (i, b"a" * 7000) for i in range(5)), b"request headers longer than 32768 bytes"),
        (b"".join(b"X-%d: 1\r\n" % i for i in range(101)), b"more than 100 request headers"),
    ],
)
def test_header_bounds_answer_431(server, headers, message):
    with connect(server.imds_port) as sock:
        sock.sendall(b"GET /metadata/scheduledevents HTTP/1.1\r\nMetadata: true\r\n" + headers + b"\r\n")
        assert read_answer(sock)[::2] == (431, message)


def test_requests_within_the_bounds_are_served(server):
    headers = b"".join(b"X-%d: %s\r\n" % (i, b"a" * 300) for i in range(97))  # 100 headers, about 30 KB
    with connect(server.imds_port) as sock:
        sock.sendall(
            b"GET /metadata/scheduledevents?api-version=2020-07-01&x=" + b"a" * 8000 + b" HTTP/1.1\r\n"
            b"Host: 169.254.169.254\r\nMetadata: true\r\n" + headers + b"Connection: close\r\n\r\n"
        )
        status, _, body = read_answer(sock)
    assert status == 200 and body.startswith(b'{"DocumentIncarnation"')


def test_a_huge_request_target_is_414_at_once(server):
    """A 200 MB URL once took 53 s (rebuilt on each append)."""
    with Prober(server.imds_port) as probe:
        for _ in probe.rounds():
            started = time.monotonic()
            with connect(server.imds_port) as sock:
                send_until_answered(sock, b"GET /", b"a" * 65536, most_bytes=64 << 20, most_seconds=5)
                status, _, body = read_answer(sock)
            assert (status, body) == (414, b"request target longer than 8192 bytes")
            assert time.monotonic() - started < 1


def test_a_request_trickled_byte_by_byte_gets_408(server):
    """One byte every few seconds once kept a connection open forever."""
    with Prober(server.imds_port):
        with connect(server.imds_port) as sock:
            started = time.monotonic()
            for byte in b"GET /metadata/scheduledevents HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                if select.select([sock], [], [], 0.2)[0]:
                    break
                try:
                    sock.send(bytes([byte]))
                except OSError:
                    break
            status, _, body = read_answer(sock)
            assert (status, body) == (408, b"request headers not received within 1 s")
            assert time.monotonic() - started < 3.5  # the 1 s deadline, checked once a second
            assert closed_within(sock, 1)


def test_a_body_trickled_byte_by_byte_gets_408(server):
    with connect(server.imds_port) as sock:
        sock.sendall(b"POST /metadata/scheduledevents HTTP/1.1\r\nMetadata: true\r\nContent-Length: 100\r\n\r\n")
        for _ in range(20):
            if select.select([sock], [], [], 0.2)[0]:
                break
            sock.send(b"{")
        assert read_answer(sock)[::2] == (408, b"request body not received within 1 s")


@pytest.mark.parametrize("trickle", [b"", b"\r\n"])
def test_idle_connections_are_closed_even_when_they_trickle_blank_lines(server, trickle):
    with connect(server.imds_port) as sock:
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 6 and not closed:
            if trickle:
                try:
                    sock.send(trickle)
                except OSError:
                    break
            closed = closed_within(sock, 0.3)
        assert closed and time.monotonic() - started < 4.5  # the 2 s idle timeout, checked once a second


def test_connections_per_source_are_capped_and_other_sources_still_served(server):
    attacker, neighbour = "127.0.0.5", "127.0.0.6"
    held = []
    try:
        for _ in range(64):
            sock = connect(server.imds_port, attacker)
            sock.sendall(KEEP_ALIVE_GET)
            assert read_answer(sock)[0] == 200
            held.append(sock)
        with Prober(server.imds_port, neighbour) as probe:
            for _ in probe.rounds():
                with connect(server.imds_port, attacker) as refused:
                    refused.sendall(GET)
                    status, head, body = read_answer(refused)
                assert (status, body) == (503, b"too many connections from 127.0.0.5 (64)")
                assert b"connection: close" in head
        held.pop().close()
        time.sleep(0.1)  # the server sees the close
        with connect(server.imds_port, attacker) as again:
            again.sendall(GET)
            assert read_answer(again)[0] == 200
    finally:
        for sock in held:
            sock.close()


def test_many_slow_connections_from_one_source_cost_at_most_the_cap(server):
    """Two clients once held 17,873 descriptors: now one address holds at most 64, each for at most its deadline."""
    attacker = "127.0.0.7"
    opened, refused = [], 0
    try:
        with Prober(server.imds_port):
            for _ in range(200):
                sock = connect(server.imds_port, attacker)
                sock.sendall(b"G")
                opened.append(sock)
            time.sleep(0.2)
            for sock in opened:
                readable = select.select([sock], [], [], 0)[0]
                if readable and read_answer(sock)[0] == 503:
                    refused += 1
        assert refused == 200 - 64
    finally:
        for sock in opened:
            sock.close()


# ------------------------------------------------------------------------------------- uvicorn-served ports
@pytest.fixture(params=["control", "arm", "ec2"])
def api_port(request, server):
    return {"control": server.port, "arm": server.arm_port, "ec2": server.ec2_port}[request.param]


def test_uvicorn_ports_refuse_huge_headers_and_targets(server, api_port):
    before = vm_rss_kib(server.process.pid)
    with Prober(server.imds_port) as probe:
        for _ in probe.rounds():
            with connect(api_port) as sock:
                send_until_answered(
                    sock, b"GET / HTTP/1.1\r\nX-Big: ", b"a" * 65536, most_bytes=64 << 20, most_seconds=5
                )
                assert read_answer(sock)[::2] == (431, b"request headers longer than 32768 bytes")
            with connect(api_port) as sock:
                send_until_answered(sock, b"GET /", b"a" * 65536, most_bytes=64 << 20, most_seconds=5)
                assert read_answer(sock)[::2] == (414, b"request target longer than 8192 bytes")
    with connect(api_port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n")
        assert read_answer(sock)[::2] == (431, b"more than 100 request headers")
    with connect(api_port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (5 << 20))
        assert read_answer(sock)[::2] == (413, b"request body longer than 4194304 bytes")
    assert vm_rss_kib(server.process.pid) - before < 16 * 1024


def test_uvicorn_ports_close_slow_and_idle_clients(server, api_port):
    with Prober(server.imds_port):
        with connect(api_port) as sock:
            started = time.monotonic()
            for byte in b"GET / HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                if select.select([sock], [], [], 0.2)[0]:
                    break
                sock.send(bytes([byte]))
            assert read_answer(sock)[::2] == (408, b"request headers not received within 1 s")
            assert time.monotonic() - started < 3.5
    with connect(api_port) as sock:  # never sends a request: uvicorn alone would keep it for ever
        assert closed_within(sock, 4)


def test_uvicorn_ports_cap_connections_per_source(server):
    attacker = "127.0.0.8"
    held = []
    try:
        for _ in range(64):
            held.append(connect(server.port, attacker))
        time.sleep(0.1)
        with connect(server.port, attacker) as refused:
            refused.sendall(b"GET /v1/clock HTTP/1.1\r\n\r\n")
            assert read_answer(refused)[::2] == (503, b"too many connections from 127.0.0.8 (64)")
        with connect(server.port, "127.0.0.2") as other:
            other.sendall(b"GET /v1/clock HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert read_answer(other)[0] == 200
    finally:
        for sock in held:
            sock.close()


def timed_gets(port: int, path: bytes, seconds: float, source: str = "127.0.0.11") -> list[float]:
    """GET ``path`` again and again on one keep-alive connection for ``seconds``: each answer's wait."""
    request = b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    waits = []
    with connect(port, source) as sock:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.monotonic()
            sock.sendall(request)
            status, _, _ = read_answer(sock, timeout=30)
            waits.append(time.monotonic() - started)
            assert status == 200
    return waits


def test_a_flood_of_one_byte_chunks_leaves_the_control_api_to_other_clients(server):
    """8 connections sending bodies of 1-byte chunks to /v1/events once held another client to 20 answers in 30 s
    (its longest wait 6.2 s, against 3,000 answers in 5 s unloaded): each chunk costs the loop a few Python calls
    whatever its size. A body now has at most 256 chunks and one more per KiB: such a body is refused after 256."""
    head = b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    chunked = head + b"Transfer-Encoding: chunked\r\n\r\n"
    with connect(server.port) as sock:  # a body split as a client would (by buffer or message) is taken
        body = b'{"type": "Freeze", "vms": ["WestNO_0"]}'
        sock.sendall(
            chunked + b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:8], body[8:])) + b"0\r\n\r\n"
        )
        assert read_answer(sock)[0] == 201
    with connect(server.port) as sock:
        sock.sendall(chunked + b"1\r\n \r\n" * 257)
        assert read_answer(sock)[::2] == (413, b"request body in more than 256 chunks and one more per 1024 bytes")

    stop = threading.Event()
    ends = []

    def flood() -> None:
        piece = b"1\r\n \r\n" * 10_000
        while not stop.is_set():
            try:
                with connect(server.port, "127.0.0.12") as sock:
                    sock.sendall(chunked)
                    while not stop.is_set():
                        sock.sendall(piece)
            except OSError:  # refused and closed: again, as the attack did
                ends.append(1)

    attackers = [threading.Thread(target=flood, daemon=True) for _ in range(8)]
    for attacker in attackers:
        attacker.start()
    try:
        time.sleep(0.5)
        waits = timed_gets(server.port, b"/v1/clock", 5.0)
    finally:
        stop.set()
        for attacker in attackers:
            attacker.join(10)
    assert ends, "the flood was never refused"
    # Measured on a 2-core machine shared with other test runs: before, 6.2 s at most and 3 answers in 5 s; now about
    # 80 ms at most and 400 answers. The bounds leave room for a loaded machine and still fail the old code.
    assert max(waits) < 1.0 and len(waits) >= 50, f"longest wait {max(waits):.2f} s, {len(waits)} answers in 5 s"


SOLO_VM = (
    b"/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/forewarn-rg/providers/Microsoft.Compute/"
    b"virtualMachines/solo?api-version=2024-07-01"
)


def answered(sock: socket.socket) -> bool:
    """Whether the server has sent something on ``sock`` (poll: its descriptor may be past select's 1,024)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def refusals_of(opened: list[socket.socket], most_seconds: float) -> list[bytes]:
    """The answers the server sent at once on ``opened`` (its refusals), once they stop coming: the server may still
    be accepting the last connections when the test has opened them all."""
    refusals: list[bytes] = []
    waiting = list(opened)
    quiet_since = started = time.monotonic()
    while time.monotonic() - started < most_seconds and not (refusals and time.monotonic() - quiet_since > 0.5):
        answers = [sock for sock in waiting if answered(sock)]
        if answers:
            refusals += [read_answer(sock)[2] for sock in answers]
            waiting = [sock for sock in waiting if sock not in answers]
            quiet_since = time.monotonic()
        time.sleep(0.1)
    return refusals


def test_each_api_port_counts_its_own_connections(tmp_path):
    """1,100 idle connections to the EC2 API port once made the control API and ARM answer 503 for as long as they
    were held: the API ports shared one cap of 1,024 connections. Each port now has its own."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:  # this process holds the 1,100 connections
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    held: list[socket.socket] = []
    with Server(tmp_path) as server:  # the default limits: idle connections are kept 30 s
        try:
            for n in range(1100):  # 64 per address, the cap per source
                held.append(connect(server.ec2_port, loopback_address(3, n // 64 + 1)))
            refusals = refusals_of(held, most_seconds=10)
            cap = 1100 - len(refusals)  # 1,024, or less where the descriptor limit is low
            assert refusals == [b"too many connections to this server (%d)" % cap] * len(refusals) and refusals
            for port, path in ((server.port, b"/healthz"), (server.arm_port, SOLO_VM)):
                with connect(port, "127.0.0.13") as sock:
                    sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    status, _, body = read_answer(sock)
                    assert status == 200, body
        finally:
            for sock in held:
                sock.close()


HUNG_UP_MID_BODY = {
    "control": "/v1/events",
    "arm": "/providers/Microsoft.ResourceGraph/resources?api-version=2022-10-01",
    "ec2": "/",
    "gce": "/compute/v1/projects/p/zones/z/instances/i/simulateMaintenanceEvent",
}


def test_a_client_that_hangs_up_mid_body_is_one_line_of_the_log_not_an_error(server):
    """Each uvicorn-served surface reads the whole body before it acts: a client gone before it arrived is noted in
    one line, never logged as a failure with a traceback, and the surface serves on."""
    ports = {"control": server.port, "arm": server.arm_port, "ec2": server.ec2_port, "gce": server.gce_port}
    start = server.log_path.stat().st_size
    for surface, path in HUNG_UP_MID_BODY.items():
        with connect(ports[surface]) as sock:
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f'Content-Length: 100\r\n\r\n{{"half":'.encode()
            )
            time.sleep(0.1)  # the head is read, the body awaited
    expected = [
        f"POST {path.partition('?')[0]} on port {ports[surface]}: the client closed"
        for surface, path in HUNG_UP_MID_BODY.items()
    ]
    deadline = time.monotonic() + 10
    while True:
        written = server.log_path.read_bytes()[start:].decode(errors="replace")
        if all(line in written for line in expected) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert all(line in written for line in expected), written
    assert "Traceback" not in written and " ERROR " not in written, written
    for surface in ports:
        with connect(ports[surface]) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert read_answer(sock)[0] < 500
