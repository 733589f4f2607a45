"""The control-API client keeps one connection per server; a request cut short leaves none half-used behind."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from forewarn.net.control_client import ControlClient


class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class Interrupted(Exception):
    """What a signal handler raises in the middle of a request (the scenario runner's RunInterrupted)."""


def test_a_request_cut_short_does_not_poison_the_next(server, monkeypatch):
    client = ControlClient(server)
    assert client.get("/a") == {"ok": True}
    original = http.client.HTTPConnection.getresponse

    def interrupted(self):
        monkeypatch.setattr(http.client.HTTPConnection, "getresponse", original)
        raise Interrupted("SIGINT")

    monkeypatch.setattr(http.client.HTTPConnection, "getresponse", interrupted)
    with pytest.raises(Interrupted):
        client.get("/b")  # the request was sent; its answer is never read
    assert client.get("/c") == {"ok": True}  # before: CannotSendRequest on the kept connection, reported Unreachable
    client.close()
