"""Azure Resource Graph's ``maintenanceresources`` table: its rows, their store, and KQL queries over them.

Pure of any wire format: ``run_query`` takes a ``QueryRequest`` and returns the response body as a dict; an HTTP
surface serialises it and maps ``ResourceGraphError`` to its status and ``body()``.

The table and the query engine load DuckDB, which a server without centrally published events never needs: they are
imported when first named (``MaintenanceTable``, ``run_query``), not with this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .request import QueryLimits, QueryRequest, ResourceGraphError
from .rows import scheduled_event_row

if TYPE_CHECKING:
    from .query import run_query
    from .table import MaintenanceTable

__all__ = ["MaintenanceTable", "QueryLimits", "QueryRequest", "ResourceGraphError", "run_query", "scheduled_event_row"]


def __getattr__(name: str) -> Any:
    if name == "MaintenanceTable":
        from .table import MaintenanceTable

        return MaintenanceTable
    if name == "run_query":
        from .query import run_query

        return run_query
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
