"""Rows of scheduled events for the Resource Graph tests (the query engine and the queries on a real server)."""

from __future__ import annotations

from forewarn.azure.resource_graph import scheduled_event_row

SUB_A = "11111111-1111-4111-8111-111111111111"
SUB_B = "22222222-2222-4222-8222-222222222222"
NOT_BEFORE = "Fri, 19 Sep 2025 18:29:47 GMT"


def event(
    n: int,
    status: str = "Scheduled",
    subscription: str = SUB_A,
    group: str = "rg1",
    event_type: str = "Freeze",
    zones: list[str] | None = None,
) -> dict:
    return scheduled_event_row(
        event_id=f"E{n}",
        status=status,
        event_type=event_type,
        source="Platform",
        not_before=NOT_BEFORE if status == "Scheduled" else "",
        duration_seconds=5 if event_type == "Freeze" else -1,
        description=f"event {n}",
        resources=[f"vm{n}", f"vm{n}b"],
        subscription_id=subscription,
        resource_group=group,
        location="westus2",
        target_resource_id=f"/subscriptions/{subscription}/resourceGroups/{group}"
        f"/providers/Microsoft.Compute/virtualMachines/vm{n}",
        tenant_id="tenant-1",
        zones=zones,
    )
