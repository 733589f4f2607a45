"""The runner's client: forewarn's control API (JSON), and the EC2 API's port for what only it can do (event
windows over the EC2 Query API; queues, rules and lifecycle hooks over SQS's, EventBridge's and Auto Scaling's own). The runner drives a server only through these; it never imports the engine."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from forewarn.net import control_client
from forewarn.net.control_client import ControlClient, Response
from forewarn.net.untrusted_json import MAX_DOCUMENT_BYTES, JsonInputError, parse_json

EC2_API_VERSION = "2016-11-15"
ERROR_FIELDS = ("Code", "Message")


class ApiError(Exception):
    """A refused request: HTTP status, error code (Invalid, NotFound, Conflict, or an EC2 code) and message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{message} ({code}, HTTP {status})")
        self.status = status
        self.code = code
        self.message = message


class Unreachable(Exception):
    """The server could not be reached."""


class Api:
    def __init__(self, control: str, ec2: str | None = None, timeout: float = 30.0, token: str | None = None):
        """``token``: the server's control token (``forewarn serve --control-token``), sent on control API requests
        only (the EC2 port has credentials of its own)."""
        self.control = control.rstrip("/")
        self.ec2 = ec2.rstrip("/") if ec2 else None
        self._http = ControlClient(self.control, timeout=timeout)
        self._control_headers = {"Authorization": f"Bearer {token}"} if token else {}

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, url: str, **kwargs) -> Response:
        try:
            return self._http.send(method, url, **kwargs)
        except control_client.Unreachable as error:
            raise Unreachable(f"cannot reach {url} ({error.kind})") from None

    def request(self, method: str, path: str, body: dict | None = None, **params) -> Any:
        kwargs: dict = {"params": params} if params else {}
        kwargs["headers"] = self._control_headers
        if body is not None:
            kwargs["json_body"] = body
        response = self._send(method, f"{self.control}{path}", **kwargs)
        if response.status >= 400:
            try:
                error = parse_json(response.content, max_bytes=MAX_DOCUMENT_BYTES)["error"]
                raise ApiError(response.status, error["code"], error["message"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(response.status, f"HTTP{response.status}", response.text[:500]) from None
        if not response.content:
            return None
        try:
            return parse_json(response.content, max_bytes=MAX_DOCUMENT_BYTES)
        except JsonInputError as error:
            raise ApiError(response.status, "BadJson", f"the answer is not usable JSON: {error}") from None

    def get(self, path: str, **params) -> Any:
        return self.request("GET", path, **params)

    def post(self, path: str, body: dict | None = None) -> Any:
        return self.request("POST", path, body if body is not None else {})

    def patch(self, path: str, body: dict) -> Any:
        return self.request("PATCH", path, body)

    def put(self, path: str, body: dict) -> Any:
        return self.request("PUT", path, body)

    def text(self, path: str, **params: Any) -> str:
        """The exact bytes a GET of the control API answers (a metadata document as the machine reads it)."""
        response = self._send("GET", f"{self.control}{path}", params=params, headers=self._control_headers)
        if response.status >= 400:
            raise ApiError(response.status, "HTTP", response.text[:500])
        return response.text

    def ec2_query(self, params: dict[str, str]) -> tuple[str, list[str]]:
        """POST an EC2 Query API form; the answer's XML and the ids it names (windows, events)."""
        if self.ec2 is None:
            raise ApiError(0, "NoEc2Api", "no EC2 API URL (give --ec2-url)")
        form = {"Version": EC2_API_VERSION, **params}
        response = self._send("POST", f"{self.ec2}/", form=form)
        try:
            root = ET.fromstring(response.content)
        except ET.ParseError:
            raise ApiError(response.status, f"HTTP{response.status}", response.text[:500]) from None
        if response.status >= 400 or root.tag == "Response":
            # EC2's errors have no namespace; Auto Scaling's and SQS's <ErrorResponse> have their service's
            found = {e.tag.rsplit("}", 1)[-1]: e.text for e in root.iter() if e.tag.rsplit("}", 1)[-1] in ERROR_FIELDS}
            code = found.get("Code") or f"HTTP{response.status}"
            raise ApiError(response.status, code, found.get("Message") or response.text[:500])
        ids: list[str] = []
        for element in root.iter():
            tag = element.tag.rsplit("}", 1)[-1]
            if tag in ("instanceEventWindowId", "instanceEventId") and element.text and element.text not in ids:
                ids.append(element.text)
        return response.text, ids

    def ec2_json(self, target: str, body: dict) -> dict:
        """A JSON-protocol call on the EC2 API's port (SQS, EventBridge): its answer, or ApiError with the
        service's error code."""
        if self.ec2 is None:
            raise ApiError(0, "NoEc2Api", "no EC2 API URL (give --ec2-url)")
        response = self._send("POST", f"{self.ec2}/", json_body=body, headers={"X-Amz-Target": target})
        try:
            answer = parse_json(response.content or b"{}", max_bytes=MAX_DOCUMENT_BYTES)
        except JsonInputError:
            raise ApiError(response.status, f"HTTP{response.status}", response.text[:500]) from None
        if response.status >= 400 or not isinstance(answer, dict):
            code = str(answer.get("__type", "")).rpartition("#")[2] if isinstance(answer, dict) else ""
            message = str(answer.get("message", "")) if isinstance(answer, dict) else response.text[:500]
            raise ApiError(response.status, code or f"HTTP{response.status}", message)
        return answer


def parse_document(text: str) -> dict:
    return parse_json(text, max_bytes=MAX_DOCUMENT_BYTES)
