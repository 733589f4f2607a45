"""JSON from outside: one parser with a depth and a size bound (forewarn.net.untrusted_json), and every surface that
reads JSON answering 2,000 nested levels in its own error shape, on real servers and the real CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from central_helpers import FLEET as CENTRAL_FLEET
from central_helpers import RG
from eventgrid_helpers import FLEET as EVENT_GRID_FLEET
from eventgrid_helpers import Arm
from forewarn.net.untrusted_json import MAX_BODY_BYTES, MAX_DEPTH, JsonInputError, parse_json
from helpers import ROOT, SMALL_FLEET, Server

DEEP = 2000


def nested(levels: int, inner: str = "1", key: str | None = None) -> bytes:
    opener, closer = ('{"%s":' % key, "}") if key else ("[", "]")
    return (opener * levels + inner + closer * levels).encode()


# ------------------------------------------------------------------------------------------------- the parser
def test_depth_is_bounded_before_the_parser_recurses():
    assert parse_json(nested(MAX_DEPTH)) is not None
    for too_deep in (nested(MAX_DEPTH + 1), nested(DEEP), nested(DEEP, key="a"), b"[" * 100_000):
        with pytest.raises(JsonInputError, match="deeper than 64"):
            parse_json(too_deep)
    # Brackets inside strings are text, not nesting.
    assert parse_json(json.dumps({"a": "[{" * DEEP, "b": ['\\"[']}).encode())["a"] == "[{" * DEEP


def test_size_and_what_json_cannot_carry_are_refused():
    with pytest.raises(JsonInputError, match="larger than"):
        parse_json(b" " * MAX_BODY_BYTES + b"1")
    assert parse_json(b"[1]", max_bytes=3) == [1]
    for refused in (
        b"NaN",
        b"[Infinity]",
        b"-Infinity",
        b"1e999",
        b'"\\ud800"',
        b'{"\\udfff": 1}',
        b"\xed\xa0\x80",
        b"\xff",
        '"\ud800"',
        b"1" * 5000,
        b"",
        b"{",
        b'{"a" 1}',
    ):
        with pytest.raises(JsonInputError):
            parse_json(refused)
    assert parse_json(b'"\\ud83d\\ude00"') == "\U0001f600"  # a surrogate pair is one character
    assert parse_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}  # a UTF-8 byte order mark is allowed
    with pytest.raises(JsonInputError) as raised:
        parse_json(b'{\n  "a": 1\n  "b": 2}')
    assert (raised.value.line, raised.value.column) == (3, 3) and "line 3 column 3" in str(raised.value)
    assert isinstance(raised.value, ValueError)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES, st.booleans())
def test_whatever_json_loads_reads_within_the_bounds_parses_the_same(value, as_text):
    text = json.dumps(value, ensure_ascii=as_text)
    parsed = parse_json(text if as_text else text.encode())
    assert parsed == value or (isinstance(value, float) and math.isclose(parsed, value))


# ------------------------------------------------------------------------------------- real servers, real CLI
@pytest.fixture(scope="module")
def central(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("central"), CENTRAL_FLEET) as running:
        yield running


def arm_error(response: requests.Response, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str)
    return error


def test_deep_json_is_an_arm_error_on_every_arm_body(central):
    vm = f"{RG}/virtualMachines/solo"
    for method, path, params in (
        ("PATCH", vm, {"api-version": "2024-07-01"}),
        ("PUT", vm, {"api-version": "2024-07-01"}),
        ("POST", f"{vm}/providers/Microsoft.Maintenance/scheduledevents", {"api-version": "2025-10-01-preview"}),
        ("POST", "/providers/Microsoft.ResourceGraph/resources", {"api-version": "2022-10-01"}),
    ):
        for body in (nested(DEEP), nested(DEEP, key="value"), nested(DEEP, key="properties")):
            answer = requests.request(
                method,
                f"{central.arm}{path}",
                params=params,
                data=body,
                timeout=10,
                headers={"content-type": "application/json"},
            )
            error = arm_error(answer)
            assert error["code"] == "InvalidRequestContent" and "deeper than 64" in error["message"], (path, error)
    too_big = requests.patch(
        f"{central.arm}{vm}", params={"api-version": "2024-07-01"}, data=b" " * (MAX_BODY_BYTES + 1), timeout=10
    )
    assert arm_error(too_big, 413)["code"] == "RequestEntityTooLarge"
    # The server is whole: the VM still answers.
    assert requests.get(f"{central.arm}{vm}", params={"api-version": "2024-07-01"}, timeout=10).status_code == 200


def test_deep_json_is_a_control_api_error(central):
    for path in ("/v1/events", "/v1/approvals", "/v1/clock/advance"):
        for body in (nested(DEEP), nested(DEEP, key="type"), b"[NaN]"):
            answer = requests.post(
                f"{central.control}{path}", data=body, timeout=10, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["code"] == "Invalid", answer.text
    assert (
        requests.post(
            f"{central.control}/v1/events",
            data=b"{" * (MAX_BODY_BYTES + 1),
            timeout=10,
            headers={"content-type": "application/json"},
        ).status_code
        == 413
    )
    # Bodies FastAPI reads as JSON without a content type are checked too; the ordinary path still works.
    assert requests.post(f"{central.control}/v1/clock/advance", data=nested(DEEP), timeout=10).status_code == 400
    assert central.advance("1s")["mode"] == "manual"


def test_deep_json_is_an_imds_error(tmp_path):
    with Server(tmp_path, SMALL_FLEET) as server:
        url = f"{server.imds}/metadata/scheduledevents?api-version=2020-07-01"
        for body in (nested(DEEP), nested(DEEP, key="StartRequests"), b'{"StartRequests":[{"EventId":"\\ud800"}]}'):
            answer = requests.post(url, data=body, headers={"Metadata": "true"}, timeout=10)
            assert answer.status_code == 400, answer.text
            assert set(answer.json()) == {"error"} and "StartRequests" in answer.json()["error"]
        assert server.scheduled_events().status_code == 200


class DeepAnswers(BaseHTTPRequestHandler):
    """Answers every request 200 with 2,000 nested JSON arrays: a hostile server, or a broken webhook."""

    def _answer(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = nested(DEEP)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_OPTIONS = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def deep_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), DeepAnswers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_cli_reports_a_deep_answer_in_one_line(deep_server):
    run = subprocess.run(
        [sys.executable, "-m", "forewarn", "--server", deep_server, "events"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    assert run.returncode != 0
    assert "Traceback" not in run.stderr and "deeper than 64" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_a_webhook_answering_deep_json_to_the_handshake_is_not_a_500(tmp_path, deep_server):
    with Server(tmp_path, EVENT_GRID_FLEET) as server:
        arm = Arm(server)
        assert arm.put_topic().status_code == 201
        made = arm.put_subscription("deep", f"{deep_server}/hook")
        assert made.status_code in (200, 201), made.text
        # 200 without the code it was sent: the handshake waits for a GET of the validation URL.
        assert made.json()["properties"]["provisioningState"] == "AwaitingManualAction"


def test_replay_refuses_a_deep_recording_in_one_line(tmp_path):
    env = {"PYTHONPATH": str(ROOT / "src")}
    recording = {
        "format": "forewarn-recording/1",
        "url": "u",
        "api_version": "2020-07-01",
        "started_at": "t",
        "interval_seconds": 1,
        "entries": [{"offset_seconds": 0, "at": "t", "status": 200, "body": "{}"}],
    }
    text = json.dumps(recording)
    for name, content in (
        ("deep.json", nested(DEEP)),
        ("deep-entry.json", text.replace('"{}"', nested(DEEP).decode())),
        ("nan.json", text.replace('"interval_seconds": 1', '"interval_seconds": "nan"')),
        ("status.json", text.replace('"status": 200', '"status": 99999')),
    ):
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        run = subprocess.run(
            [sys.executable, "-m", "forewarn", "replay", str(path), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
        )
        assert run.returncode == 1, (name, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, (name, run.stderr)
