"""Which of a forewarn server's ports answered, when a command reached one that is not the control API.

A server listens on several ports (``forewarn serve``'s banner lists them), and ``--server`` pointed at the wrong one
gets an answer in that port's own terms (the metadata port's ``404 {"error": "Not found"}``, ARM's
``MissingApiVersionParameter``), which says nothing of the mistake. After a refused request, the CLI asks the port
for ``/healthz`` and tells the ports apart by the answer's shape and headers.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from forewarn.net.control_client import ControlClient, Response, Unreachable
from forewarn.net.untrusted_json import JsonInputError

DEFAULT_CONTROL_PORT = 8170
PROBE_TIMEOUT = 3.0  # seconds: the probe runs after a failure, and must not make it slower to report than that

# A response header only one surface sends: the port it came from, and the serve option that sets it.
SURFACE_HEADERS = (
    ("x-ms-request-id", "the Azure ARM port (--arm-port)"),
    ("x-amzn-requestid", "the EC2 API port (--ec2-port)"),
)
METADATA_PORT = "the metadata port (--imds-port: Azure IMDS, EC2 IMDS and Compute Engine metadata)"
GCE_API_PORT = "the Compute Engine API port (--gce-port)"


def is_control_health(response: Response) -> bool:
    """Whether this is the control API's ``/healthz`` answer (control/app.py and a shared process's node)."""
    body = _json(response)
    return response.status == 200 and isinstance(body, dict) and {"status", "version", "database"} <= body.keys()


def which_port(response: Response) -> str | None:
    """The forewarn port that gave this answer to ``GET /healthz`` (None: none of them, as far as it tells)."""
    for header, port in SURFACE_HEADERS:
        if header in response.headers:
            return port
    body = _json(response)
    if body == {"error": "Not found"}:
        return METADATA_PORT
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("errors"), list):  # Google's error shape
        return GCE_API_PORT
    return None


def not_the_control_api(base_url: str) -> tuple[str | None, str | None]:
    """Which forewarn port ``base_url`` is when it is not the control API (None: not one forewarn knows), and what to
    tell a user whose ``--server`` names it (None: it is the control API, or it cannot be told)."""
    with ControlClient(base_url, timeout=PROBE_TIMEOUT) as client:
        try:
            answer = client.send("GET", "/healthz")
        except Unreachable:
            return None, None
        if is_control_health(answer):
            return None, None
        port = which_port(answer)
        what = (
            f"is {port} of a forewarn server"
            if port
            else f"does not answer as forewarn's control API (GET /healthz: HTTP {answer.status})"
        )
        return port, f"{base_url} {what}, not its control API; {_where_control_is(client, base_url)}"


def _where_control_is(client: ControlClient, base_url: str) -> str:
    parts = urlsplit(base_url)
    if parts.port != DEFAULT_CONTROL_PORT and parts.hostname:
        netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        candidate = urlunsplit((parts.scheme, f"{netloc}:{DEFAULT_CONTROL_PORT}", "", "", ""))
        try:
            if is_control_health(client.send("GET", f"{candidate}/healthz")):
                return f"the control API answers at {candidate} (--server {candidate})"
        except Unreachable:
            pass
    return (
        'point --server at the port `forewarn serve` lists as "control API" '
        f"(http://HOST:{DEFAULT_CONTROL_PORT} unless --port says otherwise)"
    )


def _json(response: Response) -> Any:
    try:
        return response.json()
    except (JsonInputError, ValueError):
        return None
