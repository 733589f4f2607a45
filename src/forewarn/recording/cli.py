"""``forewarn record`` and ``forewarn replay`` (registered on the main CLI)."""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click

from forewarn.core.durations import parse_duration
from forewarn.core.errors import Invalid
from forewarn.core.words import counted
from forewarn.net.untrusted_json import MAX_DOCUMENT_BYTES, JsonInputError, parse_json
from forewarn.recording.model import (
    AZURE,
    GCE,
    Entry,
    Recording,
    RecordingError,
    load_recording,
    save_recording,
)

REPLAY_PORT = 8179
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110, "show_default": True}  # defaults in --help


def _fail(message: str) -> None:
    click.echo(f"forewarn: {message}", err=True)
    sys.exit(1)


def _optional_seconds(text: str | None, what: str) -> float | None:
    return None if text is None else _seconds(text, what)


def _seconds(text: str, what: str) -> float:
    try:
        seconds = parse_duration(text).total_seconds()
    except Invalid as error:
        _fail(f"{what}: {error}")
    if seconds <= 0:
        _fail(f"{what} must be positive")
    return seconds


def _describe(entry: Entry, source: str = AZURE) -> str:
    if entry.status == 0:
        return "no answer (connection failed)"
    if source == GCE:
        return f"status {entry.status}: {entry.body[:120]}" + (f" (ETag {entry.etag})" if entry.etag else "")
    events = entry.events()
    if events is None:
        return f"status {entry.status}: {entry.body[:120]}"
    try:
        incarnation = parse_json(entry.body, max_bytes=MAX_DOCUMENT_BYTES).get("DocumentIncarnation")
    except (JsonInputError, AttributeError):
        incarnation = None
    shown = ", ".join(
        f"{e.get('EventType')} {e.get('EventStatus')} {e.get('EventId')}" for e in events if isinstance(e, dict)
    )
    return f"incarnation {incarnation}: {counted(len(events), 'event')}" + (f": {shown}" if shown else "")


