"""Answers given later by the surface (a ``Deferred``: GCE's hanging GETs), over raw sockets: the connection waits
without a thread, pipelined requests keep their order, and a client that hangs up cancels its waiter."""

import asyncio
import socket
import threading
import time

from forewarn.net.http import TEXT, Deferred, Request
from forewarn.server.http1 import Http1Server, Limits


class Surface:
    """Holds every /wait request until ``release`` resolves them; remembers the cancelled ones."""

    def __init__(self):
        self.waiting: list[Deferred] = []
        self.cancelled: list[Deferred] = []

    def handle(self, request: Request):
        if request.path == "/wait":
            deferred = Deferred(on_cancel=self.cancelled.append)
            self.waiting.append(deferred)
            return deferred
        return (200, request.path.encode(), TEXT, ())

    def release(self, body: bytes) -> None:
        for deferred in self.waiting:
            deferred.resolve((200, body, TEXT, ((b"etag", b"abc"),)))
        self.waiting.clear()


def serve(surface: Surface):
    loop = asyncio.new_event_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    server = Http1Server(surface.handle, Limits(idle_timeout=1.0))
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start([sock]))
        ready.set()
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    ready.wait(5)
    return loop, server, sock.getsockname()


def wait_for(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_deferred_answer_comes_when_resolved_and_pipelined_requests_follow_in_order():
    surface = Surface()
    loop, server, address = serve(surface)
    try:
        with socket.create_connection(address, timeout=5) as client:
            client.sendall(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n")
            wait_for(lambda: len(surface.waiting) == 1)
            time.sleep(1.5)  # past the idle timeout: a connection held by its own pending answer stays open
            client.settimeout(0.2)
            try:
                assert client.recv(100) == b"", "answered before it was resolved"
            except TimeoutError:
                pass
            loop.call_soon_threadsafe(surface.release, b"changed")
            client.settimeout(5)
            received = b""
            while b"/after" not in received:
                chunk = client.recv(4096)
                assert chunk, received
                received += chunk
        first, second = received.split(b"HTTP/1.1 200", 2)[1:]
        assert first.endswith(b"changed") and b"etag: abc" in first
        assert second.endswith(b"/after")
        assert surface.cancelled == []
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)


def test_a_client_that_hangs_up_cancels_its_waiter():
    surface = Surface()
    loop, server, address = serve(surface)
    try:
        client = socket.create_connection(address, timeout=5)
        client.sendall(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_for(lambda: len(surface.waiting) == 1)
        client.close()
        wait_for(lambda: len(surface.cancelled) == 1)
        assert surface.cancelled[0] is surface.waiting[0]
        surface.waiting[0].resolve((200, b"late", TEXT, ()))  # resolving a cancelled waiter does nothing
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
