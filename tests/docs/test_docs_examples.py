"""Every example in README.md and docs/ runs, as written, against a real forewarn.

The rules a doc follows (docs/README.md says the same for writers):

- A fenced block's language says what it is. ``sh`` blocks are commands and run; ``python`` blocks run;
  ``yaml`` blocks are files and are parsed by the parser of their kind (fleet, scenario, access, Event Grid);
  ``json``, ``xml`` and ``text`` blocks show data or output and are not run. A block with no language fails this
  test: its writer must say which of these it is.
- The ``sh`` and ``python`` blocks of one page run in order in one shell session, in an empty directory, with the
  virtual environment's ``bin`` first on ``PATH`` (so ``forewarn``, ``aws``, ``python3`` and ``.venv/bin/forewarn``
  work), exactly as written: nothing of a page is rewritten, no port, no option, no wait added.
- Beside them runs the server ``make run`` starts, as it starts it (``forewarn serve --fleet demo --db
  var/demo.db``: the demo fleet, SQLite, real clock, on the default ports 8169-8173). A page that starts no server
  of its own talks to it, shared with the other such pages, which run before it in page order (README.md first).
- A page that starts a server of its own (``forewarn serve ... &``, ``forewarn replay ... --port N &``) does as a
  user beside ``make run`` must: in the background, on ports of its own (every one of ``--port``, ``--imds-port``,
  ``--arm-port``, ``--ec2-port``, ``--gce-port`` given, none of make run's), then a wait before its next command
  (``forewarn wait``, or an ``until`` loop), and ``export FOREWARN_SERVER=`` (and ``FOREWARN_ARM=`` for ``graph``
  and ``acknowledge``) naming its server before its first command that talks to one, so that a pasted page never
  talks to the demo server by mistake. No two pages name the same port (they run side by side here, and may in a
  user's terminals). The harness checks all of that before running anything (server_problems, claimed_ports).
- A comment line ``# → TEXT`` right after a command is that command's expected output: each such line must match a
  line the command printed (stdout or stderr), in order. ``...`` matches anything, the spaces around it included;
  runs of spaces compare equal.
- Every command must succeed (``set -e -o pipefail``); a command expected to fail says so itself
  (``forewarn cancel "$ID" || echo "exit status $?"``).
- An HTML comment right above a block can say ``<!-- file: NAME -->`` (the block is written to NAME in the page's
  directory before the page's commands run, and is not run itself) or ``<!-- not run: REASON -->`` (kept for the
  few examples that need what a test cannot have, e.g. a real Azure VM); the reasons are listed in the test's output.
- A page that says ``<!-- page needs: root ... -->`` (the sandbox's, which makes network namespaces) runs only as
  root, as in CI; otherwise it is skipped with that reason.

Isolation, decided so that the pages can run verbatim on fixed ports whatever else runs on the machine (a
developer's own ``make run`` on 8169-8173, another checkout's docs test): the run, make run's server and every page,
happens in a network namespace of its own (PrivateNetwork: ``unshare -n`` as root, as in CI; ``unshare -rn``
otherwise), whose loopback holds every address a page uses (127.0.0.10 and the like), and from which the suite's
PostgreSQL (127.0.0.1:5432, docs/replicas.md) is reached through a relay. Where no namespace can be made, the run
uses the host's own loopback if every port it needs is free there, and is refused, saying which ports are taken and
why no namespace could be made, otherwise. This checkout's entry points (pyproject.toml's: the pytest plugin) are on
the path, as its code is, and its ``agent/`` (forewarn-agent's sources) is in the page's directory, as in a
checkout. Pages run side by side, a few at a time.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
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
MAKE_RUN_PORTS = {"--imds-port": 8169, "--port": 8170, "--arm-port": 8171, "--ec2-port": 8172, "--gce-port": 8173}
PAGE_TIMEOUT = 240  # seconds; a page takes a few (conformance.md, its batteries, a minute), so this only ends a hang

EXPECTED = re.compile(r"^#\s*→\s?(?P<text>.*)$")
COMMAND_START = r"^\s*(?:\S*/)?forewarn\s+"
SERVES = re.compile(COMMAND_START + r"(?:serve|replay)\b")
STARTS_SERVER = re.compile(COMMAND_START + r"serve\b.*&\s*(?:#.*)?$", re.S)
IN_BACKGROUND = re.compile(r"(?<!&)&\s*(?:#.*)?$")
OPTION = re.compile(r"(--[\w-]+)(?:=|\s+)(\S+)")
# What waits for a server started in the background: `forewarn wait` (cli/wait.py) or a shell loop of the page's own.
WAITS = re.compile(r"^\s*(?:until\b|(?:\w+=\S+\s+)*(?:\S*/)?forewarn\s+(?:--server[= ]\S+\s+)?wait\b)")
SETS_ONLY = re.compile(r"^\s*(?:export\s+)?\w+=(?:\"[^\"]*\"|'[^']*'|[^\s$]\S*|\$!)?(?:\s+\w+=\S*)*\s*(?:#.*)?$")
# A forewarn command, wherever on a line (after `$(`, a pipe, `&&`, `xargs`), and its subcommand.
FOREWARN_COMMAND = re.compile(
    r"(?:^|[\s;(|&])(?:\S*/)?forewarn\s+(?:--[\w-]+(?:=|\s+)\S+\s+)*(?P<sub>[a-z][\w-]*)(?P<url>\s+https?://)?"
)
SERVERLESS = {"serve", "replay", "record", "conformance", "scenario", "--version"}  # no --server to follow
ARM_COMMANDS = {"graph", "acknowledge"}  # they follow --arm or FOREWARN_ARM instead
PORT_MENTION = re.compile(r"(?::|--[\w-]*port[= ]|--listen[= ]\S*:)(?P<port>\d{4,5})\b")

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


def commands_of(blocks: list[Block]) -> list[tuple[Block, str]]:
    """The page's shell commands in order, each with its block: no blank lines, comments or expected outputs."""
    return [
        (block, line)
        for block in blocks
        if block.lang == "sh"
        for line in logical_lines(block.body)
        if line.strip() and not line.strip().startswith("#")
    ]


