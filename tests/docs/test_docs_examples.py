"""Every example in README.md and docs/ runs, as written, against a real forewarn.

The rules a doc follows (docs/README.md says the same for writers):

- A fenced block's language says what it is. ``sh`` blocks are commands and run; ``python`` blocks run;
  ``yaml`` blocks are files and are parsed by the parser of their kind (fleet, scenario, access, Event Grid);
  ``json``, ``xml`` and ``text`` blocks show data or output and are not run. A block with no language fails this
  test: its writer must say which of these it is.
- The ``sh`` and ``python`` blocks of one page run in order in one shell session, in an empty directory, with the
  virtual environment's ``bin`` first on ``PATH`` (so ``forewarn``, ``aws``, ``python3`` and ``.venv/bin/forewarn``
  work). A page that starts no server of its own talks to the one ``make run`` starts (the demo fleet, SQLite, real
  clock), shared with the other such pages, which run before it in page order (README.md first).
- A comment line ``# → TEXT`` right after a command is that command's expected output: each such line must match a
  line the command printed (stdout or stderr), in order. ``...`` matches anything, the spaces around it included;
  runs of spaces compare equal.
- Every command must succeed (``set -e -o pipefail``); a command expected to fail says so itself
  (``forewarn cancel "$ID" || echo "exit status $?"``).
- A command that runs until stopped (``forewarn serve``, ``forewarn replay``) is started in the background (``&``);
  the harness waits until it answers. A ``forewarn replay`` in the background gives its ``--port``.
- An HTML comment right above a block can say ``<!-- file: NAME -->`` (the block is written to NAME in the page's
  directory before the page's commands run, and is not run itself) or ``<!-- not run: REASON -->`` (kept for the
  few examples that need what a test cannot have, e.g. a real Azure VM); the reasons are listed in the test's output.
- A page that says ``<!-- page needs: root ... -->`` (the sandbox's, which makes network namespaces) runs only as
  root, as in CI; otherwise it is skipped with that reason.

What the harness changes, and nothing else: the well-known ports (8169 metadata, 8170 control, 8171 ARM, 8172 EC2, 8173 GCE)
and the ports 8180-8189 (a page's own listeners: a replay, a webhook) become free ports of this run, so that the
examples can run beside another forewarn; the CLI's defaults follow (``FOREWARN_SERVER``, ``FOREWARN_ARM``), and a
``forewarn serve ... &`` gets the ports it does not name. This checkout's entry points (pyproject.toml's: the pytest
plugin) are on the path, as its code is, and its ``agent/`` (forewarn-agent's sources) is in the page's directory, as
in a checkout. Pages run side by side, a few at a time.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from forewarn.scenarios.server import START_TRIES, free_ports

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WELL_KNOWN_PORTS = (8169, 8170, 8171, 8172, 8173)
RUN = {"sh", "python"}
FILES = {"yaml"}
SHOWN = {"json", "xml", "text"}

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
DIRECTIVE = re.compile(r"<!--\s*(?P<kind>file|not run):\s*(?P<value>.*?)\s*-->\s*$")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    body: str
    file: str | None = None
    not_run: str | None = None

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        indent = match.group("indent")
        body = (
            "\n".join(row[len(indent) :] if row.startswith(indent) else row for row in match.group("body").splitlines())
            + "\n"
        )
        block = Block(page, line, match.group("lang"), body)
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        directive = DIRECTIVE.search(before)
        if directive:
            if directive.group("kind") == "file":
                block.file = directive.group("value")
            else:
                block.not_run = directive.group("value")
        found.append(block)
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]


# ------------------------------------------------------------------------------------------- every block is typed
@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda block: block.where)
def test_block_says_what_it_is(block: Block):
    assert block.lang in RUN | FILES | SHOWN, (
        f"{block.where}: a fenced block needs a language: sh or python (run), yaml (a file, parsed), "
        f"json, xml or text (shown, not run); this one has {block.lang or 'none'!r}"
    )


# ----------------------------------------------------------------------------------------------- YAML files parse
def yaml_kind(data) -> str:
    if not isinstance(data, dict):
        return "unknown"
    if "cases" in data:
        return "conformance"
    if "steps" in data:
        return "scenario"
    if "principals" in data:
        return "access"
    if {"system_topics", "settings"} & data.keys() and not {
        "vms",
        "hosts",
        "scale_sets",
        "ec2_instances",
    } & data.keys():
        return "event grid"  # an --event-grid file; a fleet file's event_grid: section is a fleet's
    return "fleet"


def parse_yaml_file(block: Block, directory: Path) -> None:
    from forewarn.azure.arm.access import load_access
    from forewarn.azure.eventgrid.config import load_event_grid_file
    from forewarn.conformance import battery
    from forewarn.fleet.file import load_fleet
    from forewarn.scenarios.spec import load_scenario

    path = directory / (block.file or "example.yaml")
    path.write_text(block.body)
    if yaml_kind(yaml.safe_load(block.body)) == "conformance":  # a case file: read as azure's, its checks and all
        battery(["azure"], files=[f"azure:{path}"])
        return
    loader = {"scenario": load_scenario, "access": load_access, "event grid": load_event_grid_file}
    loader.get(yaml_kind(yaml.safe_load(block.body)), load_fleet)(path)


@pytest.mark.parametrize(
    "block", [block for block in ALL_BLOCKS if block.lang in FILES and not block.not_run], ids=lambda block: block.where
)
def test_yaml_example_parses(block: Block, tmp_path: Path):
    for other in ALL_BLOCKS:  # a scenario may name a fleet file another block of the page writes
        if other.page == block.page and other.file and other is not block:
            (tmp_path / other.file).write_text(other.body)
    parse_yaml_file(block, tmp_path)


# ------------------------------------------------------------------------------------------ commands run, in order
FOREWARN_PORTS = {"--imds-port": 8169, "--port": 8170, "--arm-port": 8171, "--ec2-port": 8172, "--gce-port": 8173}
EXAMPLE_PORTS = tuple(range(8180, 8190))  # a page's own listeners: a replay, a webhook receiver
PORT = re.compile(r"(?<![\w.])(8169|8170|8171|8172|8173|818\d)(?!\w)")
PAGE_TIMEOUT = 90  # seconds; a page takes a few, so this only ends a hang

EXPECTED = re.compile(r"^#\s*→\s?(?P<text>.*)$")
COMMAND_START = r"^\s*(?:\S*/)?forewarn\s+"
SERVES = re.compile(COMMAND_START + r"(?:serve|replay)\b")
STARTS_SERVER = re.compile(COMMAND_START + r"serve\b.*&\s*(?:#.*)?$")
IN_BACKGROUND = re.compile(r"&\s*(?:#.*)?$")
OPTION = re.compile(r"(--[\w-]+)(?:=|\s+)(\S+)")

EXPECT_SCRIPT = """\
import re, sys
def wildcard(expected):  # "a ... b" also matches "a b", and "... b" a line that starts with b: spaces go along
    parts = re.split(r" ?(?:\\.\\.\\.|…) ?", " ".join(expected.split()))
    return re.compile(".*".join(re.escape(part) for part in parts))
