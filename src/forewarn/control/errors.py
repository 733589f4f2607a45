"""Every error of the control API in its one documented shape, ``{"error": {"code": ..., "message": ...}}``, and the
OpenAPI document saying so.

FastAPI and Starlette answer some errors themselves, each in another shape: ``{"detail": ...}`` for an unknown route
(404), a wrong method (405), a body that cannot be parsed (400); a bare text 500 for an unexpected exception; and the
document advertises a 422 ``HTTPValidationError`` that this API never sends (validation errors are 400 ``Invalid``).
The handlers here replace those answers, and :func:`conform_openapi` rewrites the document to match.
"""

from __future__ import annotations

import re
from functools import lru_cache
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from forewarn.control.models import ErrorOut

# The code of each status Starlette or FastAPI may raise on their own; the rest use the status phrase, CamelCased.
_CODES = {
    400: "Invalid",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    413: "TooLarge",
    500: "InternalError",
    503: "StoreUnavailable",
}
_WRITES = ("post", "put", "patch", "delete")
_METHODS = ("get", "head", "post", "put", "patch", "delete", "options", "trace")


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one way the control API, its middlewares included, answers an error."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _code(status: int) -> str:
    if status in _CODES:
        return _CODES[status]
    try:
        return "".join(word.capitalize() for word in HTTPStatus(status).phrase.split())
    except ValueError:
        return f"Http{status}"


@lru_cache(maxsize=512)
def _path_pattern(template: str) -> re.Pattern:
    parts = re.split(r"(\{[^}/]+\})", template)
    return re.compile("".join("[^/]+" if part.startswith("{") else re.escape(part) for part in parts) + "$")


def allowed_methods(document: dict, path: str) -> list[str]:
    """The methods the OpenAPI document lists for the path a request names. Where a literal path and a templated
    one both match (``/v1/vms/delete`` and ``/v1/vms/{name}``), the literal one is the path the document means."""
    matching: dict[int, set[str]] = {}
    for template, operations in document.get("paths", {}).items():
        if _path_pattern(template).match(path):
            methods = {method.upper() for method in operations if method in _METHODS}
            matching.setdefault(template.count("{"), set()).update(methods)
    if not matching:
        return []
    return sorted(matching[min(matching)])


def install_error_handlers(app: FastAPI) -> None:
    """Answer Starlette's HTTP errors and unexpected exceptions in the API's error shape."""

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        status = error.status_code
        headers = dict(error.headers or {})
        if status == 404:
            message = (
                f"no route {request.method} {request.url.path}; the API is described at /openapi.json"
                if error.detail in (None, "Not Found")
                else str(error.detail)
            )
        elif status == 405:
            # Starlette's Allow names the methods of the first route matching the path, one of several.
            allowed = allowed_methods(app.openapi(), request.url.path) or [
                method.strip() for method in headers.get("Allow", "").split(",") if method.strip()
            ]
            headers["Allow"] = ", ".join(allowed)
            message = f"{request.method} is not allowed on {request.url.path}; allowed: {', '.join(allowed) or 'none'}"
        else:
            message = str(error.detail) if error.detail else HTTPStatus(status).phrase
        return error_response(status, _code(status), message, headers or None)

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, error: Exception):
        # Starlette logs the traceback after this answer; the client gets the shape, not the internals.
        return error_response(
            500,
            "InternalError",
            f"the server failed on {request.method} {request.url.path}: {type(error).__name__}; see the server log",
        )

    original = app.openapi

    def openapi() -> dict:
        return conform_openapi(original())

    # FastAPI's documented way to change the document it serves is to replace this method on the app.
    app.openapi = openapi  # type: ignore[method-assign]


def conform_openapi(document: dict) -> dict:
    """Make the document tell the errors the API sends (idempotent; FastAPI caches the document it returns).

    Each operation that takes input answers malformed input with 400 ``Invalid`` (where FastAPI says 422); each
    one that changes something may answer 503 ``StoreUnavailable``; every error body is ``ErrorOut``."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    error_schema = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(error_schema.pop("$defs", {}))
    schemas["ErrorOut"] = error_schema
    reference = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
    for operations in document.get("paths", {}).values():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            if responses.pop("422", None) is not None or "400" in responses:
                responses["400"] = {"description": "Invalid: malformed input", "content": reference}
            if method in _WRITES:
                responses.setdefault(
                    "503",
                    {"description": "StoreUnavailable: the database failed; nothing was changed", "content": reference},
                )
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    response["content"] = reference
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    return document
