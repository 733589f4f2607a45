"""Azure's VMs in ``forewarn fleet``: each with its host, broadcast scope, domains and metadata endpoint."""

from __future__ import annotations

from forewarn.cloud import FleetListing


def rows(fleet: dict) -> list[tuple[str, ...]]:
    return [
        (
            vm["name"],
            vm["host"],
            vm["scope"],
            str(vm["fault_domain"]),
            str(vm["update_domain"]),
            vm["imds_address"] or "-",
            str(vm["imds_port"] or "-"),
        )
        for vm in fleet["vms"]
    ]


LISTING = FleetListing(
    key="azure",
    title="Azure VMs",
    path="/v1/fleet",
    header=("VM", "HOST", "SCOPE", "FD", "UD", "IMDS ADDRESS", "IMDS PORT"),
    rows=rows,
)