printed = [" ".join(line.split()) for line in open(sys.argv[1], errors="replace").read().splitlines()]
position = 0
for text in sys.argv[2:]:
    pattern = wildcard(text)
    for index in range(position, len(printed)):
        if pattern.fullmatch(printed[index]):
            position = index + 1
            break
    else:
        sys.exit(f"expected output not printed: {text}")
"""


def page_ports() -> dict[int, int]:
    wanted = [*FOREWARN_PORTS.values(), *EXAMPLE_PORTS]
    return dict(zip(wanted, free_ports(len(wanted))))


def substitute_ports(text: str, ports: dict[int, int]) -> str:
    return PORT.sub(lambda match: str(ports[int(match.group(1))]), text)


def logical_lines(body: str) -> list[str]:
    """Shell lines joined across backslash continuations and open quotes, so that a command is one item."""
    lines, pending = [], ""
    for row in body.splitlines():
        pending = f"{pending}\n{row}" if pending else row
        if pending.endswith("\\"):
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        lines.append(pending)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


class PageError(Exception):
    """A page breaks a rule the harness can see before running it."""


def server_lines(block: Block, line: str, ports: dict[int, int]) -> list[str]:
    """A long-running forewarn command: in the background, on this run's ports, waited for."""
    if not IN_BACKGROUND.search(line):
        raise PageError(f"{block.where}: `{line.strip()}` runs until stopped: start it in the background (`&`)")
    command = IN_BACKGROUND.sub("", line).rstrip()
    given = dict(OPTION.findall(command))
    if STARTS_SERVER.match(line):
        missing = " ".join(f"{option} {ports[port]}" for option, port in FOREWARN_PORTS.items() if option not in given)
        control = given.get("--port", str(ports[8170]))
        return [f'{command} {missing} >>"$SERVER_LOG" 2>&1 &', f"__pids+=($!); __ready_http {control}"]
    if "--port" not in given:
        raise PageError(f"{block.where}: give `{command.strip()}` its --port (8180-8189 are a page's own ports)")
    return [f'{command} >>"$SERVER_LOG" 2>&1 &', f"__pids+=($!); __ready_tcp {given['--port']}"]


