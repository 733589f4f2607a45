"""``forewarn fleet``: the served fleet, and generated fleet files."""

from __future__ import annotations

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


@click.group(
    context_settings=CONTEXT,
    invoke_without_command=True,
    epilog="""\b
Examples:
  forewarn fleet                                   # the served fleet's VMs
  forewarn fleet generate --vms 100000 --out big.yaml
  forewarn serve --fleet big.yaml --db big.db --clock manual""",
)
@JSON_OPTION
@click.pass_context
def fleet(ctx, as_json):
    """List the fleet's VMs: host, broadcast scope and where their metadata endpoint answers (or generate one)."""
    if ctx.invoked_subcommand is not None:
        return
    found = run(lambda: control_client(ctx).get("/v1/fleet"))

    def render(data):
        rows = [("VM", "HOST", "SCOPE", "FD", "UD", "IMDS ADDRESS", "IMDS PORT")]
        for vm in data["vms"]:
            rows.append(
                (
                    vm["name"],
                    vm["host"],
                    vm["scope"],
                    str(vm["fault_domain"]),
                    str(vm["update_domain"]),
                    vm["imds_address"] or "-",
                    str(vm["imds_port"] or "-"),
                )
            )
        print_table(rows)

    emit(found, as_json, render)


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
