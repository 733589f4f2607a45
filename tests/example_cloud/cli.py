"""``forewarn example maintain NAME``: announce a reboot of an example machine; and the example's table in
``forewarn fleet``."""

from __future__ import annotations

import click

from forewarn.cli.common import CONTEXT, JSON_OPTION, control_client, emit, run
from forewarn.cloud import FleetListing


@click.group(context_settings=CONTEXT)
def example():
    """The example cloud's machines (a tests-only cloud)."""


@example.command(name="maintain", context_settings=CONTEXT)
@click.argument("name")
@click.option("--notice", help="Time until the reboot, e.g. 30m (default: 15m).")
@JSON_OPTION
@click.pass_context
def maintain(ctx, name, notice, as_json):
    """Announce a reboot of NAME: its maintenance key says REBOOT until then."""
    answer = run(lambda: control_client(ctx).post("/v1/example/maintenance", {"machine": name, "notice": notice}))
    emit(answer, as_json, _print_reboots)


def _print_reboots(reboots: list[dict]) -> None:
    for reboot in reboots:
        click.echo(f"{reboot['machine']}: reboot at {reboot['at']}")


def listed(machines: list[dict]) -> list[tuple[str, ...]]:
    """``forewarn fleet``'s rows of the example's machines, from the list of every cloud's."""
    return [(machine["name"], machine["host"]) for machine in machines if machine["cloud"] == "example"]


LISTING = FleetListing(
    key="example", title="Example machines", path="/v1/fleet/machines", header=("MACHINE", "HOST"), rows=listed
)
