"""The one client of forewarn's control API (and of any plain HTTP/JSON port of it), shared by the CLI and the
scenario runner.

It is built on the standard library's ``http.client`` on purpose: every ``forewarn`` client command pays for its
imports before it sends a byte, and httpx alone (it imports click and rich for its own command line) costs more
process time than the whole command may use (docs/architecture.md, start-up targets). Connections are kept alive,
one per address, and a kept connection the server closed meanwhile is reopened once.

Failures come as two exceptions that carry facts, not sentences: :class:`Unreachable` (no answer) and
:class:`Refused` (an answer of 400 or more); each caller words them in its own style.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from forewarn.net.untrusted_json import MAX_DOCUMENT_BYTES, JsonInputError, parse_json

# Characters a path may carry as they are (RFC 3986 pchar and "/", plus "%" so that escapes already made stay).
_PATH_SAFE = "/:@!$&'()*+,;=-._~%"


class Unreachable(Exception):
    """No answer from ``url``. ``kind`` names the failure as httpx did before this client replaced it
    (ConnectError, ConnectTimeout, ReadTimeout, ReadError, WriteError, RemoteProtocolError), which messages show."""

    def __init__(self, url: str, kind: str):
        super().__init__(f"cannot reach {url} ({kind})")
        self.url = url
        self.kind = kind


class Refused(Exception):
    """An answer with status 400 or more. ``code`` and ``message`` come from a control-API error body
    (``{"error": {"code", "message"}}``); both are None when the body is not one."""

    def __init__(self, response: Response, code: str | None, message: str | None):
        detail = f"{message} ({code}, HTTP {response.status})" if code is not None else f"HTTP {response.status}"
        super().__init__(detail)
        self.response = response
        self.status = response.status
        self.code = code
        self.message = message


class BadJson(Exception):
    """A JSON answer that cannot be used (malformed, too deep, too large)."""

    def __init__(self, response: Response, error: JsonInputError):
        super().__init__(str(error))
        self.response = response
        self.status = response.status


class Response:
    def __init__(self, status: int, headers: dict[str, str], content: bytes):
        self.status = status
        self.headers = headers  # names in lower case
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return parse_json(self.content, max_bytes=MAX_DOCUMENT_BYTES)


def _failure_kind(error: OSError | http.client.HTTPException, sent: bool) -> str:
    if isinstance(error, TimeoutError | socket.timeout):
        return "ReadTimeout" if sent else "ConnectTimeout"
    if isinstance(error, http.client.HTTPException):
        return "RemoteProtocolError"
    return "ReadError" if sent else "ConnectError"


class ControlClient:
    def __init__(self, base_url: str, timeout: float = 30.0, headers: dict[str, str] | None = None):
        """``headers``: sent with every request (e.g. ``Authorization``). ``timeout``: seconds to connect, and then
        for each read."""
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._connections: dict[tuple[str, str, int], http.client.HTTPConnection] = {}

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.base_url}{path}"

    def send(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """One request; the answer as it came, whatever its status. ``path`` is relative to the base URL, or a full
        URL of another port. Raises :class:`Unreachable` when no answer comes."""
        url = self.url(path)
        parts = urlsplit(url)
        target = quote(parts.path or "/", safe=_PATH_SAFE)
        query = "&".join(filter(None, [parts.query, urlencode(params or {}, doseq=True)]))
        if query:
            target = f"{target}?{query}"
        all_headers = {**self.headers, **(headers or {})}
        body: bytes | None = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            all_headers["Content-Type"] = "application/json"
        elif form is not None:
            body = urlencode(form).encode()
            all_headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif method in ("POST", "PUT", "PATCH"):
            body = b""
        key = (parts.scheme, parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        for attempt in (1, 2):
            reused = key in self._connections
            connection = self._connections.get(key) or self._connect(key)
            sent = False
            try:
                connection.request(method, target, body=body, headers=all_headers)
                sent = True
                answer = connection.getresponse()
                content = answer.read()
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                self._connections.pop(key, None)
                # A kept connection the server closed while idle fails on first use: open a fresh one, once.
                stale = isinstance(error, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError)
                if reused and stale and attempt == 1:
                    continue
                raise Unreachable(url, _failure_kind(error, sent)) from None
            except BaseException:
                # Cut short by something else (a signal's exception, Ctrl-C): the connection is mid-request and
                # cannot carry the next one, so it is not kept.
                connection.close()
                self._connections.pop(key, None)
                raise
            if answer.will_close:
                connection.close()
                self._connections.pop(key, None)
            return Response(answer.status, {name.lower(): value for name, value in answer.getheaders()}, content)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _connect(self, key: tuple[str, str, int]) -> http.client.HTTPConnection:
        scheme, host, port = key
        connection: http.client.HTTPConnection
        if scheme == "https":
            connection = http.client.HTTPSConnection(host, port, timeout=self.timeout)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=self.timeout)
        self._connections[key] = connection
        return connection

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, json_body: Any = None) -> Any:
        """The answer's JSON (its text when it is not JSON, None when empty). Raises :class:`Refused` for 400 and
        more, :class:`BadJson` for JSON it cannot use, :class:`Unreachable` when no answer comes."""
        response = self.checked(self.send(method, path, params=params, json_body=json_body))
        if not response.content:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            try:
                return response.json()
            except JsonInputError as error:
                raise BadJson(response, error) from None
        return response.text

    @staticmethod
    def checked(response: Response) -> Response:
        """``response`` itself when its status is below 400; else :class:`Refused` with its error body's code."""
        if response.status < 400:
            return response
        try:
            error = response.json()["error"]
            code, message = error["code"], error["message"]
        except (ValueError, KeyError, TypeError):
            raise Refused(response, None, None) from None
        raise Refused(response, str(code), str(message))

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json_body=body if body is not None else {})

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, json_body=body)
