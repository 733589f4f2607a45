"""Azure Resource Graph's ``maintenanceresources`` table: its rows, their store, and KQL queries over them.

Pure of any wire format: ``run_query`` takes a ``QueryRequest`` and returns the response body as a dict; an HTTP
surface serialises it and maps ``ResourceGraphError`` to its status and ``body()``.
"""

from .query import QueryLimits, QueryRequest, ResourceGraphError, run_query
from .rows import scheduled_event_row
from .table import MaintenanceTable

__all__ = ["MaintenanceTable", "QueryLimits", "QueryRequest", "ResourceGraphError", "run_query", "scheduled_event_row"]
