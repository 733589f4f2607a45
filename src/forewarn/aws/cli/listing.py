"""EC2's instances in ``forewarn fleet``: id, Name tag, state, host, zone and type."""

from __future__ import annotations

from forewarn.cloud import FleetListing


def rows(instances: list[dict]) -> list[tuple[str, ...]]:
    return [
        (i["instance_id"], i["name"], i["state"], i["host"], i["availability_zone"], i["instance_type"])
        for i in instances
    ]


LISTING = FleetListing(
    key="ec2",
    title="EC2 instances",
    path="/v1/ec2/instances",
    header=("INSTANCE", "NAME", "STATE", "HOST", "ZONE", "TYPE"),
    rows=rows,
)
