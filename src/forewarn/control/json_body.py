"""The control API's request bodies, checked by ``parse_json`` before FastAPI parses them.

FastAPI parses a body with ``json.loads``: 2,000 nested brackets raise RecursionError there, which it answers
``{"detail": "There was an error parsing the body"}``, outside the control API's ``{"error": {...}}`` shape, and
nothing bounds a body's size. This ASGI middleware reads the body (at most ``MAX_BODY_BYTES``), refuses what
``parse_json`` refuses in the control API's shape, and hands the same bytes on.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect

from forewarn.control.errors import error_response
from forewarn.net.untrusted_json import MAX_BODY_BYTES, JsonInputError, parse_json

_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class JsonBodyGuard:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in _WITH_BODY:
            await self.app(scope, receive, send)
            return
        content_type = next((value for name, value in scope["headers"] if name == b"content-type"), b"")
        # FastAPI reads a body as JSON when it has no content type or a JSON one; others are not ours to judge.
        if content_type and b"json" not in content_type.lower():
            await self.app(scope, receive, send)
            return
        declared = next((value for name, value in scope["headers"] if name == b"content-length"), b"")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            await error_response(413, "TooLarge", f"the request body is larger than {MAX_BODY_BYTES} bytes")(
                scope, receive, send
            )
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":  # server/listeners.py says so in the log
                raise ClientDisconnect()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                await error_response(413, "TooLarge", f"the request body is larger than {MAX_BODY_BYTES} bytes")(
                    scope, receive, send
                )
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body.strip():
            try:
                parse_json(body)
            except JsonInputError as error:
                await error_response(400, "Invalid", f"body: {error}")(scope, receive, send)
                return
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