def script_for(blocks: list[Block], ports: dict[int, int]) -> str:
    """One bash script for a page: its sh blocks, its python blocks as heredocs, checks for expected output."""
    out = [
        "set -e -o pipefail",
        "__pids=()",
        "trap 'echo \"::failed: $BASH_COMMAND\" >&2' ERR",
        "trap 'for p in \"${__pids[@]}\" $(jobs -p); do kill $p 2>/dev/null || true; done; wait 2>/dev/null' EXIT",
        '__ready_http() { for _ in $(seq 1 400); do curl -sf -o /dev/null "http://127.0.0.1:$1/healthz" && return 0;'
        ' sleep 0.05; done; echo "the server on port $1 did not answer" >&2; return 1; }',
        "__ready_tcp() { for _ in $(seq 1 400); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0;"
        ' sleep 0.05; done; echo "nothing listens on port $1" >&2; return 1; }',
        '__expect() { "$PYTHON" "$__EXPECT" "$@"; }',
    ]
    for block in blocks:
        body = substitute_ports(block.body, ports)
        out.append(f"echo '::block {block.where}' >&2")
        if block.lang == "python":
            out.append(f"\"$PYTHON\" - <<'__FOREWARN_PYTHON__'\n{body}__FOREWARN_PYTHON__")
            continue
        lines = logical_lines(body)
        index = 0
        while index < len(lines):
            line = lines[index]
            expected = []
            while index + 1 < len(lines) and EXPECTED.match(lines[index + 1].strip()):
                expected.append(EXPECTED.match(lines[index + 1].strip()).group("text"))
                index += 1
            index += 1
            if not line.strip() or line.strip().startswith("#"):
                continue
            if SERVES.match(line):
                out.extend(server_lines(block, line, ports))
            elif expected:
                quoted = " ".join(shlex.quote(text) for text in expected)
                out.append(f'{{ {line}\n}} > "$__OUT" 2>&1; cat "$__OUT"; __expect "$__OUT" {quoted}')
            else:
                out.append(line)
    return "\n".join(out) + "\n"


def runnable(page: Path) -> list[Block]:
    """The blocks that run: sh and python, unless marked not run or written to a file (a script the page starts)."""
    return [block for block in blocks_of(page) if block.lang in RUN and not block.not_run and not block.file]


def starts_own_server(blocks: list[Block]) -> bool:
    return any(
        STARTS_SERVER.match(line) for block in blocks if block.lang == "sh" for line in logical_lines(block.body)
    )


PAGES_WITH_COMMANDS = [page for page in PAGES if runnable(page)]
# A page whose examples change the host's network set-up (the sandbox's namespaces) says so; it runs as root only
# (CI runs as root) and is skipped, with this reason, otherwise.
NEEDS_ROOT = "<!-- page needs: root"


def root_page_skipped(page: Path) -> bool:
    return NEEDS_ROOT in page.read_text() and os.geteuid() != 0