def served_ports(line: str) -> dict[str, str]:
    """The port options a `forewarn serve` line gives."""
    return {option: value for option, value in OPTION.findall(line) if option in MAKE_RUN_PORTS}


def server_problems(blocks: list[Block]) -> list[str]:
    """What a page that starts servers does wrong, as a user would meet it beside `make run`: a server in the
    foreground, one on a default port, no wait before the next command, a command that would reach make run's
    server (no `export FOREWARN_SERVER=` of the page's own), a replay without its --port."""
    problems: list[str] = []
    commands = commands_of(blocks)
    own_control = {served_ports(line).get("--port") for _, line in commands if STARTS_SERVER.match(line)}
    arm_ports = {served_ports(line).get("--arm-port") for _, line in commands if STARTS_SERVER.match(line)}
    server_set = arm_set = False
    waiting_for: str | None = None  # a server started in the background, not yet waited for
    for block, line in commands:
        where, shown = block.where, " ".join(line.split())
        if SERVES.match(line):
            if not IN_BACKGROUND.search(line):
                problems.append(f"{where}: `{shown}` runs until stopped: start it in the background (`&`)")
            elif STARTS_SERVER.match(line):
                given = served_ports(line)
                for option, default in MAKE_RUN_PORTS.items():
                    if given.get(option, str(default)) == str(default):
                        problems.append(
                            f"{where}: `{shown}` listens on make run's {option} {default}: give it a port of the page's own"
                        )
            elif "--port" not in dict(OPTION.findall(line)):
                problems.append(f"{where}: give `{shown}` its --port (one of the page's own)")
            waiting_for = waiting_for or shown
            continue
        exported = re.match(r"^\s*export\s+FOREWARN_(SERVER|ARM)=\S*?:(\d+)", line)
        if exported:
            server_set |= exported.group(1) == "SERVER" and exported.group(2) in own_control
            arm_set |= exported.group(1) == "ARM" and exported.group(2) in arm_ports
        if waiting_for and not IN_BACKGROUND.search(line) and not SETS_ONLY.match(line):
            if not WAITS.match(line):
                problems.append(
                    f"{where}: `{shown}` comes right after `{waiting_for}` started: wait for it first (`forewarn wait`)"
                )
            waiting_for = None
        if own_control:
            for found in FOREWARN_COMMAND.finditer(line):
                reached = reaches(found, line)
                if reached == "ARM" and not (arm_set or "--arm" in line or "FOREWARN_ARM=" in line):
                    problems.append(
                        f"{where}: `{shown}` would reach make run's ARM port: `export FOREWARN_ARM=` the page's own first"
                    )
                elif reached == "control" and not (server_set or "--server" in line or "FOREWARN_SERVER=" in line):
                    problems.append(
                        f"{where}: `{shown}` would reach make run's server: `export FOREWARN_SERVER=` the page's own first"
                    )
    return problems


