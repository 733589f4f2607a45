"""``forewarn clock``: show or move simulated time."""

from __future__ import annotations

import click

from forewarn.cli.common import (
    CONTEXT,
    JSON_OPTION,
    control_client,
    emit,
    print_table,
    run,
)
from forewarn.core.durations import parse_duration
from forewarn.core.errors import CoreError


def _print_clock(clock: dict) -> None:
    speed = f" x{clock['speed']:g}" if clock["mode"] == "real" and clock["speed"] != 1 else ""
    click.echo(f"{clock['now']}  ({clock['mode']}{speed} clock; next deadline: {clock['next_deadline'] or 'none'})")


@click.group(
    context_settings=CONTEXT,
    invoke_without_command=True,
    epilog="""\b
Examples:
  forewarn clock                    # the time, as `forewarn clock show` prints it
  forewarn clock --json             # the same, as JSON
  forewarn clock advance 10m        # also 30s, 1h30m, PT15M
  forewarn clock set 2026-04-20T22:30:00Z
  forewarn clock next               # jump to the next NotBefore or end of an impact window""",
)
@JSON_OPTION
@click.pass_context
def clock(ctx, as_json):
    """Show or move simulated time (moving needs a server started with --clock manual)."""
    if ctx.invoked_subcommand is None:
        _clock_call(ctx, as_json, "/v1/clock")
    elif as_json:
        raise click.UsageError(f"--json goes after the command: forewarn clock {ctx.invoked_subcommand} ... --json")


def _print_clock_move(moved: dict) -> None:
    """The new time, then what the move did: one line per change, ``what  id  type  targets``."""
    _print_clock(moved)
    changes = moved.get("changes", [])
    if not changes:
        click.echo("  nothing happened")
        return
    kinds = {"vm": "VM", "instance": "instance", "gce_instance": "instance", "wave": "wave"}
    rows = [
        (
            "",
            change["what"],
            change["id"],
            change["type"] or kinds.get(change["kind"], ""),
            "" if change["targets"] == [change["id"]] else ",".join(change["targets"]),
        )
        for change in changes
    ]
    print_table(rows, cell_limit=80)
    if moved["changes_total"] > len(changes):
        click.echo(
            f"  ... and {moved['changes_total'] - len(changes)} more changes (forewarn events --all, or GET "
            "/v1/journal)"
        )


def _clock_call(ctx: click.Context, as_json: bool, path: str, body: dict | None = None) -> None:
    client = control_client(ctx)
    result = run(lambda: client.get(path) if body is None else client.post(path, body))
    emit(result, as_json, _print_clock if body is None else _print_clock_move)


@clock.command(name="show", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def clock_show(ctx, as_json):
    """Show simulated time and the next deadline."""
    _clock_call(ctx, as_json, "/v1/clock")


@clock.command(name="advance", context_settings=CONTEXT)
@click.argument("duration")
@JSON_OPTION
@click.pass_context
def clock_advance(ctx, duration, as_json):
    """Move time forward by DURATION (30s, 10m, 1h30m, PT15M), applying every deadline on the way in order; prints
    what started, completed, recovered or changed (--json: the same as data)."""
    try:
        parse_duration(duration)
    except CoreError as error:
        raise click.BadParameter(str(error), param_hint="DURATION") from None
    _clock_call(ctx, as_json, "/v1/clock/advance", {"by": duration})


@clock.command(name="set", context_settings=CONTEXT)
@click.argument("time")
@JSON_OPTION
@click.pass_context
def clock_set(ctx, time, as_json):
    """Move time forward to TIME (ISO 8601, e.g. 2026-04-20T22:30:00Z)."""
    _clock_call(ctx, as_json, "/v1/clock/set", {"to": time})


@clock.command(name="next", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def clock_next(ctx, as_json):
    """Jump to the next deadline (a NotBefore or the end of an impact window) and apply it; prints what changed."""
    _clock_call(ctx, as_json, "/v1/clock/next", {})