@click.command(
    name="record",
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn record --url http://169.254.169.254 --out vm.json              # on an Azure VM, until Ctrl-C
  forewarn record --url http://127.0.0.10:8169 --out freeze.json --until-empty
  forewarn record --url http://127.0.0.11:8169 --duration 30m --interval 2s
  forewarn record --gce --url http://metadata.google.internal --out gce.json   # on a Compute Engine VM
  forewarn record --gce --url http://127.0.0.40:8169 --until-empty --timeout 60s
Format: docs/recordings.md.""",
)
@click.option(
    "--url",
    required=True,
    help="The scheduled-events endpoint, or its base (http://169.254.169.254); the path is added. With --gce: "
    "the metadata server's key, or its base (the maintenance-event path is added).",
)
@click.option(
    "--gce",
    is_flag=True,
    help="Record a Compute Engine metadata server's maintenance-event with hanging GETs (wait_for_change); implied "
    "by a URL under /computeMetadata/.",
)
@click.option(
    "--out",
    default="recording.json",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The recording file (rewritten after each new document).",
)
@click.option("--interval", default="1s", show_default=True, help="Time between polls.")
@click.option("--duration", default=None, help="Stop after this long (30s, 15m, 1h).")
@click.option(
    "--until-empty",
    is_flag=True,
    help="Stop once a document without events follows one with events (GCE: NONE after another value).",
)
@click.option("--api-version", default="2020-07-01", show_default=True)
@click.option(
    "--timeout",
    default="5s",
    show_default=True,
    help="How long one poll waits for its answer (GCE: the hanging GET's timeout_sec).",
)
def record_command(url, gce, out, interval, duration, until_empty, api_version, timeout):
    """Poll a scheduled-events endpoint (a real VM's IMDS, or forewarn) and record every new document, with its
    time; Ctrl-C stops and keeps what was recorded. With --gce, a Compute Engine metadata server's maintenance-event,
    each value with its ETag, read with wait_for_change hanging GETs."""
    from forewarn.recording.recorder import (
        gce_fetch,
        http_fetch,
        maintenance_event_url,
        record,
        scheduled_events_url,
    )

    interval_seconds = _seconds(interval, "--interval")
    duration_seconds = _optional_seconds(duration, "--duration")
    timeout_seconds = _seconds(timeout, "--timeout")
    source = GCE if gce or "/computeMetadata/" in url else AZURE
    if source == GCE:
        target = maintenance_event_url(url)
        # A hanging GET does not outlast the recording.
        fetch, close = gce_fetch(target, min(timeout_seconds, duration_seconds or timeout_seconds))
        api_version = "v1"
    else:
        target = scheduled_events_url(url, api_version)
        fetch, close = http_fetch(target, timeout_seconds)
    recording = Recording(target, api_version, "", interval_seconds, source=source)
    out_path = Path(out)

    def on_entry(current: Recording, entry: Entry) -> None:
        save_recording(current, out_path)
        click.echo(f"{entry.offset_seconds:9.3f}s  {entry.at}  {_describe(entry, source)}")

    click.echo(f"recording {target} every {interval_seconds:g}s to {out_path} (Ctrl-C stops)")
    try:
        record(
            fetch,
            url=target,
            api_version=api_version,
            interval=interval_seconds,
            duration=duration_seconds,
            until_empty=until_empty,
            on_entry=on_entry,
            recording=recording,
            source=source,
        )
    except KeyboardInterrupt:
        pass
    finally:
        close()
    if recording.entries:
        save_recording(recording, out_path)
    click.echo(f"{counted(len(recording.entries), 'document')} recorded in {out_path}")


@click.command(
    name="replay",
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn replay vm.json                          # http://127.0.0.1:8179/metadata/scheduledevents
  forewarn replay vm.json --speed 60 --loop --approvals approvals.jsonl
  forewarn replay gce.json     # http://127.0.0.1:8179/computeMetadata/v1/instance/maintenance-event
Details: docs/recordings.md.""",
)
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
# Not serve's metadata port (8169), nor its other ports (8170-8172): a replay runs beside a forewarn serve.
@click.option(
    "--port", default=REPLAY_PORT, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free)."
)
@click.option("--speed", default=1.0, show_default=True, type=float, help="Recorded seconds per wall second.")
@click.option("--loop", is_flag=True, help="Start over after the last document (held for one interval).")
@click.option(
    "--approvals",
    "approvals_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="Append each approval (POST StartRequests) to this file as a JSON line.",
)
def replay_command(file, host, port, speed, loop, approvals_file):
    """Serve a recording as an IMDS scheduled-events endpoint, with its recorded timing; approvals are logged. A
    Compute Engine recording is served as its metadata server's key, with its ETags and wait_for_change."""
    import asyncio  # the server's modules, only when it serves (every forewarn command imports this module)

    from forewarn.recording.replay import Replay, replay_handler, serve_replay
    from forewarn.server.http1 import listening_socket

    if speed <= 0:
        _fail("--speed must be positive")
    try:
        recording = load_recording(file)
    except RecordingError as error:
        _fail(str(error))
    log_file = open(approvals_file, "a", encoding="utf-8") if approvals_file else None

    def on_approval(approval: dict) -> None:
        click.echo(
            f"approval at {approval['offset_seconds']:.3f}s from {approval['caller']}: "
            f"{', '.join(approval['event_ids'])}"
            + (
                f" (not in the document: {', '.join(approval['not_in_document'])})"
                if approval["not_in_document"]
                else ""
            )
        )
        if log_file is not None:
            log_file.write(json.dumps(approval) + "\n")
            log_file.flush()

    try:
        sock = listening_socket(host, port)
    except OSError as error:
        hint = "; choose another with --port" if error.errno == errno.EADDRINUSE else ""
        _fail(f"cannot listen on {host}:{port}: {error.strerror}{hint}")
    shown = f"[{host}]" if ":" in host else host
    end = recording.entries[-1].offset_seconds / speed
    handler = replay_handler(Replay(recording, loop=loop), speed, on_approval)
    click.echo(
        f"replaying {file} ({counted(len(recording.entries), 'document')} over {end:g}s{', looping' if loop else ''}) at "
        f"http://{shown}:{sock.getsockname()[1]}{handler.path}",
        nl=True,
    )
    run: Callable[[Coroutine[Any, Any, None]], None]
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    try:
        run(serve_replay(handler, sock))
    except KeyboardInterrupt:
        pass
    finally:
        if log_file is not None:
            log_file.close()


COMMANDS = (record_command, replay_command)
