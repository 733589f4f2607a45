"""Raw HTTP/1.1 fuzzing of the metadata port of a real ``forewarn serve``: random request lines, methods, targets,
headers, bodies (plain and chunked, well-formed or not), pipelined and truncated requests.

Whatever arrives, the process stays up, never answers 5xx, and every answer is well-formed HTTP/1.1 in the style of
whoever gave it: the server's own plain-text refusal (a malformed or oversized request), the IMDS JSON error for
/metadata paths, EC2's text for /latest paths. ``make test`` runs a bounded number of examples;
FOREWARN_FUZZ_EXAMPLES=5000 runs more.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import SMALL_FLEET, Server

EXAMPLES = int(os.environ.get("FOREWARN_FUZZ_EXAMPLES", "200"))
FLEET = (
    SMALL_FLEET
    + """
ec2_instances:
  - {id: i-0123456789abcdef0, host: host-01, name: web}
"""
)
SERVER_REFUSALS = {400, 408, 413, 414, 431}  # the server's own answers, before any surface sees the request
STATUS_LINE = re.compile(rb"HTTP/1\.1 (\d{3}) [A-Za-z][A-Za-z -]*\r\n")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("fuzz"), fleet_text=FLEET) as running:
        yield running


# ------------------------------------------------------------------------------------------- the requests
PATHS = [
    "/metadata/scheduledevents",
    "/metadata/instance",
    "/metadata/instance/compute/name",
    "/metadata/versions",
    "/metadata/",
    "/metadata/nope",
    "/latest/meta-data/",
    "/latest/meta-data/instance-id",
    "/latest/api/token",
    "/latest/meta-data/events/maintenance/scheduled",
    "/latest/dynamic/instance-identity/document",
    "/latest",
    "/",
    "/2021-01-03/meta-data/",
    "/1.0/",
    "/nothing",
]
QUERIES = [
    "",
    "?api-version=2020-07-01",
    "?api-version=2021-02-01&format=text",
    "?api-version=2020-07-01&a=1&a=2",
    "?api-version=x",
    "?",
]
METHODS = ["GET", "GET", "GET", "POST", "PUT", "HEAD", "OPTIONS", "DELETE", "PATCH", "TRACE", "CONNECT", "BREW"]
NAMES = [
    "Metadata",
    "Host",
    "Content-Type",
    "Connection",
    "Expect",
    "X-Forwarded-For",
    "X-aws-ec2-metadata-token",
    "X-aws-ec2-metadata-token-ttl-seconds",
    "Accept",
    "User-Agent",
    "Upgrade",
    "Content-Length",
    "Transfer-Encoding",
]
VALUES = [
    "true",
    "false",
    "",
    "close",
    "keep-alive",
    "100-continue",
    "21600",
    "0",
    "-1",
    "99999999999",
    "chunked",
    "gzip, chunked",
    "10.0.0.1",
    "websocket",
    "application/json",
    "AQAEA" * 8,
]
token_text = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"), min_size=1, max_size=12
)
any_line_text = st.binary(max_size=20)  # anything, CR and LF included: the malformed cases


@dataclass
class Generated:
    raw: bytes
    path: str  # as sent, before any decoding
    well_formed: bool  # built to be a valid request (its answer then comes from a surface or a bound)


@st.composite
def target(draw) -> str:
    if draw(st.integers(0, 9)) == 0:
        return "/" + draw(
            st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="#?"), max_size=30)
        )
    path = draw(st.sampled_from(PATHS))
    if draw(st.integers(0, 9)) == 0:
        path += draw(st.sampled_from(["%", "%zz", "%2F..", "%00", "/../metadata", "//", "%41"]))
    return path + draw(st.sampled_from(QUERIES))


@st.composite
def body_and_headers(draw) -> tuple[list[tuple[bytes, bytes]], bytes, bool]:
    kind = draw(st.sampled_from(["none", "none", "length", "chunked", "bad-chunked", "bad-length"]))
    payload = draw(
        st.sampled_from(
            [b"", b"{}", b'{"StartRequests": []}', b'{"StartRequests": [{"EventId": 1}]}', b"not json", b"[" * 50]
        )
    )
    if kind == "none":
        return [], b"", True
    if kind == "length":
        return [(b"Content-Length", b"%d" % len(payload))], payload, True
    if kind == "bad-length":
        return (
            [(b"Content-Length", draw(st.sampled_from([b"-1", b"abc", b"1, 2", b"99999999999999999999"])))],
            payload,
            False,
        )
    sizes = draw(st.lists(st.integers(1, 64), max_size=20))
    chunks = b"".join(b"%x\r\n%s\r\n" % (size, b"x" * size) for size in sizes)
    if kind == "chunked":
        return [(b"Transfer-Encoding", b"chunked")], chunks + b"0\r\n\r\n", True
    broken = draw(
        st.sampled_from(
            [
                b"zz\r\nx\r\n0\r\n\r\n",
                b"5\r\nab\r\n0\r\n\r\n",
                b"1;ext=1\r\nx\r\n0\r\n\r\n",
                b"0\r\nX-Trailer: 1\r\n\r\n",
                b"1\r\nx\r\n",
            ]
        )
    )
    return [(b"Transfer-Encoding", b"chunked")], chunks + broken, False


@st.composite
def request(draw) -> Generated:
    method = draw(st.sampled_from(METHODS)).encode()
    path = draw(target())
    version = draw(st.sampled_from([b"HTTP/1.1"] * 6 + [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.x", b"http/1.1", b""]))
    headers = [
        (name.encode(), value.encode())
        for name, value in draw(
            st.lists(
                st.tuples(st.sampled_from(NAMES[:-2]) | token_text, st.sampled_from(VALUES) | token_text), max_size=6
            )
        )
    ]
    body_headers, body, body_ok = draw(body_and_headers())
    well_formed = body_ok and version in (b"HTTP/1.1", b"HTTP/1.0") and method.isalpha()
    if draw(st.integers(0, 9)) == 0:  # a header line with anything in it
        headers.append((draw(any_line_text), draw(any_line_text)))
        well_formed = False
    lines = [method + b" " + path.encode() + (b" " + version if version else b"")]
    lines += [name + b": " + value for name, value in headers + body_headers]
    return Generated(b"\r\n".join(lines) + b"\r\n\r\n" + body, path, well_formed)


@st.composite
def connection(draw) -> tuple[list[Generated], bytes]:
    requests = draw(st.lists(request(), min_size=1, max_size=3))
    raw = b"".join(item.raw for item in requests)
    if draw(st.integers(0, 4)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]  # truncated anywhere
    return requests, raw


# ----------------------------------------------------------------------------------------- the answers
def exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)  # no more requests: the server answers what it has, then closes
        except OSError:
            pass  # refused part-way (a bound): what it answered is still to be read
        received = []
        try:
            while chunk := sock.recv(65536):
                received.append(chunk)
        except ConnectionResetError:
            pass
        return b"".join(received)


def parse_answers(data: bytes) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    """Split the bytes into HTTP/1.1 answers, failing on anything that is not one."""
    answers = []
    while data:
        match = STATUS_LINE.match(data)
        assert match, f"not a status line: {data[:120]!r}"
        status = int(match.group(1))
        after = data[match.end() :]
        if after.startswith(b"\r\n"):  # no header lines (100 Continue)
            head, separator, rest = b"", b"\r\n", after[2:]
        else:
            head, separator, rest = after.partition(b"\r\n\r\n")
        assert separator, f"unterminated header block: {data[:200]!r}"
        headers = {}
        for line in head.split(b"\r\n") if head else []:
            name, colon, value = line.partition(b": ")
            assert colon and name == name.lower() and name.strip() == name, f"bad header line {line!r}"
            headers[name] = value
        if status in (100, 304):
            body, data = b"", rest
        else:
            length = int(headers[b"content-length"])
            assert len(rest) >= length, f"answer shorter than its Content-Length: {data[:200]!r}"
            body, data = rest[:length], rest[length:]
        answers.append((status, headers, body))
    return answers


def check_shape(status: int, headers: dict[bytes, bytes], body: bytes) -> str:
    """Which style the answer is in; fails if it is in none."""
    kind = headers.get(b"content-type", b"")
    if kind == b"application/json; charset=utf-8":
        document = json.loads(body)
        assert status < 400 or "error" in document, body
        return "imds"
    if headers.get(b"server") == b"EC2ws":  # as real EC2 IMDS signs its answers
        if status >= 400:
            assert kind == b"text/html" and body.startswith(b'<?xml version="1.0" encoding="iso-8859-1"?>'), body
        else:
            assert kind == b"text/plain", headers  # "All instance metadata is returned as text"
        return "ec2"
    assert (kind, headers.get(b"connection")) == (b"text/plain; charset=utf-8", b"close"), (status, headers, body)
    assert status in SERVER_REFUSALS, (status, body)
    return "server"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(connection())
def test_any_bytes_get_well_formed_answers_and_no_5xx(server, generated):
    requests, raw = generated
    answers = [answer for answer in parse_answers(exchange(server.imds_port, raw)) if answer[0] != 100]
    assert server.process.poll() is None, "the server died"
    styles = []
    for status, headers, body in answers:
        assert status < 500, (status, body[:200], raw[:300])
        styles.append(check_shape(status, headers, body))
    assert "server" not in styles[:-1], "a refusal of the server must be the connection's last answer"
    first = requests[0]
    if answers and first.well_formed and len(raw) >= len(first.raw) and "%" not in first.path and styles[0] != "server":
        # the first answer belongs to the first request: its style is the surface its path names
        if first.path.startswith("/metadata"):
            assert styles[0] == "imds", (answers[0], first.raw[:300])
        elif first.path.startswith("/latest"):
            assert styles[0] == "ec2", (answers[0], first.raw[:300])


def test_the_server_still_answers_after_the_fuzzing(server):
    """Runs after the fuzz test in this module (pytest keeps file order)."""
    data = exchange(
        server.imds_port, b"GET /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\nMetadata: true\r\n\r\n"
    )
    [(status, headers, body)] = parse_answers(data)
    assert status == 200 and json.loads(body)["Events"] == []