def reaches(found: re.Match, line: str) -> str | None:
    """Which API of a server a forewarn command found on ``line`` talks to when not told where: "control" (--server,
    FOREWARN_SERVER), "ARM" (--arm, FOREWARN_ARM), or None (it starts its own, reads files, or is given a URL)."""
    sub = found.group("sub")
    if sub in ARM_COMMANDS:
        return "ARM"
    if sub == "wait" and found.group("url") or sub in SERVERLESS or re.search(r"fleet\s+(generate|validate)", line):
        return None
    return "control"


def claimed_ports(page: Path) -> set[int]:
    """The ports a page's examples name (a server's, a listener's, a URL's), make run's aside."""
    texts = [block.body for block in blocks_of(page) if (block.lang in RUN or block.file) and not block.not_run]
    found = {int(match.group("port")) for text in texts for match in PORT_MENTION.finditer(text)}
    return {port for port in found if port not in MAKE_RUN_PORTS.values() and port != 0}


def script_for(blocks: list[Block]) -> str:
    """One bash script for a page: its sh blocks as they are, its python blocks as heredocs, and checks for expected
    output. Nothing a page says is changed: its servers start as it starts them and are waited for as it waits."""
    problems = server_problems(blocks)
    if problems:
        raise PageError("\n".join(problems))
    out = [
        "set -e -o pipefail",
        # What a failure says goes to a file of the run's ($__FAILED, appended to the page's stderr afterwards): a
        # command whose output is checked has its stderr sent to $__OUT, the traps' too when it fails. On a failing
        # exit, that command's output (the reason it gave) goes there as well.
        'trap \'echo "::failed: $BASH_COMMAND" >> "$__FAILED"\' ERR',
        'trap \'[ $? -eq 0 ] || [ ! -s "$__OUT" ] || cat "$__OUT" >> "$__FAILED"; '
        "for p in $(jobs -p); do kill $p 2>/dev/null || true; done; wait 2>/dev/null' EXIT",
        '__expect() { "$PYTHON" "$__EXPECT" "$@"; }',
    ]
    for block in blocks:
        out.append(f"echo '::block {block.where}' >&2")
        if block.lang == "python":
            out.append(f"\"$PYTHON\" - <<'__FOREWARN_PYTHON__'\n{block.body}__FOREWARN_PYTHON__")
            continue
        lines = logical_lines(block.body)
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
            if expected:
                quoted = " ".join(shlex.quote(text) for text in expected)
                out.append(f'{{ {line}\n}} > "$__OUT" 2>&1; cat "$__OUT"; __expect "$__OUT" {quoted}; rm "$__OUT"')
            else:
                out.append(line)
    return "\n".join(out) + "\n"


