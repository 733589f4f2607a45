"""``forewarn wait``: wait until a server started in the background answers, so that a script (or a pasted doc page)
can start ``forewarn serve ... &`` and go on with its next command only once the server can take it.

A server takes a second or so to open its ports (imports, the database, the fleet); a command sent before that gets
"cannot reach forewarn". The usual shell loop (``until curl ...; do sleep 0.1; done``) cannot tell another port of
forewarn from the control API, nor ever give up; this command does both.
"""

from __future__ import annotations

import time

import click

from forewarn.cli.common import CONTEXT, control_client, fail

POLL_EVERY = 0.1  # seconds between two tries
TRY_TIMEOUT = 2.0  # seconds one try may take (connect, then read)


@click.command(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn serve --fleet demo --db :memory: --clock manual --port 8290 --imds-port 8291 ... &
  export FOREWARN_SERVER=http://127.0.0.1:8290
  forewarn wait                     # until that server's control API answers (30 s at most)
  forewarn replay vm.json --port 8315 &
  forewarn wait http://127.0.0.1:8315/metadata/scheduledevents   # any HTTP answer will do""",
)
@click.argument("url", required=False)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 3600),
    default=30.0,
    help="Seconds to wait at most; then exit status 1.",
)
@click.pass_context
def wait(ctx: click.Context, url: str | None, timeout: float) -> None:
    """Wait until the server answers: its control API (--server or FOREWARN_SERVER) answers GET /healthz, or, given
    URL, anything answers an HTTP GET of URL (a `forewarn replay`, a webhook of your own). Exit status 0 once it
    does; 1 after --timeout seconds, or at once when --server names another port of a forewarn server."""
    from forewarn.cli.ports import is_control_health, not_the_control_api
    from forewarn.net.control_client import ControlClient, Unreachable

    if url is not None and "://" not in url:
        url = f"http://{url}"
    base = url or control_client(ctx).base_url
    deadline = time.monotonic() + timeout
    last = "nothing answered"
    with ControlClient(base, timeout=TRY_TIMEOUT) as client:
        while True:
            try:
                answer = client.send("GET", "" if url else "/healthz")
            except Unreachable as error:
                last = f"nothing answered ({error.kind})"
            else:
                if url is not None:
                    click.echo(f"{url} answers (HTTP {answer.status})")
                    return
                if is_control_health(answer):
                    click.echo(f"forewarn answers at {base} (version {answer.json()['version']})")
                    return
                port, hint = not_the_control_api(base)
                if port is not None and hint is not None:  # another port of a server: waiting changes nothing
                    fail(hint)
                last = f"GET /healthz: HTTP {answer.status}"
            if time.monotonic() + POLL_EVERY > deadline:
                break
            time.sleep(POLL_EVERY)
    pointer = (
        "" if url else " Is `forewarn serve` running, and does --server (or FOREWARN_SERVER) name its control API?"
    )
    fail(f"{base} did not answer within {timeout:g} s: {last}.{pointer}")