class MakeRunServer:
    """The server `make run` starts (demo fleet, SQLite file, real clock), shared by the pages that start none."""

    def __init__(self, directory: Path):
        (directory / "var").mkdir()
        self.ports = page_ports()
        self.log = directory / "server.log"
        command = [
            str(Path(sys.executable).parent / "forewarn"),
            "serve",
            "--fleet",
            "demo",
            "--db",
            "var/demo.db",
            *[part for option, port in FOREWARN_PORTS.items() for part in (option, str(self.ports[port]))],
        ]
        with self.log.open("w") as output:
            self.process = subprocess.Popen(
                command,
                cwd=directory,
                env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[8170]}/healthz", timeout=1):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the make-run server did not start:\n{self.log.read_text()[-2000:]}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def checkout_entry_points(site: Path) -> Path:
    """A directory that holds this checkout's entry points (pyproject.toml's) as an installed package's metadata:
    the pages run this checkout's code (PYTHONPATH), so `pytest` must find this checkout's plugin, not the one of
    whichever checkout the virtual environment was installed from (an installed copy that declares it too is the
    same plugin by name, and pytest loads it once)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("entry-points", {})
    dist_info = site / "forewarn_checkout-0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: forewarn-checkout\nVersion: 0\n")
    (dist_info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items())
            for group, entries in declared.items()
        )
    )
    return site


@dataclass
class PageRun:
    returncode: int
    stdout: str
    stderr: str
    server_log: str


def run_page(page: Path, directory: Path, ports: dict[int, int], shared_log: Path | None) -> PageRun:
    """The page's commands, as one bash script in an empty directory (PageError: a rule broken before running)."""
    blocks = runnable(page)
    script = script_for(blocks, ports)
    for block in blocks_of(page):
        if block.file:
            (directory / block.file).write_text(block.body)
    bin_dir = Path(sys.executable).parent
    (directory / ".venv").symlink_to(bin_dir.parent)
    (directory / "agent").symlink_to(ROOT / "agent")  # forewarn-agent's sources: a page builds it as a user would
    entry_points = checkout_entry_points(directory / ".entry-points")
    (directory / ".expect.py").write_text(EXPECT_SCRIPT)
    (directory / ".page.sh").write_text(script)
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": str(directory),
        "LANG": "C.UTF-8",
        # the CLI's own defaults are the well-known ports: they follow the substitution
        "FOREWARN_SERVER": f"http://127.0.0.1:{ports[8170]}",
        "FOREWARN_ARM": f"http://127.0.0.1:{ports[8171]}",
        # without credentials the aws CLI would first ask 169.254.169.254 for some, for seconds
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHON": sys.executable,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{entry_points}",
        "SERVER_LOG": str(directory / ".server.log"),
        "__OUT": str(directory / ".output"),
        "__EXPECT": str(directory / ".expect.py"),
    }
    with subprocess.Popen(
        ["bash", str(directory / ".page.sh")],
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as run:
        try:
            stdout, stderr = run.communicate(timeout=PAGE_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            stdout, stderr = run.communicate()
            stderr += f"\n::timeout: the page did not finish within {PAGE_TIMEOUT} s"
        finally:  # the page's background servers too, whatever happened
            try:
                os.killpg(run.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    log_path = shared_log or directory / ".server.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    return PageRun(run.returncode, stdout, stderr, log)


LANES = 3  # pages run side by side: most of a page's time is one CLI process or a server waiting for the next


@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory):
    """Every selected page's run, started at once: the pages that share the make-run server one after another, in
    page order (README first, on a fresh server), each page with a server of its own beside them."""
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_page_commands_run"
        and not root_page_skipped(item.callspec.params["page"])
    ]
    futures = {page: Future() for page in selected}
    shared = [page for page in selected if not starts_own_server(runnable(page))]
    servers: list[MakeRunServer] = []

    def run_into(page: Path, ports: dict[int, int], shared_log: Path | None) -> None:
        try:
            run = run_page(page, tmp_path_factory.mktemp(page.stem), ports, shared_log)
            for _ in range(START_TRIES - 1):
                # A page's own server whose port another worker bound first: the page again, on new ports.
                if shared_log is not None or run.returncode == 0 or "Address already in use" not in run.server_log:
                    break
                run = run_page(page, tmp_path_factory.mktemp(page.stem), page_ports(), None)
            futures[page].set_result(run)
        except BaseException as error:
            futures[page].set_exception(error)

    def shared_lane() -> None:
        try:
            for attempt in range(1, START_TRIES + 1):
                try:
                    servers.append(MakeRunServer(tmp_path_factory.mktemp("make-run")))
                    break
                except RuntimeError as error:
                    if attempt == START_TRIES or "Address already in use" not in str(error):
                        raise
        except BaseException as error:
            for page in shared:
                futures[page].set_exception(error)
            return
        for page in shared:
            run_into(page, servers[0].ports, servers[0].log)

    with ThreadPoolExecutor(max_workers=LANES) as pool:
        if shared:
            pool.submit(shared_lane)
        for page in selected:
            if page not in shared:
                pool.submit(run_into, page, page_ports(), None)
        try:
            yield futures
        finally:
            for future in futures.values():
                try:
                    future.result()
                except BaseException:
                    pass
            for server in servers:
                server.stop()


@pytest.mark.parametrize("page", PAGES_WITH_COMMANDS, ids=lambda page: str(page.relative_to(ROOT)))
def test_page_commands_run(page: Path, page_runs):
    if root_page_skipped(page):
        pytest.skip(f"{page.relative_to(ROOT)} needs root (it makes network namespaces); CI runs it as root")
    try:
        run = page_runs[page].result(timeout=PAGE_TIMEOUT * len(page_runs))
    except PageError as error:
        pytest.fail(str(error))
    if run.returncode != 0:
        blocks_seen = re.findall(r"::block (\S+)", run.stderr)
        pytest.fail(
            f"{page.relative_to(ROOT)}: the example at {blocks_seen[-1] if blocks_seen else '?'} failed "
            f"(exit {run.returncode}).\n--- stdout (end)\n{run.stdout[-3000:]}\n--- stderr (end)\n"
            f"{run.stderr[-3000:]}\n--- server log (end)\n{run.server_log[-2000:]}"
        )


def test_examples_not_run_are_few_and_say_why():
    skipped = [(block.where, block.not_run) for block in ALL_BLOCKS if block.not_run]
    for where, reason in skipped:
        print(f"not run: {where}: {reason}")
        assert reason, f"{where}: <!-- not run: --> needs a reason"
    assert len(skipped) <= 6, f"{len(skipped)} examples are not run; the docs should show runnable ones"


# ------------------------------------------------------------------------------------- the harness itself is strict
def write_page(tmp_path: Path, body: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(body)
    return page


def test_a_wrong_expected_output_fails_the_page(tmp_path):
    page = write_page(tmp_path, "```sh\necho hello world\n# → hello ... world\necho hello\n# → goodbye\n```\n")
    (tmp_path / "run").mkdir()
    run = run_page(page, tmp_path / "run", page_ports(), None)
    assert run.returncode != 0 and "expected output not printed: goodbye" in run.stderr


def test_a_failing_command_fails_the_page_and_an_expected_failure_does_not(tmp_path):
    failing = write_page(tmp_path, "```sh\nfalse\necho never\n```\n")
    (tmp_path / "a").mkdir()
    run = run_page(failing, tmp_path / "a", page_ports(), None)
    assert run.returncode != 0 and "never" not in run.stdout
    said = write_page(tmp_path, '```sh\nfalse || echo "exit status $?"\n# → exit status 1\n```\n')
    (tmp_path / "b").mkdir()
    assert run_page(said, tmp_path / "b", page_ports(), None).returncode == 0


def test_a_server_left_in_the_foreground_is_refused(tmp_path):
    page = write_page(tmp_path, "```sh\nforewarn serve --fleet demo\n```\n")
    with pytest.raises(PageError, match="background"):
        script_for(runnable(page), page_ports())


@pytest.mark.parametrize(
    "expected, printed, matches",
    [
        ("a ... b", "a b", True),
        ("a ... b", "a x y b", True),
        ("... b", "b c", False),
        ("... b ...", "b c", True),
        ('{"Id":"...","S":1}', '{"Id":"X-1","S":1}', True),
        ("a  b", "a b", True),
        ("a b", "a c", False),
    ],
)
def test_wildcards(expected, printed, matches):
    namespace: dict = {}
    exec(EXPECT_SCRIPT.split("printed =")[0], namespace)  # the wildcard function the page's checks use
    assert bool(namespace["wildcard"](expected).fullmatch(" ".join(printed.split()))) is matches
