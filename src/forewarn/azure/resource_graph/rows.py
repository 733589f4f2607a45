"""One ``maintenanceresources`` row per scheduled event, in the shape Azure Resource Graph returns it.

The shape is the sample of Microsoft's "Scheduled Events Using Azure Resource Graph". Plain arguments rather than
engine records, so the engine, a replay or a test can build rows without this module knowing their classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SCHEDULED_EVENTS_TYPE = "microsoft.maintenance/scheduledevents"
# properties.ResourceType: "Currently the only possible value is VirtualMachine" (Azure: "Scheduled Events in Azure
# Resource Graph" and "Scheduled Events in Event Grid" alike), also for an event hung under a scale set or an
# availability set: what the event affects are the VMs in Resources, not the set.
RESOURCE_TYPES = ("VirtualMachine",)


def scheduled_event_row(
    *,
    event_id: str,
    status: str,
    event_type: str,
    source: str,
    not_before: str,
    duration_seconds: int,
    description: str,
    resources: Sequence[str],
    subscription_id: str,
    resource_group: str,
    location: str,
    target_resource_id: str,
    resource_type: str = "VirtualMachine",
    tenant_id: str = "",
    zones: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The ARG row of one scheduled event at its current status.

    ``not_before`` is the RFC 1123 text IMDS shows (``Mon, 19 Sep 2025 18:29:47 GMT``), or ``""`` once started.
    ``target_resource_id`` is the VM, scale set or availability set the event was raised on; the row's ``id`` hangs
    the event under it, lower-cased as in that page's sample (every fixed segment there is lower case, and ARG
    compares ids case-insensitively anyway). ``name`` keeps the EventId as IMDS spells it.
    """
    if resource_type not in RESOURCE_TYPES:
        raise ValueError(f"resource_type must be one of {RESOURCE_TYPES}, not {resource_type!r}")
    scope = f"/subscriptions/{subscription_id}/resourcegroups/{resource_group}/".lower()
    if not target_resource_id.lower().startswith(scope):
        # A row filed under one subscription with an id in another would be shown to the wrong principal.
        raise ValueError(f"target_resource_id {target_resource_id!r} is not in {scope!r}")
    return {
        "id": f"{target_resource_id.rstrip('/')}/providers/{SCHEDULED_EVENTS_TYPE}/{event_id}".lower(),
        "name": event_id,
        "type": SCHEDULED_EVENTS_TYPE,
        "tenantId": tenant_id,
        "kind": "",
        "location": location,
        "resourceGroup": resource_group,
        "subscriptionId": subscription_id,
        "managedBy": "",
        "sku": None,
        "plan": None,
        "properties": {
            "EventId": event_id,
            "EventStatus": status,
            "EventType": event_type,
            "EventSource": source,
            "NotBefore": not_before,
            "DurationInSeconds": duration_seconds,
            "Description": description,
            "ResourceType": resource_type,
            "Resources": list(resources),
            # The documented query projects it although no payload sample carries it ("Scheduled Events Using Azure
            # Resource Graph"): we fill it with what the event targets, the one value it can sensibly hold.
            "TargetResourceId": target_resource_id,
        },
        "tags": {},
        "identity": None,
        "zones": list(zones) if zones is not None else None,
        "extendedLocation": None,
    }
