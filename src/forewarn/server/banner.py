"""What ``forewarn serve`` prints once it listens: what is served, where each surface and each machine's own
metadata endpoint answers."""

from __future__ import annotations

from collections.abc import Sequence

from forewarn import extras
from forewarn.app.runtime import Maintenance
from forewarn.cloud import Banner, Listening, Serving
from forewarn.core.words import counted
from forewarn.server.listeners import Listeners


def in_words(phrases: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return phrases[0] if len(phrases) == 1 else f"{', '.join(phrases[:-1])} and {phrases[-1]}"


def describe(service: Maintenance, listeners: Listeners, servings: Sequence[Serving], listening: Listening) -> str:
    """The banner: the fleet, the clock, the control API and dashboard, then each cloud's surfaces, the machines'
    own endpoints, and each cloud's closing lines."""
    control = f"http://{listeners.control[0]}:{listeners.control[1]}"
    parts: list[Banner] = [serving.banner(service, listening) for serving in servings]
    fleet, clock = service.settled_engine().fleet, service.clock
    lines = [
        f"forewarn serving {in_words([part.fleet for part in parts])} on {counted(len(fleet.hosts), 'host')}, "
        f"store {service.store.description}, clock {clock.mode}"
        + (f" x{clock.speed:g}" if clock.mode == "real" and clock.speed != 1 else "")
        + f", simulated time {service.now().replace(microsecond=0).isoformat()}",
        f"  control API   {control}   (OpenAPI: {control}/openapi.json; CLI: export FOREWARN_SERVER={control})",
        f"  dashboard     {control}/   (the fleet, its events and a timeline, live; docs/dashboard.md)",
    ]
    for part in parts:
        lines += part.surfaces
    lines += extras.banner_lines()
    lines += own_endpoints(service, listeners, servings)
    for part in parts:
        lines += part.closing
    return "\n".join(lines)


def own_endpoints(
    service: Maintenance, listeners: Listeners, servings: Sequence[Serving], shown: int = 20
) -> list[str]:
    """Each machine's own metadata endpoint (its address or port), with its cloud: at most ``shown`` of them."""
    reachable = []
    for serving in servings:
        for machine in serving.machines(service):
            where = []
            if machine.imds_address in listeners.vm_addresses:
                where.append(f"http://{machine.imds_address}:{listeners.imds[1]}")
            if machine.imds_port in listeners.vm_ports:
                where.append(f"http://{listeners.imds[0]}:{machine.imds_port}")
            if where:
                reachable.append(f"    {machine.name:<20} {serving.machine_kind:<13} {'  or  '.join(where)}")
    if not reachable:
        return []
    lines = ["  each machine's own metadata endpoint (what its agent reads as 169.254.169.254):", *reachable[:shown]]
    if len(reachable) > shown:
        lines.append(f"    ... and {len(reachable) - shown} more (forewarn fleet lists them all)")
    return lines