def runnable(page: Path) -> list[Block]:
    """The blocks that run: sh and python, unless marked not run or written to a file (a script the page starts)."""
    return [block for block in blocks_of(page) if block.lang in RUN and not block.not_run and not block.file]


def starts_own_server(blocks: list[Block]) -> bool:
    return any(STARTS_SERVER.match(line) for _, line in commands_of(blocks))


PAGES_WITH_COMMANDS = [page for page in PAGES if runnable(page)]
# A page whose examples change the host's network set-up (the sandbox's namespaces) says so; it runs as root only
# (CI runs as root) and is skipped, with this reason, otherwise.
NEEDS_ROOT = "<!-- page needs: root"


def root_page_skipped(page: Path) -> bool:
    return NEEDS_ROOT in page.read_text() and os.geteuid() != 0


@pytest.mark.parametrize("page", PAGES_WITH_COMMANDS, ids=lambda page: str(page.relative_to(ROOT)))
def test_page_starts_its_servers_as_a_user_beside_make_run_must(page: Path):
    assert not server_problems(runnable(page)), "\n".join(server_problems(runnable(page)))


def test_no_two_pages_claim_a_port_and_own_servers_leave_make_runs_alone():
    """Pages run side by side (here, and a user's pages in two terminals): each port of a page's own is that page's.
    A page with a server of its own names none of make run's ports: what it reaches there is not its server."""
    owners: dict[int, list[str]] = {}
    for page in PAGES_WITH_COMMANDS:
        for port in claimed_ports(page):
            owners.setdefault(port, []).append(page.name)
        if starts_own_server(runnable(page)):
            texts = [block.body for block in runnable(page)]
            named = {int(m.group("port")) for text in texts for m in PORT_MENTION.finditer(text)}
            assert not named & set(MAKE_RUN_PORTS.values()), (
                f"{page.name} starts its own server but names make run's port(s) {sorted(named & set(MAKE_RUN_PORTS.values()))}"
            )
    shared = {port: pages for port, pages in owners.items() if len(pages) > 1}
    assert not shared, f"ports claimed by more than one page: {shared}"


POSTGRES = ("127.0.0.1", 5432)  # the suite's PostgreSQL (docs/replicas.md uses it), reached from the run's network

# A small TCP relay, run twice: in the run's network ("inside": loopback brought up, 127.0.0.1:5432 listened on, each
# connection carried to a Unix socket) and on the host ("outside": that Unix socket listened on, each connection
# carried to PostgreSQL). A file system socket is the one path between two network namespaces that needs no root.
RELAY = """\
import fcntl, os, socket, struct, sys, threading
mode, path, host, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def pipe(source, sink):
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for end in (source, sink):
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
def relay(listener, connect):
    while True:
        client, _ = listener.accept()
        try:
            upstream = connect()
        except OSError:
            client.close()
            continue
        for ends in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=ends, daemon=True).start()
if mode == "inside":
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack("16sH", fcntl.ioctl(probe, 0x8913, struct.pack("16sH", b"lo", 0)))[1]  # SIOCGIFFLAGS
    fcntl.ioctl(probe, 0x8914, struct.pack("16sH", b"lo", flags | 1))  # SIOCSIFFLAGS: IFF_UP
    listener = socket.create_server((host, port))
    def connect():
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(path)
        return upstream
else:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    connect = lambda: socket.create_connection((host, port))
threading.Thread(target=relay, args=(listener, connect), daemon=True).start()
print("up", flush=True)
sys.stdin.read()  # until the run closes it, or dies: the namespace goes with the process that holds it
"""


