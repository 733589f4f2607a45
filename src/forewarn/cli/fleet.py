"""``forewarn fleet``: the served fleet, fleet files checked, and generated ones."""

from __future__ import annotations

import functools
import json
import sys
from typing import TYPE_CHECKING, Any

import click

from forewarn.cli.common import (
    CONTEXT,
    JSON_OPTION,
    control_client,
    emit,
    fail,
    print_table,
    run,
)
from forewarn.core.words import counted

if TYPE_CHECKING:
    from forewarn.cloud import FleetListing
    from forewarn.fleet.model import Fleet


@click.group(
    context_settings=CONTEXT,
    invoke_without_command=True,
    epilog="""\b
Examples:
  forewarn fleet                                   # the served fleet's VMs and instances
  forewarn fleet validate fleet.yaml               # check a fleet file without serving it
  forewarn fleet generate --vms 100000 --out big.yaml
  forewarn serve --fleet big.yaml --db big.db --clock manual""",
)
@JSON_OPTION
@click.pass_context
def fleet(ctx, as_json):
    """List the fleet's machines, a table for each cloud: Azure VMs (host, broadcast scope, domains, where their
    metadata endpoint answers), then EC2 and Compute Engine instances (or check a fleet file, or generate one).
    --json gives each cloud's listing route (GET /v1/fleet, GET /v1/ec2/instances, GET /v1/gce/instances) under its
    key ("azure", "ec2", "gce")."""
    if ctx.invoked_subcommand is not None:
        return
    client = control_client(ctx)
    listings = _listings()
    found = {listing.key: run(functools.partial(client.get, listing.path)) for listing in listings}
    emit(found, as_json, lambda answers: _print_fleet(listings, answers))


def _listings() -> list[FleetListing]:
    """Every registered cloud's listing, in the registry's order (a cloud with none is not listed)."""
    from forewarn.cloud import registered

    return [listing for cloud in registered() if (listing := cloud.fleet_listing()) is not None]


def _print_fleet(listings: list[FleetListing], found: dict[str, Any]) -> None:
    tables = [(listing, listing.rows(found[listing.key])) for listing in listings]
    shown = [(listing, rows) for listing, rows in tables if rows]
    for index, (listing, rows) in enumerate(shown):
        if index:
            click.echo()
        if len(shown) > 1:
            click.echo(f"{listing.title} ({len(rows)})")
        print_table([listing.header, *rows])
    if not shown:
        click.echo("no machines")


@fleet.command(name="generate", context_settings=CONTEXT)
@click.option("--vms", type=int, required=True, help="How many Azure VMs (0 with --gce: Compute Engine only).")
@click.option("--vms-per-host", type=int, default=10, show_default=True)
@click.option("--subscriptions", type=int, default=0, help="How many subscriptions (default: one per 10,000 VMs).")
@click.option("--scale-set-share", type=float, default=0.6, show_default=True, help="Share of VMs in scale sets.")
@click.option(
    "--availability-set-share",
    type=float,
    default=0.3,
    show_default=True,
    help="Share of VMs in availability sets; the rest are standalone.",
)
@click.option("--spot-share", type=float, default=0.05, show_default=True, help="Share of standalone VMs on Spot.")
@click.option("--seed", default="forewarn", show_default=True, help="The same seed writes the same file.")
@click.option(
    "--gce",
    type=int,
    default=0,
    show_default=True,
    help="How many Compute Engine instances, on the same hosts (gce_instances: gce-00000, ...).",
)
@click.option(
    "--gce-gpu-share",
    type=float,
    default=0.05,
    show_default=True,
    help="Share of the Compute Engine instances with a GPU (terminated for maintenance, not migrated).",
)
@click.option("--gce-spot-share", type=float, default=0.1, show_default=True, help="Share that are Spot VMs.")
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, writable=True),
    default="-",
    show_default=True,
    help="File to write ('-': stdout).",
)
def fleet_generate(
    vms,
    vms_per_host,
    subscriptions,
    scale_set_share,
    availability_set_share,
    spot_share,
    seed,
    gce,
    gce_gpu_share,
    gce_spot_share,
    out,
):
    """Write a large fleet file (scale sets, availability sets, standalone and Spot VMs over shared hosts, and
    Compute Engine instances with --gce), for waves and benchmarks. Reproducible from its seed.

    \b
    Examples:
      forewarn fleet generate --vms 1000 --out big.yaml
      forewarn fleet generate --vms 1000 --gce 500 --out mixed.yaml   # 150 hosts shared by both clouds
      forewarn fleet generate --vms 0 --gce 2000 --out gce.yaml"""
    from forewarn.fleet.generate import FleetShape, fleet_yaml

    shape = FleetShape(
        vms,
        vms_per_host,
        subscriptions,
        scale_set_share,
        availability_set_share,
        spot_share,
        seed,
        gce=gce,
        gce_gpu_share=gce_gpu_share,
        gce_spot_share=gce_spot_share,
    )
    try:
        text = fleet_yaml(shape)
    except ValueError as error:
        fail(str(error))
    if out == "-":
        click.echo(text, nl=False)
        return
    with open(out, "w") as handle:
        handle.write(text)
    click.echo(f"wrote {out}: {text.splitlines()[0].split(': ', 1)[1]}", err=True)


@fleet.command(name="validate", context_settings=CONTEXT)
@click.argument("file")
@JSON_OPTION
def fleet_validate(file, as_json):
    """Check a fleet file as `forewarn serve --fleet FILE` reads it, without serving it (FILE may be demo). Problems
    are printed as FILE:LINE: WHERE: PROBLEM, with a "did you mean" for a misspelt key; exit status 1 when there
    are any. Its event_grid section, if any, is checked when served.

    \b
    Examples:
      forewarn fleet validate fleet.yaml
      forewarn fleet validate fleet.yaml --json | jq .valid"""
    from forewarn.core.errors import CoreError
    from forewarn.fleet.file import FleetFileError, load_fleet_document

    try:
        document = load_fleet_document(file)
    except (FleetFileError, CoreError, ValueError) as error:
        problems = str(error).splitlines()
        if as_json:
            click.echo(json.dumps({"file": file, "valid": False, "problems": problems}, indent=2))
        else:
            for problem in problems:
                click.echo(problem, err=True)
        sys.exit(1)
    summary = _fleet_summary(document.fleet)
    if as_json:
        found = {"file": file, "valid": True, **summary, "event_grid_section": document.event_grid is not None}
        click.echo(json.dumps(found, indent=2))
        return
    later = "; its event_grid section is checked when served" if document.event_grid is not None else ""
    fleet = document.fleet
    parts = ", ".join(part.described(counted) for part in fleet.parts.values())
    click.echo(f"{file}: ok ({parts}, on {counted(summary['hosts'], 'host')}){later}")


def _fleet_summary(found: Fleet) -> dict[str, Any]:
    counts = {key: count for part in found.parts.values() for key, count in part.summary().items()}
    return {**counts, "hosts": len(found.hosts), "default_vm": found.default_vm}
