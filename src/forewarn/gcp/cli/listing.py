"""Compute Engine's instances in ``forewarn fleet``: status, host, zone, onHostMaintenance and the value their
``maintenance-event`` key has now."""

from __future__ import annotations

from forewarn.cloud import FleetListing


def rows(instances: list[dict]) -> list[tuple[str, ...]]:
    return [
        (i["name"], i["status"], i["host"], i["zone"], i["on_host_maintenance"], i["maintenance_event"])
        for i in instances
    ]


LISTING = FleetListing(
    key="gce",
    title="Compute Engine instances",
    path="/v1/gce/instances",
    header=("INSTANCE", "STATUS", "HOST", "ZONE", "ON HOST MAINTENANCE", "MAINTENANCE-EVENT"),
    rows=rows,
)