class PrivateNetwork:
    """A network namespace of the docs run's own: loopback only, so that make run's ports (8169-8173) and the pages'
    are free whatever runs on the machine (a developer's own `make run`, another checkout's tests), and the pages
    reach nothing beyond it but the suite's PostgreSQL, relayed (RELAY). As root (CI) `unshare -n`; otherwise
    `unshare -rn`, a user namespace in which the user may make one. Every process of the run joins it with
    ``nsenter``. ``command`` is empty when it cannot be made, and ``reason`` says why."""

    def __init__(self, directory: Path) -> None:
        self.reason = ""
        self.command: list[str] = []
        self.processes: list[subprocess.Popen] = []
        if not (shutil.which("unshare") and shutil.which("nsenter")):
            self.reason = "unshare and nsenter (util-linux) are not installed"
            return
        root = os.geteuid() == 0
        path = str(directory / "postgres.sock")
        outside = self.start([sys.executable, "-c", RELAY, "outside", path, *map(str, POSTGRES)])
        inside = self.start(
            ["unshare", "-n" if root else "-rn", sys.executable, "-c", RELAY, "inside", path, *map(str, POSTGRES)]
        )
        if outside is None or inside is None:
            self.close()
            return
        user = [] if root else ["-U", "--preserve-credentials"]
        self.command = ["nsenter", "-t", str(inside.pid), "-n", *user, "--"]

    def start(self, command: list[str]) -> subprocess.Popen | None:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.processes.append(process)
        if process.stdout.readline().strip() == "up":
            return process
        process.kill()
        said = process.stderr.read().strip().splitlines()
        self.reason = self.reason or (said[-1] if said else f"`{' '.join(command[:2])}` failed")
        return None

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.processes.clear()


def network_for_the_run(directory: Path) -> list[str]:
    """The prefix that runs a command in the docs run's network (PrivateNetwork), or [] for the host's own when no
    namespace can be made and every port the pages use is free there; otherwise the run is refused, with why."""
    network = PrivateNetwork(directory)
    if network.command:
        request_network.append(network)
        return network.command
    wanted = set(MAKE_RUN_PORTS.values()) | {port for page in PAGES_WITH_COMMANDS for port in claimed_ports(page)}
    taken = sorted(port for port in wanted if port_taken(port))
    if taken:
        raise RuntimeError(
            f"the docs run needs ports {', '.join(map(str, taken))} free (make run's 8169-8173 and the pages' own): "
            f"something listens there (a `make run`?), and no private network namespace could be made "
            f"({network.reason}). Stop it, or run where `unshare -rn` works."
        )
    return []


request_network: list[PrivateNetwork] = []


