"""The ``forewarn`` command: the root group and its options; each command group lives in its own module.

Every module imported here is light (click and the shared helpers); what a command needs beyond that (the server,
the engine, YAML, the scenario runner) it imports when it runs, so that ``forewarn --help`` and client commands
start fast (bench/startup.py).
"""

from __future__ import annotations

import click

from forewarn import __version__
from forewarn.cli import clock, fleet, history, sandbox, serve, wait, waves
from forewarn.cli.common import CONTEXT, DEFAULT_SERVER, server_url
from forewarn.cloud import registered
from forewarn.conformance.cli import conformance
from forewarn.recording.cli import COMMANDS as RECORDING_COMMANDS
from forewarn.scenarios.cli import scenario


@click.group(
    context_settings=CONTEXT,
    epilog="""\b
Start a server with the demo fleet on a hand-moved clock, then drive it from another shell:
  forewarn serve --fleet demo --db demo.db --clock manual
  forewarn schedule --type Freeze --vm WestNO_0,WestNO_1
  curl -s -H Metadata:true 'http://127.0.0.10:8169/metadata/scheduledevents?api-version=2020-07-01'
  forewarn clock next          # NotBefore passes: the event is Started
  forewarn clock next          # the impact window ends: the event leaves the document
  forewarn events --all
Docs: docs/ in the source tree (control.md lists every command and endpoint).""",
)
@click.option(
    "--server",
    envvar="FOREWARN_SERVER",
    default=DEFAULT_SERVER,
    show_default=True,
    callback=server_url,
    help="Control API of the server to drive (env FOREWARN_SERVER); http:// when no scheme is given.",
)
@click.option(
    "--control-token",
    envvar="FOREWARN_CONTROL_TOKEN",
    metavar="TOKEN",
    help="The server's control token, when it has one (env FOREWARN_CONTROL_TOKEN).",
)
@click.version_option(__version__, prog_name="forewarn")
def cli(server: str, control_token: str | None) -> None:
    """forewarn: cloud maintenance notices (Azure Scheduled Events, Amazon EC2 scheduled events, Compute Engine host
    maintenance), self-hosted, on a clock you control."""


for command in (
    serve.serve,
    clock.clock,
    history.journal,
    history.reset,
    wait.wait,
    fleet.fleet,
    waves.wave,
    scenario,
    conformance,
    sandbox.sandbox,
    *RECORDING_COMMANDS,
    *(command for cloud in registered() for command in cloud.cli_commands()),
):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="forewarn")
