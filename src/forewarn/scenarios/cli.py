"""``forewarn scenario``: list, show, validate and run scenarios (registered on the main CLI)."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from forewarn.core.words import counted
from forewarn.scenarios.timings import DEFAULT_TIMING, TIMINGS

if TYPE_CHECKING:
    from forewarn.scenarios.runner import StopRequest

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110, "show_default": True}  # defaults in --help
DEFAULT_EC2_URL = "http://127.0.0.1:8172"
LARGE_TIMELINE_EVENTS = 1000  # a timeline with more events is written without indentation


def _fail(message: str) -> None:
    click.echo(f"forewarn: {message}", err=True)
    sys.exit(1)


@click.group(
    name="scenario",
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn scenario list
  forewarn scenario show two-vm-live-migration
  forewarn scenario run two-vm-live-migration                 # private server, manual clock, realistic timing
  forewarn scenario run canceled-maintenance --timing fast --speed 5   # real clock, 5x
  forewarn scenario run my-scenario.yaml --server http://127.0.0.1:8170 --out my.json
  forewarn scenario validate my-scenario.yaml
Format and the shipped scenarios: docs/scenarios.md.""",
)
def scenario() -> None:
    """Maintenance scenarios: steps at simulated times, what the VMs' documents must show (YAML files)."""


