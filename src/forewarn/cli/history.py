"""``forewarn journal`` (what the server committed, and following it as it grows) and ``forewarn reset`` (back to
the server's start)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from forewarn.cli.common import CONTEXT, JSON_OPTION, CliClient, control_client, emit, run, short_time

FOLLOW_BATCH = 100  # entries asked for at each look; more only when more than that arrived since the last
MOST_ENTRIES = 10_000  # the most GET /v1/journal gives at once


@click.command(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn journal                  # the latest 20 entries, oldest first
  forewarn journal --limit 500 --json
  forewarn journal --follow         # then every new entry as it is committed, until Ctrl-C""",
)
@click.option("--limit", type=click.IntRange(1, MOST_ENTRIES), default=20, help="How many of the latest entries.")
@click.option("--follow", "-f", is_flag=True, help="Then print new entries as they are committed, until Ctrl-C.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60),
    default=1.0,
    help="With --follow: seconds between two looks at the journal.",
)
@JSON_OPTION
@click.pass_context
def journal(ctx, limit, follow, interval, as_json):
    """Print what the server committed (events scheduled, started, approved, VMs impacted, waves, ...), one line
    per entry: sequence number, simulated time, what, the event and what else the entry names, and why.
    --json: a JSON array (with --follow: one JSON object per line)."""
    client = control_client(ctx)
    entries = run(lambda: client.get("/v1/journal", params={"limit": limit}))
    if not follow:
        emit(entries, as_json, lambda found: _print_entries(found) if found else click.echo("no journal entries"))
        return
    try:
        _print_entries(entries, as_json)
        last = entries[-1]["seq"] if entries else 0
        while True:
            time.sleep(interval)
            last = _print_since(client, last, as_json)
    except KeyboardInterrupt:  # Ctrl-C is how a follow ends: no traceback, status 0
        sys.exit(0)


def _print_since(client: CliClient, last: int, as_json: bool) -> int:
    """Print the entries committed after ``last``; the sequence number to look past next time."""
    batch = run(lambda: client.get("/v1/journal", params={"limit": FOLLOW_BATCH}))
    if not batch:
        return last
    if batch[-1]["seq"] < last:  # another server or database answers now: its journal is followed from its start
        click.echo("-- the journal starts again (the server was restarted on another database)", err=True)
        last = 0
    newest = batch[-1]["seq"]
    if len(batch) == FOLLOW_BATCH and batch[0]["seq"] > last + 1:  # more may have arrived than one batch holds
        wanted = newest - last
        batch = run(lambda: client.get("/v1/journal", params={"limit": min(wanted, MOST_ENTRIES)}))
        if wanted > MOST_ENTRIES:
            click.echo(
                f"-- about {wanted - MOST_ENTRIES} entries not shown: more than {MOST_ENTRIES} since the last look",
                err=True,
            )
    _print_entries([entry for entry in batch if entry["seq"] > last], as_json)
    return newest


def _print_entries(entries: list[dict[str, Any]], as_json: bool = False) -> None:
    for entry in entries:
        click.echo(json.dumps(entry) if as_json else _entry_line(entry))


def _entry_line(entry: dict[str, Any]) -> str:
    """``seq  time  what  [event id]  [name=value ...]  [reason]``."""
    named = {key: value for key, value in entry.items() if key not in ("seq", "at", "what", "event_id", "reason")}
    parts = [f"{entry['seq']:>6}", short_time(entry["at"]), entry["what"]]
    if entry.get("event_id"):
        parts.append(entry["event_id"])
    parts += [f"{key}={_flat(value)}" for key, value in named.items()]
    if entry.get("reason"):
        parts.append(f"({entry['reason']})")
    return "  ".join(parts)


def _flat(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ",".join(value)
    return value if isinstance(value, str) else json.dumps(value)


@click.command(context_settings=CONTEXT)
@click.option("--yes", "-y", is_flag=True, help="Do not ask first (a terminal is asked; a script is not).")
@JSON_OPTION
@click.pass_context
def reset(ctx, yes, as_json):
    """Put the server back to its start: the same fleet, the clock at its start time; no events, waves, deliveries
    or journal, every DocumentIncarnation 1 (POST /v1/reset)."""
    if not yes and sys.stdin.isatty():
        click.confirm(f"Reset {control_client(ctx).base_url}: every event, wave and journal entry goes?", abort=True)
    clock = run(lambda: control_client(ctx).post("/v1/reset"))

    def render(data: dict[str, Any]) -> None:
        click.echo(f"reset; simulated time {data['now']} ({data['mode']} clock)")

    emit(clock, as_json, render)
