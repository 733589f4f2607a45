"""Small helpers shared by the raw ASGI surfaces (the hot paths do not go through a framework)."""

from __future__ import annotations

from typing import Iterable

JSON = b"application/json; charset=utf-8"
TEXT = b"text/plain; charset=utf-8"


async def respond(send, status: int, body: bytes, content_type: bytes = JSON, extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive, limit: int = 1 << 20) -> bytes | None:
    """The request body, or None when it is larger than ``limit`` bytes."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def header_values(scope, name: bytes) -> list[bytes]:
    return [value for key, value in scope["headers"] if key == name]