def port_taken(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


class MakeRunServer:
    """The server `make run` starts, as it starts it (the demo fleet, var/demo.db, real clock, the default ports), in
    the run's network; shared by the pages that start none."""

    def __init__(self, directory: Path, network: list[str]):
        (directory / "var").mkdir()
        self.log = directory / "server.log"
        bin_dir = Path(sys.executable).parent
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        env.pop("FOREWARN_SERVER", None)
        with self.log.open("w") as output:
            self.process = subprocess.Popen(
                [*network, str(bin_dir / "forewarn"), "serve", "--fleet", "demo", "--db", "var/demo.db"],
                cwd=directory,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        waited = subprocess.run(
            [*network, str(bin_dir / "forewarn"), "wait", "--timeout", "30"], env=env, capture_output=True, text=True
        )
        if waited.returncode != 0:
            self.stop()
            raise RuntimeError(f"the make-run server did not start:\n{self.log.read_text()[-2000:]}{waited.stderr}")

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


def run_page(page: Path, directory: Path, network: list[str], shared_log: Path | None = None) -> PageRun:
    """The page's commands, as one bash script in an empty directory, in the run's network (PageError: a rule broken
    before running)."""
    blocks = runnable(page)
    script = script_for(blocks)
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
        # without credentials the aws CLI would first ask 169.254.169.254 for some (the pages set theirs: any values)
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHON": sys.executable,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{entry_points}",
        "__OUT": str(directory / ".output"),
        "__FAILED": str(directory / ".failed"),
        "__EXPECT": str(directory / ".expect.py"),
    }
    with subprocess.Popen(
        [*network, "bash", str(directory / ".page.sh")],
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
    failed = directory / ".failed"
    stderr += failed.read_text(errors="replace") if failed.exists() else ""
    log = shared_log.read_text(errors="replace") if shared_log and shared_log.exists() else ""
    return PageRun(run.returncode, stdout, stderr, log)


LANES = 3  # pages run side by side: most of a page's time is one CLI process or a server waiting for the next
# pytest-xdist's modes that keep this file's tests on one worker: the run below is the whole file's, once. Any other
# mode ("load", "each") would run every page on each worker that got one of the tests, on the same fixed ports.
ONE_WORKER_A_FILE = {"no", "loadfile", "loadscope"}


def one_worker_runs_the_pages(config: pytest.Config) -> None:
    dist = getattr(config, "workerinput", {}).get("dist", "no")  # tests/conftest.py's pytest_configure_node
    if dist not in ONE_WORKER_A_FILE:
        pytest.fail(
            f"--dist {dist} spreads the docs pages over workers, which would run them twice: use --dist loadfile"
        )


@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory):
    """Every selected page's run, started at once, in one network (PrivateNetwork) with make run's server in it: the
    pages that share that server one after another, in page order (README first, on a fresh server), and each page
    with servers of its own beside them, on its own ports."""
    one_worker_runs_the_pages(request.config)
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_page_commands_run"
        and not root_page_skipped(item.callspec.params["page"])
    ]
    futures = {page: Future() for page in selected}
    shared = [page for page in selected if not starts_own_server(runnable(page))]
    servers: list[MakeRunServer] = []
    network = network_for_the_run(tmp_path_factory.mktemp("network"))

    def run_into(page: Path, shared_log: Path | None) -> None:
        try:
            futures[page].set_result(run_page(page, tmp_path_factory.mktemp(page.stem), network, shared_log))
        except BaseException as error:
            futures[page].set_exception(error)

    def shared_lane() -> None:
        try:
            servers.append(MakeRunServer(tmp_path_factory.mktemp("make-run"), network))
        except BaseException as error:
            for page in shared:
                futures[page].set_exception(error)
            return
        for page in shared:
            run_into(page, servers[0].log)

    try:
        with ThreadPoolExecutor(max_workers=LANES) as pool:
            if shared:
                pool.submit(shared_lane)
            for page in selected:
                if page not in shared:
                    pool.submit(run_into, page, None)
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
    finally:
        while request_network:
            request_network.pop().close()


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
            f"{run.stderr[-3000:]}\n--- make run's server log (end)\n{run.server_log[-2000:]}"
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
    run = run_page(page, tmp_path / "run", [])
    assert run.returncode != 0 and "expected output not printed: goodbye" in run.stderr


def test_a_failing_command_fails_the_page_and_an_expected_failure_does_not(tmp_path):
    failing = write_page(tmp_path, "```sh\nfalse\necho never\n```\n")
    (tmp_path / "a").mkdir()
    run = run_page(failing, tmp_path / "a", [])
    assert run.returncode != 0 and "never" not in run.stdout
    said = write_page(tmp_path, '```sh\nfalse || echo "exit status $?"\n# → exit status 1\n```\n')
    (tmp_path / "b").mkdir()
    assert run_page(said, tmp_path / "b", []).returncode == 0


def test_a_failing_command_whose_output_is_checked_shows_that_output_and_the_command(tmp_path):
    """Its output goes to a file for the check; when it fails, the page's stderr still says what it printed."""
    page = write_page(tmp_path, "```sh\necho fine\n# → fine\nsh -c 'echo the reason >&2; exit 3'\n# → done\n```\n")
    (tmp_path / "run").mkdir()
    run = run_page(page, tmp_path / "run", [])
    assert run.returncode == 3
    assert "the reason" in run.stderr and "::failed: sh -c 'echo the reason >&2; exit 3'" in run.stderr
    assert "fine" not in run.stderr  # a checked output that passed is not shown again


