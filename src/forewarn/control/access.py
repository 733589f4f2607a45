"""The control port's access rule: the browser guard (``browser_guard.py``), then one bearer token.

With a token configured (``forewarn serve --control-token``, or ``FOREWARN_CONTROL_TOKEN``), every request but
``GET /healthz`` (a liveness probe, which tells the version and whether the database answers) and the files of the
dashboard and the OpenAPI UI (``/``, ``/docs``, ``/static/...``: the same for everyone) must carry
``Authorization: Bearer TOKEN``.
This is the control port's only access rule: whatever else it serves later goes through the same gate.

A control API that listens beyond loopback without a token lets anyone who reaches the port move the clock, schedule
and cancel maintenance: ``forewarn serve`` refuses to start so unless told ``--insecure`` (and then says so loudly).
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from forewarn.control.errors import error_response
from forewarn.net.browser_guard import BrowserGuard, listens_beyond_loopback

TOKEN_ENV = "FOREWARN_CONTROL_TOKEN"
# The liveness probe, and the dashboard's and the OpenAPI UI's files: the same for everyone and holding no data (the
# page asks for the token and sends it with every request for data, the live stream included).
OPEN_PATHS = frozenset({"/healthz", "/", "/docs"})
OPEN_PREFIX = "/static/"


class ControlGate:
    """ASGI middleware in front of the control API app."""

    def __init__(self, app, guard: BrowserGuard, token: str | None = None):
        if token is not None and (not token or token != token.strip()):
            raise ValueError("the control token must be non-empty, without leading or trailing spaces")
        self.app = app
        self.guard = guard
        self._token = token.encode() if token is not None else None

    @property
    def needs_token(self) -> bool:
        return self._token is not None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            response = self._refusal(scope)
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope) -> JSONResponse | None:
        headers = Headers(scope=scope)
        refusal = self.guard.check(scope["method"], headers)
        if refusal is not None:
            return error_response(refusal.status, refusal.code, refusal.message)
        if self._token is None or scope["path"] in OPEN_PATHS or scope["path"].startswith(OPEN_PREFIX):
            return None
        scheme, _, presented = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), self._token):
            return None
        message = (
            "This server's control API needs its token: send 'Authorization: Bearer TOKEN' (the forewarn CLI "
            f"and scenario runner send --control-token or {TOKEN_ENV})."
        )
        if scheme:
            message = "The control token is wrong. " + message
        return error_response(401, "Unauthorized", message, {"www-authenticate": 'Bearer realm="forewarn control API"'})


def exposure(host: str, token: str | None, insecure: bool) -> tuple[str | None, list[str]]:
    """Whether ``forewarn serve --host HOST`` may start, and what it must warn about: (a refusal or None, warnings).
    The control API beyond loopback needs a token, or ``--insecure``. Each cloud warns of its own APIs bound there
    without their own credentials (``cloud.Serving.exposure``): their clients send those, not the control token."""
    if not listens_beyond_loopback(host):
        return None, []
    warnings = []
    if not token:
        if not insecure:
            return (
                f"the control API would listen on {host}, beyond loopback, without a token: anyone who can reach "
                "it could move the clock and schedule or cancel maintenance. Give --control-token TOKEN (or "
                f"{TOKEN_ENV}) and send it from the CLI the same way, listen on 127.0.0.1, or pass --insecure to "
                "accept this."
            ), []
        warnings += [
            "!" * 100,
            f"!! INSECURE: the control API listens on {host} WITHOUT A TOKEN (--insecure). Anyone who can reach it",
            "!! can move the clock, schedule, approve and cancel maintenance. Use --control-token (or "
            f"{TOKEN_ENV}) instead.",
            "!" * 100,
        ]
    return None, warnings
