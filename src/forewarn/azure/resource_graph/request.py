"""What a Resource Graph query asks and how it can be refused: plain values, free of DuckDB, so that the ARM port
can hold them without loading the query engine until a query or a central event needs it."""

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
