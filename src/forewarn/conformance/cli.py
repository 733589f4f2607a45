"""``forewarn conformance``: run a handler through the battery (``run``), or list the cases (``list``). Light to
import: the battery loads when a command runs."""

from __future__ import annotations

import json
import signal
import sys
import time

import click

# The root CLI's settings, written here: the root group imports this module, so it cannot import the CLI's.
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110, "show_default": True}


@click.group(context_settings=CONTEXT)
def conformance() -> None:
    """Grade a maintenance handler: run it unmodified through each cloud's cases (docs/conformance.md)."""


@conformance.command("list")
@click.option("--cloud", "clouds", multiple=True, help="Only this cloud's cases (repeatable).")
@click.option("--timing", type=click.Choice(["fast", "realistic"]), default="fast", show_default=True)
def list_cases(clouds: tuple[str, ...], timing: str) -> None:
    """The shipped cases: cloud, name, machines, title and source."""
    from forewarn.conformance import battery
    from forewarn.conformance.cases import CaseFileError

    try:
        cases = battery(list(clouds) or None, timing)
    except CaseFileError as error:
        raise click.ClickException(str(error)) from None
    for case, _ in cases:
        mode = "" if case.mode == "metadata" else f" [{case.mode} mode]"
        click.echo(f"{case.cloud:<6} {case.name:<26} {','.join(case.machines):<22} {case.title}{mode}")
        click.echo(f"{'':<6} {'':<26} source: {case.source}")


@conformance.command("run", context_settings={"ignore_unknown_options": True})
@click.option("--cloud", "clouds", multiple=True, help="Only this cloud's cases (repeatable).")
@click.option("--cases", help="Only these cases, comma-separated.")
@click.option("--file", "files", multiple=True, metavar="CLOUD:PATH", help="A case file of your own (repeatable).")
@click.option("--timing", type=click.Choice(["fast", "realistic"]), default="fast", show_default=True)
@click.option("--machines", type=click.IntRange(1), help="Skip cases that need more machines than this.")
@click.option("--drained", metavar="CMD", help="Exits 0 once this machine's service is drained ($FOREWARN_MACHINE).")
@click.option("--restored", metavar="CMD", help="Exits 0 once this machine's service is back.")
@click.option("--json", "as_json", is_flag=True, help="The results as JSON on stdout.")
@click.option("--junit", metavar="FILE", help="Write a JUnit XML report.")
@click.option("--html", metavar="FILE", help="Write a self-contained HTML report.")
@click.option("--logs", metavar="DIR", help="Keep each case's handler output here.")
@click.option(
    "--jobs",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Run this many cases at once, each on a server of its own (handlers that listen take {port:NAME}).",
)
@click.option(
    "--sandbox",
    is_flag=True,
    help="Run each handler in a sandbox of its machine, where http://169.254.169.254 is its endpoint (needs root).",
)
@click.option(
    "--mode",
    default="metadata",
    help="The kind of handler: metadata (given a metadata address) or queue (given a queue URL, {queue_url}); "
    "the cases of that mode run, unless --cases names them.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    clouds: tuple[str, ...],
    cases: str | None,
    files: tuple[str, ...],
    timing: str,
    machines: int | None,
    drained: str | None,
    restored: str | None,
    as_json: bool,
    junit: str | None,
    html: str | None,
    logs: str | None,
    jobs: int,
    sandbox: bool,
    mode: str,
    command: tuple[str, ...],
) -> None:
    """Run HANDLER COMMAND... as each machine of each case: `{metadata_url}`, `{machine}`, `{state_dir}` (the
    machine's own directory for the case) and `{port:NAME}` (a free port for NAME in this case, the same in every
    machine's command: for handlers that talk to each other) in it are replaced, and FOREWARN_METADATA_URL,
    FOREWARN_MACHINE, FOREWARN_STATE_DIR and HTTP_PROXY are set (with --sandbox: http://169.254.169.254 and no
    proxy); a queue-mode case's `{endpoint_url}` and `{queue_url}` likewise (FOREWARN_ENDPOINT_URL,
    FOREWARN_QUEUE_URL). Exits 1 when a required case fails."""
    from forewarn import conformance as battery
    from forewarn.conformance import report
    from forewarn.conformance.cases import CaseFileError
    from forewarn.sandbox import SandboxUnavailable

    began = time.monotonic()
    # A CI runner's cancel sends SIGTERM: end as Ctrl-C does, the handlers and servers stopped on the way out.
    before = signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    progress = (lambda line: None) if as_json else (lambda line: click.echo(line, err=True))
    try:
        results = battery.run(
            command,
            clouds=list(clouds) or None,
            cases=[name.strip() for name in cases.split(",")] if cases else None,
            timing=timing,
            drained=drained,
            restored=restored,
            machines=machines,
            files=files,
            logs=logs,
            progress=progress,
            sandbox=sandbox,
            mode=mode,
            jobs=jobs,
        )
    except (CaseFileError, SandboxUnavailable) as error:
        raise click.ClickException(str(error)) from None
    except KeyboardInterrupt:
        click.echo("stopped: the cases under way ended, their handlers stopped", err=True)
        sys.exit(130)  # as a shell reports Ctrl-C; 1 means a required case failed
    finally:
        signal.signal(signal.SIGTERM, before)
    wall = time.monotonic() - began
    if as_json:
        click.echo(json.dumps(report.as_json(results, timing, wall), indent=2))
    else:
        click.echo(report.scorecard(results, timing, wall), nl=False)
    if junit:
        with open(junit, "wb") as out:
            out.write(report.junit(results, wall))
    if html:
        with open(html, "w", encoding="utf-8") as out:
            out.write(report.html_page(results, timing, wall))
    sys.exit(1 if report.failed(results) else 0)
