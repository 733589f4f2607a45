"""Azure Resource Graph's ``maintenanceresources`` table: its rows, their store, and KQL queries over them.

Pure of any wire format: ``run_query`` takes a ``QueryRequest`` and returns the response body as a dict; an HTTP
surface serialises it and maps ``ResourceGraphError`` to its status and ``body()``.
"""

from typing import Any

from .request import QueryLimits, QueryRequest, ResourceGraphError
from .rows import scheduled_event_row

__all__ = ["MaintenanceTable", "QueryLimits", "QueryRequest", "ResourceGraphError", "run_query", "scheduled_event_row"]


def __getattr__(name: str) -> Any:
    # DuckDB (and the KQL translator) load on first use: a server without central events never needs them.
    if name == "run_query":
        from .query import run_query

        return run_query
    if name == "MaintenanceTable":
        from .table import MaintenanceTable

        return MaintenanceTable
    raise AttributeError(name)
