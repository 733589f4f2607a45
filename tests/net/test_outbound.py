"""The client of forewarn's outgoing requests (forewarn.net.outbound: webhooks, Event Grid deliveries and handshakes),
against a real HTTP/1.1 server on a local socket: connections kept alive and bounded, no redirect followed, no
cookie kept, no proxy from the environment, an answer's body bounded, and each failure named by its kind."""

from __future__ import annotations

import asyncio
import socket

import pytest

from forewarn.net.outbound import MAX_BODY, NoAnswer, Outbound


class Endpoint:
    """A minimal HTTP/1.1 server (asyncio streams): keep-alive, Content-Length bodies, an answer chosen by path."""

    def __init__(self):
        self.connections = 0
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []  # method, path, headers, body
        self.server: asyncio.Server | None = None

    async def start(self) -> Endpoint:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return "http://127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append((method, path, headers, body))
                status, extra, answer = await self._answer(path)
                lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(answer)}", *extra, "", ""]
                writer.write("\r\n".join(lines).encode() + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, path: str) -> tuple[int, list[str], bytes]:
        if path == "/redirect":
            return 302, [f"Location: {self.url}/elsewhere"], b""
        if path == "/cookie":
            return 200, ["Set-Cookie: session=abc; Path=/"], b""
        if path.startswith("/slow/"):
            await asyncio.sleep(float(path.rsplit("/", 1)[1]))  # the endpoint's own delay, in wall time
            return 200, [], b"late"
        if path == "/big":
            return 200, [], b"x" * (8 * MAX_BODY)
        return 200, ["Content-Type: text/plain"], b"ok"


def run(scenario) -> None:
    async def main():
        endpoint = await Endpoint().start()
        try:
            await scenario(endpoint)
        finally:
            await endpoint.close()

    asyncio.run(main())


def test_requests_reuse_their_connections_and_open_no_more_than_the_limit():
    async def scenario(endpoint: Endpoint):
        async with Outbound(timeout=5) as client:
            for _ in range(20):
                answer = await client.send("POST", endpoint.url + "/hook", body=b"{}", headers={"x-a": "1"})
                assert (answer.status, answer.body, answer.headers["content-type"]) == (200, b"ok", "text/plain")
            assert endpoint.connections == 1
        async with Outbound(timeout=5, connections=4) as client:
            answers = await asyncio.gather(*(client.send("GET", endpoint.url + "/slow/0.01") for _ in range(40)))
            assert {a.status for a in answers} == {200}
        assert endpoint.connections <= 1 + 4
        method, path, headers, body = endpoint.requests[0]
        assert (method, path, body, headers["x-a"], headers["content-length"]) == ("POST", "/hook", b"{}", "1", "2")

    run(scenario)


def test_a_redirect_is_the_answer_and_no_cookie_is_kept():
    async def scenario(endpoint: Endpoint):
        async with Outbound(timeout=5) as client:
            assert (await client.send("POST", endpoint.url + "/redirect", body=b"{}")).status == 302
            assert (await client.send("POST", endpoint.url + "/cookie", body=b"{}")).status == 200
            await client.send("POST", endpoint.url + "/hook", body=b"{}")
        assert [path for _, path, _, _ in endpoint.requests] == ["/redirect", "/cookie", "/hook"]
        assert "cookie" not in endpoint.requests[-1][2]

    run(scenario)


def test_proxy_settings_of_the_environment_are_not_used(monkeypatch):
    with socket.socket() as unused:  # a proxy that does not exist: a request sent there would fail
        unused.bind(("127.0.0.1", 0))
        dead = "http://127.0.0.1:%d" % unused.getsockname()[1]
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def scenario(endpoint: Endpoint):
        async with Outbound(timeout=5) as client:
            assert (await client.send("POST", endpoint.url + "/hook", body=b"{}")).status == 200

    run(scenario)


def test_an_answer_body_is_read_up_to_its_bound():
    async def scenario(endpoint: Endpoint):
        async with Outbound(timeout=5) as client:
            answer = await client.send("GET", endpoint.url + "/big")
            assert answer.status == 200 and answer.body == b"x" * MAX_BODY
            # The rest was never read: that connection is dropped, the next request opens another.
            assert (await client.send("GET", endpoint.url + "/hook")).body == b"ok"
        assert endpoint.connections == 2

    run(scenario)


def test_the_timeout_bounds_the_wait_for_the_endpoint_not_for_a_free_connection():
    async def scenario(endpoint: Endpoint):
        async with Outbound(timeout=1.0) as client:
            with pytest.raises(NoAnswer) as failure:
                await client.send("POST", endpoint.url + "/slow/3", body=b"{}")
            assert failure.value.kind == "timeout"
            assert (await client.send("POST", endpoint.url + "/slow/0", body=b"{}", timeout=5)).status == 200
        # One connection, three requests of 0.4 s each: the last waits 0.8 s for the connection, then 0.4 s.
        async with Outbound(timeout=1.0, connections=1) as client:
            answers = await asyncio.gather(*(client.send("GET", endpoint.url + "/slow/0.4") for _ in range(3)))
            assert [a.body for a in answers] == [b"late"] * 3

    run(scenario)


def test_failures_are_named_by_kind():
    async def scenario(endpoint: Endpoint):
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            closed = "http://127.0.0.1:%d/hook" % unused.getsockname()[1]
        async with Outbound(timeout=5) as client:
            for url, kind in (
                (closed, "connect"),
                ("http://no-such-host.invalid/hook", "resolution"),
                ("ftp://127.0.0.1/hook", "other"),
                ("http:///hook", "other"),
            ):
                with pytest.raises(NoAnswer) as failure:
                    await client.send("POST", url, body=b"{}")
                assert failure.value.kind == kind, (url, failure.value)
                assert str(failure.value)
            with pytest.raises(NoAnswer) as failure:  # a header the client refuses to send: no request, no crash
                await client.send("POST", endpoint.url + "/hook", body=b"{}", headers={"x-a": "one\r\ntwo: 2"})
            assert failure.value.kind == "other"
            assert (await client.send("POST", endpoint.url + "/hook", body=b"{}")).status == 200

    run(scenario)
