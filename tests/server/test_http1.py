"""The lean HTTP/1.1 server of the metadata endpoints, spoken to over raw sockets."""

import asyncio
import contextlib
import socket
import threading
import time

import pytest

from forewarn.net.http import DROP, TEXT, Later, Request
from forewarn.server.http1 import MAX_BODY, Http1Server, Limits


def echo(request: Request):
    body = f"{request.method} {request.path} {request.query.decode()} {len(request.body)} {request.peer[0]}".encode()
    if request.path == "/boom":
        raise RuntimeError("handler bug")
    if request.path == "/drop":
        return (DROP, b"", TEXT, ())
    if request.path == "/slow":
        return Later(0.3, lambda: (200, body + b" late", TEXT, ()))
    return (200, body, TEXT, ((b"x-seen", b"yes"),))


@pytest.fixture
def address():
    with running(Limits(idle_timeout=1.0)) as bound:
        yield bound


@contextlib.contextmanager
def running(limits: Limits, server: Http1Server | None = None):
    loop = asyncio.new_event_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    server = server or Http1Server(echo, limits)
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start([sock]))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(5)
    yield sock.getsockname()
    asyncio.run_coroutine_threadsafe(server.close(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def exchange(address, raw: bytes, wait_close: bool = True) -> bytes:
    with socket.create_connection(address, timeout=5) as client:
        client.sendall(raw)
        if not wait_close:
            time.sleep(0.2)
            return client.recv(65536)
        chunks = []
        while chunk := client.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_keep_alive_and_pipelining_answer_in_order(address):
    raw = b"".join(b"GET /r%d?x=%d HTTP/1.1\r\nHost: a\r\n\r\n" % (i, i) for i in range(3))
    answer = exchange(address, raw + b"GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert answer.count(b"HTTP/1.1 200 OK\r\n") == 4
    bodies = [part.split(b"\r\n\r\n", 1)[1].split(b"HTTP/1.1")[0] for part in answer.split(b"HTTP/1.1 200 OK")[1:]]
    assert bodies == [
        b"GET /r0 x=0 0 127.0.0.1",
        b"GET /r1 x=1 0 127.0.0.1",
        b"GET /r2 x=2 0 127.0.0.1",
        b"GET /last  0 127.0.0.1",
    ]
    assert b"x-seen: yes\r\n" in answer and b"date: " in answer and b"connection: close\r\n" in answer


def test_http_1_0_closes_after_the_answer(address):
    answer = exchange(address, b"GET /old HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"GET /old  0 127.0.0.1")


def test_body_expect_continue_and_percent_decoding(address):
    body = b'{"StartRequests": []}'
    raw = (
        b"POST /a%%20b HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: %d\r\nConnection: close"
        b"\r\n\r\n" % len(body)
    ) + body
    answer = exchange(address, raw)
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"POST /a b  %d 127.0.0.1" % len(body))


def test_too_large_body_is_413(address):
    answer = exchange(address, b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1))
    assert answer.startswith(b"HTTP/1.1 413 Payload Too Large\r\n")


def test_malformed_request_is_400_and_closed(address):
    assert exchange(address, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_handler_failure_is_a_500_not_a_dropped_connection(address):
    answer = exchange(address, b"GET /boom HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")


def test_idle_connections_are_closed(address):
    with socket.create_connection(address, timeout=5) as client:
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert client.recv(65536).startswith(b"HTTP/1.1 200 OK")
        client.settimeout(5)
        started = time.monotonic()
        assert client.recv(65536) == b""  # closed by the server after the 1 s idle timeout (swept each second)
        assert time.monotonic() - started < 4


def test_a_delayed_answer_keeps_the_order_of_pipelined_requests(address):
    started = time.monotonic()
    answer = exchange(address, b"GET /slow HTTP/1.1\r\n\r\nGET /fast HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert time.monotonic() - started >= 0.3
    assert answer.index(b"GET /slow  0 127.0.0.1 late") < answer.index(b"GET /fast  0 127.0.0.1")


def test_a_dropped_request_gets_no_answer(address):
    with socket.create_connection(address, timeout=5) as client:
        client.sendall(b"GET /drop HTTP/1.1\r\n\r\n")
        try:
            assert client.recv(65536) == b""
        except ConnectionResetError:
            pass  # an abort may arrive as a reset: either way, no answer


def test_connections_over_the_total_cap_get_503_and_a_freed_slot_is_reused():
    with running(Limits(connections=3, connections_per_source=0)) as address:
        held = [socket.create_connection(address, timeout=5) for _ in range(3)]
        try:
            for client in held:  # all three admitted
                client.sendall(b"GET /a HTTP/1.1\r\n\r\n")
                assert client.recv(65536).startswith(b"HTTP/1.1 200 OK")
            answer = exchange(address, b"GET /b HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            assert answer.endswith(b"too many connections to this server (3)")
            held.pop().close()
            time.sleep(0.1)
            assert exchange(address, b"GET /c HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 OK")
        finally:
            for client in held:
                client.close()


def test_a_refused_request_behind_a_delayed_answer_is_answered_after_it(address):
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(101))
    answer = exchange(address, b"GET /slow HTTP/1.1\r\n\r\nGET /next HTTP/1.1\r\n" + many + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.index(b"GET /slow  0 127.0.0.1 late") < answer.index(b"HTTP/1.1 431 Request Header Fields Too Large")
    assert answer.endswith(b"more than 100 request headers")


def test_trailers_count_against_the_header_bounds(address):
    trailers = b"".join(b"X-%d: 1\r\n" % i for i in range(101))
    answer = exchange(
        address, b"POST /t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n" + trailers + b"\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 431 ") and answer.endswith(b"more than 100 request headers")


def test_limits_from_settings():
    limits = Limits().updated(["header_timeout=2.5", "connections-per-source=0"])
    assert (limits.header_timeout, limits.connections_per_source, limits.max_url) == (2.5, 0, 8192)
    for bad, said in (
        ("nope=1", "unknown limit 'nope'"),
        ("max_url=1.5", "max_url needs a number"),
        ("idle_timeout=0", "must be positive"),
        ("body_timeout=nan", "must be positive"),
    ):
        with pytest.raises(ValueError, match=said):
            Limits().updated([bad])


def test_a_refused_body_gets_no_100_continue(address):
    answer = exchange(
        address, b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1)
    )
    assert answer.startswith(b"HTTP/1.1 413 Payload Too Large\r\n")


def read_until(client: socket.socket, ending: bytes) -> bytes:
    received = b""
    while not received.endswith(ending):
        chunk = client.recv(65536)
        assert chunk, f"closed after {received!r}"
        received += chunk
    return received


class Counting:
    """A handler whose answer changes with every request it is asked, and that keeps the requests."""

    def __init__(self):
        self.requests: list[Request] = []

    def __call__(self, request: Request):
        self.requests.append(request)
        return (200, b"answer %d to %s %d" % (len(self.requests), request.path.encode(), len(request.body)), TEXT, ())


def test_the_same_request_again_on_its_connection_is_asked_of_the_handler_each_time():
    handler = Counting()
    same = b"GET /poll?api-version=1 HTTP/1.1\r\nHost: a\r\nMetadata: true\r\n\r\n"
    with running(Limits(), Http1Server(handler)) as address, socket.create_connection(address, timeout=5) as client:
        for n in (1, 2, 3):  # an agent polling on its kept-alive connection sends the same bytes every time
            client.sendall(same)
            assert read_until(client, b"answer %d to /poll 0" % n).startswith(b"HTTP/1.1 200 OK\r\n")
        client.sendall(b"GET /other HTTP/1.1\r\n\r\n")
        read_until(client, b"answer 4 to /other 0")
        client.sendall(same)
        read_until(client, b"answer 5 to /poll 0")
        client.sendall(same + same)  # two in one read: each answered
        assert read_until(client, b"answer 7 to /poll 0").count(b"HTTP/1.1 200 OK") in (1, 2)
    polls = [request for request in handler.requests if request.path == "/poll"]
    assert len(polls) == 6 and all(request == polls[0] for request in polls)
    assert polls[0].query == b"api-version=1" and polls[0].headers == ((b"host", b"a"), (b"metadata", b"true"))


def test_the_same_request_that_expects_100_continue_gets_it_every_time():
    raw = b"POST /approve HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}"
    with running(Limits(), Http1Server(Counting())) as address, socket.create_connection(address, timeout=5) as client:
        for n in (1, 2, 3):
            client.sendall(raw)
            answer = read_until(client, b"answer %d to /approve 2" % n)
            assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")


def test_the_same_answer_again_tells_the_date_of_its_moment():
    clock = [1_000_000_000.0]
    document = (200, b"the same document", TEXT, ())  # one object, as a surface's cached document is
    server = Http1Server(lambda request: document, clock=lambda: clock[0])
    same = b"GET /doc HTTP/1.1\r\nHost: a\r\n\r\n"
    with running(Limits(), server) as address, socket.create_connection(address, timeout=5) as client:
        client.sendall(same)
        assert b"\r\ndate: Sun, 09 Sep 2001 01:46:40 GMT\r\n" in read_until(client, b"the same document")
        clock[0] += 3600
        server.clock_moved()
        client.sendall(same)
        assert b"\r\ndate: Sun, 09 Sep 2001 02:46:40 GMT\r\n" in read_until(client, b"the same document")
