"""The few HTTP calls a metadata service needs: the standard library's client, with a timeout on every call."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional


class Unreachable(Exception):
    """No answer: refused, reset, timed out, or not HTTP."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: Dict[str, str]  # names in lower case

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


def request(
    method: str,
    url: str,
    headers: Optional[Mapping[str, str]] = None,
    body: Optional[bytes] = None,
    timeout: float = 5.0,
) -> Answer:
    """One request on a connection of its own (a metadata service is local; a kept connection would only outlive a
    restart of it). Any status is an answer; only the absence of one raises :class:`Unreachable`."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise Unreachable(f"not an http URL: {url}")
    connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_type(parts.hostname or "", parts.port, timeout=timeout)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    try:
        connection.request(method, target, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        data = response.read()
        found = {name.lower(): value for name, value in response.getheaders()}
        return Answer(response.status, data, found)
    except (OSError, http.client.HTTPException, socket.timeout) as error:
        raise Unreachable(f"{method} {url}: {error or type(error).__name__}") from error
    finally:
        connection.close()
