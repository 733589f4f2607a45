"""The control API answers as its OpenAPI document says: every error in the documented ``{"error": {...}}`` shape,
and a bounded schemathesis run against a real server's ``/openapi.json``.

The schemathesis run is small by default: ``FOREWARN_FUZZ_EXAMPLES`` generated cases (10 unless set) per operation,
once with schema-valid and once with schema-violating data; set the variable higher for a longer hunt, e.g.
``FOREWARN_FUZZ_EXAMPLES=500``. Checks: no 5xx, documented status codes, content types, headers and response bodies.
Schema-valid requests that name what does not exist (a VM called "") are refused with 400/404 by design, so
schemathesis's positive-data-acceptance check is not among them.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from helpers import Server

FUZZ_EXAMPLES = int(os.environ.get("FOREWARN_FUZZ_EXAMPLES", "10"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def _is_error_shape(body) -> bool:
    return (
        isinstance(body, dict)
        and set(body) == {"error"}
        and isinstance(body["error"], dict)
        and isinstance(body["error"].get("code"), str)
        and isinstance(body["error"].get("message"), str)
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("conformance")) as running:
        yield running


# ------------------------------------------------------------------------------------------- the error shape
@pytest.mark.parametrize(
    "method, path, body, status",
    [
        ("GET", "/v1/nowhere", None, 404),  # unknown route
        ("DELETE", "/v1/events", None, 405),  # wrong method
        ("OPTIONS", "/v1/events", None, 405),
        ("POST", "/v1/platform/evict", b"\xff\xfe{", 400),  # a body that is not JSON text
        ("POST", "/v1/events", b"{", 400),  # malformed JSON
        ("POST", "/v1/events", b'{"type": 3}', 400),  # validation
        ("GET", "/v1/journal?limit=0", None, 400),  # query validation
        ("GET", "/v1/events/NOPE-NOT-AN-EVENT", None, 404),  # unknown event
    ],
)
def test_every_error_has_the_documented_shape(server, method, path, body, status):
    response = requests.request(
        method,
        f"{server.control}{path}",
        data=body,
        headers={"Content-Type": "application/json"} if body is not None else {},
        timeout=10,
    )
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert _is_error_shape(response.json()), response.text


@pytest.mark.parametrize(
    "path, allowed",
    [
        ("/v1/events", "GET, POST"),
        ("/v1/imds/faults", "DELETE, GET, POST"),
        ("/v1/policies/westno", "GET, PATCH"),
        ("/v1/vms/delete", "POST"),  # not GET: /v1/vms/{name} also matches, but the document means this path
        ("/v1/waves", "GET, POST"),
    ],
)
def test_a_wrong_method_gets_405_with_every_method_of_the_path(server, path, allowed):
    for method in ("OPTIONS", "PUT"):
        response = requests.request(method, f"{server.control}{path}", timeout=10)
        assert response.status_code == 405
        assert response.headers["allow"] == allowed
        assert _is_error_shape(response.json())


def test_the_openapi_document_tells_the_errors_the_api_sends(server):
    document = requests.get(f"{server.control}/openapi.json", timeout=10).json()
    assert "HTTPValidationError" not in document["components"]["schemas"]
    error = document["components"]["schemas"]["ErrorOut"]
    assert error["required"] == ["error"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert "422" not in operation["responses"], (method, path)
            if operation.get("parameters") or operation.get("requestBody"):
                assert "400" in operation["responses"], (method, path)
            for status, response in operation["responses"].items():
                if status[0] in "45":
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/ErrorOut"
                    }, (method, path, status)


# ----------------------------------------------------------------------------------------------- schemathesis
def _operation_outcomes(
    operation, mode: GenerationMode, outcomes: Counter, path_parameters: dict | None = None
) -> list[str]:
    """Run ``FUZZ_EXAMPLES`` generated cases of one operation; the failures, each with its reproduction."""
    failures: list[str] = []

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path_parameters))
    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    def run(case):
        try:
            response = case.call_and_validate(checks=CHECKS, timeout=10)
        except AssertionError as error:  # schemathesis's check failures; keep going, report them all at the end
            failures.append(f"{operation.label} ({mode.value}): {error}")
            return
        outcomes[(operation.label, mode.value, response.status_code)] += 1

    run()
    return failures


def test_the_control_api_conforms_to_its_openapi_document(server, request):
    started = time.monotonic()
    schema = schemathesis.openapi.from_url(f"{server.control}/openapi.json")
    # Names that exist, so that generated requests also reach past "not found" into the handlers.
    event_id = server.schedule(type="Reboot", vms=["WestNO_0"], notice="1h")[0]["event_id"]
    wave_id = server.post("/v1/waves", {"type": "Freeze", "groups": ["westno"]}, expect=201).json()["wave"]["wave_id"]
    known = {"event_id": event_id, "wave_id": wave_id, "owner": "westno", "name": "WestNO_1"}
    outcomes: Counter = Counter()
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        failures += _operation_outcomes(operation, GenerationMode.POSITIVE, outcomes)
        names = {name: known[name] for name in (p.name for p in operation.path_parameters) if name in known}
        if names:
            if "/scale-sets/" in operation.path:
                names["name"] = "myvmss"
            failures += _operation_outcomes(operation, GenerationMode.POSITIVE, outcomes, names)
        # A path parameter that is any string cannot be made invalid: negative cases need a query or a body.
        if len(operation.query) or len(operation.body):
            failures += _operation_outcomes(operation, GenerationMode.NEGATIVE, outcomes)
    elapsed = time.monotonic() - started
    by_status: Counter = Counter()
    for (_, _, status), count in outcomes.items():
        by_status[status] += count
    summary = (
        f"schemathesis: {sum(outcomes.values())} requests over {len(operations)} operations in {elapsed:.1f} s "
        f"(FOREWARN_FUZZ_EXAMPLES={FUZZ_EXAMPLES}); status codes: "
        + ", ".join(f"{status}: {count}" for status, count in sorted(by_status.items()))
    )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_line(summary)
    assert len(operations) >= 40
    assert not failures, "\n\n".join(failures[:20])


def test_an_unexpected_exception_is_a_500_in_the_error_shape(tmp_path):
    """A bug in a handler must not leak a bare text 500 (in process: no route of the real server fails on purpose)."""
    import asyncio

    import httpx

    from forewarn.app.runtime import Maintenance
    from forewarn.control.app import create_control_app
    from helpers import T0, open_store, small_fleet

    service = Maintenance.open(open_store(str(tmp_path / "bug.db")), small_fleet(), "manual", 1.0, T0, "seed")
    app = create_control_app(service)

    @app.get("/v1/bug")
    async def bug():
        raise RuntimeError("a bug")

    async def call():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
            return await client.get("/v1/bug")

    response = asyncio.run(call())
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "InternalError"
    assert "RuntimeError" in response.json()["error"]["message"]
