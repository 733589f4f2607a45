"""What a Resource Graph query is asked with and refused with: plain records, without DuckDB, so that the ARM port
and the command line can name them without loading the query engine (query.py) before a query is run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class QueryLimits:
    """How many of the costly operators one query may use. ARG's defaults ("Understanding the Azure Resource Graph
    query language"): "a default limit of three join and three mv-expand operators in a single Resource Graph SDK
    query" (its operator table says two mv-expand; the sentence on defaults is followed), and "three union legs".
    A tenant can ask Microsoft for more, hence settable."""

    join: int = 3
    mv_expand: int = 3
    union_legs: int = 3


@dataclass(frozen=True)
class QueryRequest:
    """The parts of an ARG request body that shape the answer.

    ``subscriptions`` empty or None is a tenant-level query: every subscription the caller may see. ``now`` is what
    now() and ago() read, so queries follow the emulator's clock (naive means UTC); None means the wall clock.
    """

    query: str
    subscriptions: Sequence[str] | None = None
    top: int | None = None
    skip: int | None = None
    skip_token: str | None = None
    result_format: str = "objectArray"
    now: datetime | None = None


class ResourceGraphError(Exception):
    """A refused request, with the HTTP status and the ARG error body."""

    def __init__(self, status: int, code: str, message: str, details: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = list(details)

    def body(self) -> dict[str, Any]:
        """``{"error": {"code", "message", "details": [{"code", "message"}, ...]}}``.

        Real ARG puts a support line (timestamp, correlationId) in ``message``; an HTTP layer may substitute one.
        """
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


#: Resource Graph's answers are capped in bytes as well as rows; the size and the code below are ours (ARG's pages
#: document the 1,000-row page, not the error it answers for a page too large to send).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


def response_too_large(limit: int) -> ResourceGraphError:
    """The refusal of an answer longer than ``limit`` bytes of JSON."""
    message = (
        f"The response would exceed {limit} bytes. Project fewer or shorter columns, or ask for fewer rows "
        "with $top and page through them."
    )
    return ResourceGraphError(400, "BadRequest", message, [{"code": "ResponsePayloadTooLarge", "message": message}])