def test_a_server_left_in_the_foreground_is_refused(tmp_path):
    page = write_page(tmp_path, "```sh\nforewarn serve --fleet demo\n```\n")
    with pytest.raises(PageError, match="background"):
        script_for(runnable(page))


OWN_SERVER = "forewarn serve --fleet demo --port 8400 --imds-port 8401 --arm-port 0 --ec2-port 0 --gce-port 0 &\n"


@pytest.mark.parametrize(
    "commands, problem",
    [
        (
            "forewarn serve --fleet demo --port 8400 &\nforewarn --server http://127.0.0.1:8400 wait\n",
            "make run's --imds-port 8169",
        ),
        (OWN_SERVER + "export FOREWARN_SERVER=http://127.0.0.1:8400\nforewarn events\n", "wait for it first"),
        (
            OWN_SERVER + "forewarn --server http://127.0.0.1:8400 wait\nforewarn events\n",
            "would reach make run's server",
        ),
        (OWN_SERVER + "export FOREWARN_SERVER=http://127.0.0.1:8170\nforewarn wait\n", "would reach make run's server"),
        (OWN_SERVER + "export FOREWARN_SERVER=http://127.0.0.1:8400\nforewarn wait\nforewarn graph x\n", "ARM port"),
        ("forewarn replay vm.json &\nforewarn wait http://127.0.0.1:8179/\n", "its --port"),
    ],
)
def test_a_page_server_that_a_user_beside_make_run_would_trip_on_is_refused(tmp_path, commands, problem):
    page = write_page(tmp_path, f"```sh\n{commands}```\n")
    with pytest.raises(PageError, match=re.escape(problem)):
        script_for(runnable(page))


def test_a_page_server_on_its_own_ports_waited_for_and_addressed_is_run_as_written(tmp_path):
    commands = (
        OWN_SERVER
        + "FIRST=$!\nexport FOREWARN_SERVER=http://127.0.0.1:8400   # its own\nforewarn wait\nforewarn events\n"
    )
    script = script_for(runnable(write_page(tmp_path, f"```sh\n{commands}```\n")))
    assert commands in script.replace("   # its own", "   # its own")  # every line as the page has it, in order


def test_the_private_network_hides_the_hosts_listeners_and_reaches_its_own(tmp_path):
    network = PrivateNetwork(tmp_path)
    if not network.command:
        pytest.skip(f"no private network namespace here: {network.reason}")
    try:
        with socket.socket() as host_listener:
            host_listener.bind(("127.0.0.1", 0))
            host_listener.listen()
            port = host_listener.getsockname()[1]
            inside = (
                "import socket\n"
                f"free = socket.socket().connect_ex(('127.0.0.1', {port})) != 0\n"
                f"own = socket.socket(); own.bind(('127.0.0.10', {port})); own.listen()\n"
                f"print(free, socket.socket().connect_ex(('127.0.0.10', {port})) == 0)\n"
            )
            run = subprocess.run([*network.command, sys.executable, "-c", inside], capture_output=True, text=True)
            assert run.stdout.split() == ["True", "True"], run.stderr
    finally:
        network.close()


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


def test_without_a_namespace_taken_ports_refuse_the_run_and_say_which_and_why(tmp_path, monkeypatch):
    class NoNamespace:
        def __init__(self, directory: Path) -> None:
            self.command: list[str] = []
            self.reason = "unshare: unshare failed: Operation not permitted"

    monkeypatch.setattr(sys.modules[__name__], "PrivateNetwork", NoNamespace)
    with socket.socket() as listener:
        try:
            listener.bind(("127.0.0.1", 8290))  # gcp.md's server: as a page left running would hold it
            listener.listen()
        except OSError:
            pass  # something holds it already: as taken either way
        with pytest.raises(RuntimeError) as refused:
            network_for_the_run(tmp_path)
    message = str(refused.value)
    assert "8290" in message and "Operation not permitted" in message and "unshare -rn" in message