@scenario.command(name="list", context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_command(as_json: bool) -> None:
    """The shipped scenarios."""
    from forewarn.scenarios.spec import ScenarioError, load_library

    try:
        scenarios = load_library()
    except ScenarioError as error:
        _fail(str(error))
    if as_json:
        click.echo(json.dumps([s.summary() for s in scenarios], indent=2))
        return
    width = max(len(s.name) for s in scenarios)
    for s in scenarios:
        click.echo(f"{s.name:<{width}}  {s.title}")


@scenario.command(name="show", context_settings=CONTEXT)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the scenario as JSON (with its summary).")
def show_command(name: str, as_json: bool) -> None:
    """Print a scenario file as it is (NAME of a shipped scenario, or a path): a start for your own."""
    from forewarn.scenarios.spec import ScenarioError, load_scenario

    try:
        found = load_scenario(name)
    except ScenarioError as error:
        _fail(str(error))
    if as_json:
        click.echo(json.dumps({**found.summary(), "scenario": found.data}, indent=2))
        return
    click.echo(found.text.rstrip("\n"))


@scenario.command(name="validate", context_settings=CONTEXT)
@click.argument("files", nargs=-1, required=True)
def validate_command(files: tuple[str, ...]) -> None:
    """Check scenario files (both timings); problems are printed as FILE:LINE: WHERE: PROBLEM."""
    from forewarn.scenarios.spec import ScenarioError, load_scenario

    failed = False
    for name in files:
        try:
            found = load_scenario(name)
        except ScenarioError as error:
            failed = True
            click.echo(str(error), err=True)
            continue
        click.echo(
            f"{found.path}: ok ({found.name}: {counted(len(found.data['steps']), 'step')}, "
            f"{counted(len(found.data.get('expect') or []), 'check')})"
        )
    if failed:
        sys.exit(1)


@scenario.command(
    name="run",
    context_settings=CONTEXT,
    epilog="""\b
Without --server a private `forewarn serve` is started for the run (in-memory database, the scenario's fleet and
start time, free loopback ports, fixed --seed) and stopped afterwards. On a manual clock the runner walks the clock
through every deadline that concerns an observed VM or the run's own events; with --speed the clock is real and
the runner polls every 100 ms. On a shared --server, only what the run created is waited for after its last step.
Progress is shown on stderr. Ctrl-C (SIGINT) or SIGTERM stops the run and still writes the timeline, marked
partial. Exit status 1 when an expectation fails or the run cannot go on; 130 (SIGINT) or 143 (SIGTERM) when
interrupted.""",
)
@click.argument("name")
@click.option(
    "--timing",
    type=click.Choice(TIMINGS),
    default=DEFAULT_TIMING,
    show_default=True,
    help="realistic: the median timings of Microsoft's mock server; fast: seconds instead of minutes.",
)
@click.option(
    "--manual",
    "manual",
    is_flag=True,
    help="Manual clock: the runner moves it (default for a private server; with --server, the default is "
    "the server's own clock).",
)
@click.option("--speed", type=float, help="Real clock at this rate (private server: --clock real --speed X).")
@click.option(
    "--server",
    "server_url",
    metavar="URL",
    help="Run on this server (its control API) instead of a private one. FOREWARN_SERVER is not used.",
)
@click.option(
    "--ec2-url",
    default=DEFAULT_EC2_URL,
    show_default=True,
    metavar="URL",
    help="With --server: its EC2 Query API (for event windows).",
)
@click.option(
    "--out", "out", metavar="FILE", help="Timeline JSON file (default NAME-timeline.json here; - for stdout)."
)
@click.option("--seed", help="EventId seed of the private server (default: forewarn-scenario).")
@click.option(
    "--max-moves",
    type=click.IntRange(min=1),
    metavar="N",
    help="Manual clock: most clock moves (default 1000, plus 10 for each step of the scenario).",
)
@click.option(
    "--every-deadline",
    is_flag=True,
    help="Manual clock: stop at every deadline of the server, even those that concern nothing the run "
    "records (slower; the timeline is the same).",
)
@click.option(
    "--timeout",
    type=float,
    default=600.0,
    show_default=True,
    help="Real clock: wall seconds to wait, after the last step, for the events to end.",
)
@click.option("--quiet", "-q", is_flag=True, help="No live timeline and no progress; only the result.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the timeline JSON on stdout, with no live timeline and no progress (--out - -q).",
)
@click.pass_context
def run_command(
    ctx, name, timing, manual, speed, server_url, ec2_url, out, seed, max_moves, every_deadline, timeout, quiet, as_json
):
    """Run a scenario (NAME of a shipped scenario, or a path) and check its expectations."""
    from forewarn.scenarios.runner import RunOptions, StopRequest, run_scenario
    from forewarn.scenarios.server import DEFAULT_SEED
    from forewarn.scenarios.spec import ScenarioError, load_scenario

    if as_json:
        if out not in (None, "-"):
            raise click.UsageError("give --json or --out FILE, not both")
        out, quiet = "-", True

    if manual and speed is not None:
        raise click.UsageError("give --manual or --speed, not both")
    if speed is not None and speed <= 0:
        raise click.BadParameter("must be positive", param_hint="--speed")
    root = ctx.find_root()
    if server_url is None and root.get_parameter_source("server") is click.core.ParameterSource.COMMANDLINE:
        server_url = root.params["server"]
    try:
        resolved = load_scenario(name).resolve(timing)
    except ScenarioError as error:
        _fail(str(error))
    to_stdout = out == "-"
    out_path = None if to_stdout else Path(out or f"{resolved.name}-timeline.json")

    progress = None if quiet else ProgressLine(sys.stderr)

    def emit(line: str) -> None:  # a live line, with the progress line kept below it
        if quiet:
            return
        if progress is not None:
            progress.clear()
        click.echo(line, err=to_stdout)

    mode = "real" if speed is not None else "manual" if manual or not server_url else "auto"
    where = f"server {server_url}" if server_url else f"a private server (seed {seed or DEFAULT_SEED})"
    emit(f"scenario {resolved.name}: {resolved.title}")
    clock = "the server's clock" if mode == "auto" else f"{mode} clock" + (f" x{speed:g}" if speed else "")
    emit(f"{timing} timing, {clock}, on {where}")
    stop_request = StopRequest()
    options = RunOptions(
        mode=mode,
        speed=speed or 1.0,
        max_moves=max_moves,
        timeout=timeout,
        every_deadline=every_deadline,
        stop=stop_request,
    )

    timeline = _run_until_stopped(
        lambda: run_scenario(
            resolved,
            server=server_url,
            ec2_url=ec2_url if server_url else None,
            options=options,
            seed=seed,
            emit=emit,
            progress=progress,
            control_token=root.params.get("control_token") if server_url else None,
        ),
        stop_request,
        progress,
    )
    report = click.echo if not to_stdout else (lambda line: click.echo(line, err=True))
    _report_expectations(timeline, report)
    _write_timeline(timeline, out_path, report)
    if timeline["interrupted"]:
        sys.exit(128 + signal.Signals[timeline["interrupted"]].value)
    if not timeline["passed"]:
        sys.exit(1)


def _run_until_stopped(run: Callable[[], dict], stop_request: StopRequest, progress: ProgressLine | None) -> dict:
    """The run's timeline; SIGINT and SIGTERM stop it through ``stop_request`` (the runner still gives the timeline,
    marked partial), and are ignored once it is over: a second one would lose the timeline while it is written."""
    from forewarn.scenarios.runner import RunInterrupted
    from forewarn.scenarios.server import ServerError

    def stop(signal_number, frame):
        stop_request.request(signal.Signals(signal_number).name)

    handled = (signal.SIGINT, signal.SIGTERM)
    for number in handled:
        signal.signal(number, stop)
    try:
        timeline = run()
    except ServerError as error:
        _fail(str(error))
    except RunInterrupted as interrupted:  # outside the run itself: while the private server started or stopped
        click.echo("forewarn: interrupted while the private server started or stopped; no timeline", err=True)
        sys.exit(128 + signal.Signals[interrupted.signal_name].value)
    finally:
        if progress is not None:
            progress.clear()
    for number in handled:
        signal.signal(number, signal.SIG_IGN)
    return timeline


def _report_expectations(timeline: dict, report: Callable[[str], None]) -> None:
    """Each expectation's result, and the run's verdict."""
    results = timeline["expectations"]
    if results:
        report("expectations:")
        for result in results:
            report(
                f"  {'ok  ' if result['passed'] else 'FAIL'}  {result['what']}"
                + ("" if result["passed"] else f"\n        {result['detail']}")
            )
    failed = [r for r in results if not r["passed"]]
    if timeline["partial"]:
        report(f"interrupted: {timeline['aborted']}")
    elif timeline["aborted"]:
        report(f"aborted: {timeline['aborted']}")
    elif failed:
        report(f"FAILED: {len(failed)} of {counted(len(results), 'check')}")
    else:
        report(f"passed: {counted(len(results), 'check')}")


def _write_timeline(timeline: dict, out_path: Path | None, report: Callable[[str], None]) -> None:
    """The timeline JSON, on stdout (``out_path`` None) or in its file."""
    # Indented for reading; a large timeline compact, as the indenting encoder is ten times slower (16 s for the
    # 70 MB of a 5,000-VM week).
    text = json.dumps(timeline, indent=2 if len(timeline["events"]) <= LARGE_TIMELINE_EVENTS else None)
    if out_path is None:
        click.echo(text)
    else:
        partial_path = out_path.with_name(out_path.name + ".partial")  # never half a file under the real name
        partial_path.write_text(text + "\n")
        partial_path.replace(out_path)
        report(f"timeline: {out_path}" + (" (partial)" if timeline["partial"] else ""))


class ProgressLine:
    """Where a run is, on stderr: one line rewritten in place on a terminal (at most 5 times a second); elsewhere
    (a log, a pipe) a line at each tenth of the steps and at the end."""

    def __init__(self, stream, interval: float = 0.2):
        self.stream = stream
        self.tty = stream.isatty()
        self.interval = interval
        self.started = time.monotonic()
        self.shown_at = 0.0
        self.shown = False
        self.tenth = -1

    def __call__(self, state) -> None:
        elapsed = time.monotonic() - self.started
        text = (
            f"progress: step {state.steps_done}/{state.steps}, {_offset(state.offset)} simulated, "
            f"{counted(state.moves, 'clock move')}, {elapsed:.1f} s"
            + {"settling": " (settling)", "done": " (done)"}.get(state.phase, "")
        )
        if self.tty:
            if state.phase != "done" and time.monotonic() - self.shown_at < self.interval:
                return
            self.stream.write("\r\x1b[K" + text + ("\n" if state.phase == "done" else ""))
            self.stream.flush()
            self.shown, self.shown_at = state.phase != "done", time.monotonic()
            return
        tenth = state.steps_done * 10 // max(1, state.steps)
        if tenth > self.tenth or state.phase == "done":
            self.tenth = tenth
            self.stream.write(text + "\n")
            self.stream.flush()

    def clear(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def _offset(seconds: float) -> str:
    from forewarn.scenarios.spec import format_offset

    return format_offset(seconds)


@scenario.command(
    name="generate",
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn scenario generate --fleet demo --seed 7 --out random.yaml && forewarn scenario run random.yaml
  forewarn fleet generate --vms 5000 --out big.yaml
  forewarn scenario generate --fleet big.yaml --duration 7d --per-hour 20 --seed 1 --out week.yaml
The mix of operations and their timings: docs/scenarios.md ("Random maintenance").""",
)
@click.option("--fleet", "fleet_source", required=True, metavar="FILE|demo", help="The fleet to maintain.")
@click.option("--seed", default="forewarn", show_default=True, help="The same seed writes the same scenario.")
@click.option("--duration", default="24h", show_default=True, help="Simulated time the operations spread over.")
@click.option("--per-hour", type=float, default=2.0, show_default=True, help="Operations per hour, on average.")
@click.option("--start", help="ISO 8601 start of the simulated clock (default: the server's time).")
@click.option(
    "--observe",
    type=int,
    default=20,
    show_default=True,
    help="How many of the VMs operated on to record in the timeline.",
)
@click.option("--out", "out", default="-", show_default=True, metavar="FILE", help="Where to write ('-': stdout).")
def generate_command(fleet_source, seed, duration, per_hour, start, observe, out):
    """Write a scenario of random maintenance (a realistic mix of types and timings) over a fleet, reproducible
    from its seed."""
    import yaml

    from forewarn.core.durations import parse_duration
    from forewarn.core.errors import CoreError
    from forewarn.core.times import parse_time
    from forewarn.fleet.file import FleetFileError, load_fleet
    from forewarn.scenarios.generate import Generation, fleet_reference, generate_scenario

    try:
        fleet = load_fleet(fleet_source)
        generation = Generation(
            seed=seed,
            duration=parse_duration(duration),
            per_hour=per_hour,
            start=parse_time(start) if start else None,
            observe=observe,
        )
        scenario = generate_scenario(fleet, fleet_reference(fleet_source, out), generation)
    except (FleetFileError, CoreError, ValueError) as error:
        _fail(str(error))
    text = yaml.safe_dump(scenario, sort_keys=False, width=120, default_flow_style=None)
    if out == "-":
        click.echo(text, nl=False)
        return
    Path(out).write_text(text)
    click.echo(f"wrote {out}: {scenario['description']}", err=True)
