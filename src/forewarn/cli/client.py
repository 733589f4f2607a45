"""A small client of the control API, used by the CLI."""

from __future__ import annotations

import httpx

from forewarn.net.untrusted_json import MAX_DOCUMENT_BYTES, JsonInputError, parse_json


class ClientError(Exception):
    """The server refused a request, or could not be reached; the message is for the user as it is."""


class ControlClient:
    def __init__(
        self,
        base_url: str,
        timeout: float = 30.0,
        headers: dict[str, str] | None = None,
        pointed_by: str = "--server URL or FOREWARN_SERVER",
    ):
        self.base_url = base_url.rstrip("/")
        self.pointed_by = pointed_by
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers)

    def request(self, method: str, path: str, **kwargs):
        response = self.send(method, path, **kwargs)
        if not response.content:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            try:
                return parse_json(response.content, max_bytes=MAX_DOCUMENT_BYTES)
            except JsonInputError as error:
                raise ClientError(
                    f"{self.base_url} answered HTTP {response.status_code} with JSON this client cannot use: {error}"
                ) from None
        return response.text

    def send(self, method: str, path: str, **kwargs) -> httpx.Response:
        """The response as it came (for its exact bytes); errors raise :class:`ClientError` as in ``request``."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise ClientError(
                f"cannot reach forewarn at {self.base_url} ({error.__class__.__name__}). Is `forewarn serve` running? "
                f"Point the CLI at it with {self.pointed_by}."
            ) from None
        if response.status_code >= 400:
            try:
                error = parse_json(response.content, max_bytes=MAX_DOCUMENT_BYTES)["error"]
                message = f"{error['message']} ({error['code']}, HTTP {response.status_code})"
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {response.status_code}: {response.text[:500]}"
            raise ClientError(message)
        return response

    def get(self, path: str, **kwargs):
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: dict | None = None):
        return self.request("POST", path, json=body or {})
