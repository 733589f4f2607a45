"""What every benchmark here shares so that none can flatter itself: CPU accounting per round and the verdict on it.

A round's wall-clock figure measures the server only if the server had its core to itself and used it. So each round
records, from /proc:

- the CPU time of every process taking part (the server under test, its reference, this script);
- the CPU time everything else on the machine used meanwhile (all CPUs' busy time minus ours), in cores;
- the hypervisor's steal, as a share of the machine's time.

``verdict`` refuses a round where a server that should have been saturated used less than ``SATURATED`` of a core
(or, named as a driver, the client used at least that much: then the client set the rate), where other processes used
more than ``OTHERS_MAX`` cores over the round, where steal passed ``STEAL_MAX``, or where the round was too short for
/proc/stat's clock ticks to tell ``OTHERS_MAX`` apart from an idle machine (``MIN_ROUND``). ``measured`` re-runs a
refused round up to ``attempts`` times and reports it INVALID (never as a figure that meets a goal) if it still fails.

The participants' CPU is read from each process's CPU clock (nanoseconds), the machine's busy time from /proc/stat
(sampled at every tick, so off by up to a tick per CPU over a round): a PostgreSQL backend serving the server under
test is a participant too (``postgres_backends``), not other load.
CPU-time figures (CPU seconds per request or per query) are reported beside wall time: they barely move with other
load and compare runs on a busy machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:  # this tree's forewarn, whatever the venv has installed
    sys.path.insert(0, str(SRC))

# Where tests and benchmarks take ports and loopback addresses (FOREWARN_TEST_NET moves them: docs/testing.md).
from forewarn.scenarios.testnet import free_ports as free_ports  # noqa: E402
from forewarn.scenarios.testnet import loopback_address as loopback_address  # noqa: E402
from forewarn.scenarios.testnet import numbered_address as numbered_address  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
SATURATED = 0.85  # of one core: a server below this was waiting on something other than its own work
OTHERS_MAX = 0.35  # cores used by processes outside the benchmark: above this the machine is busy
STEAL_MAX = 0.05
# /proc/stat's busy time is sampled once a tick on each CPU: over a round it is off by up to one tick per CPU. A round
# must be long enough for that error to stay within half of OTHERS_MAX, or others' load cannot be judged at all.
SAMPLING_ERROR = (os.cpu_count() or 1) / TICK  # CPU seconds
MIN_ROUND = SAMPLING_ERROR / (OTHERS_MAX / 2)  # seconds

T = TypeVar("T")


def process_cpu(pid: int) -> float:
    """CPU seconds one process (all its threads) has used, from its CPU clock (nanoseconds; /proc's utime + stime,
    in 10 ms ticks, where the clock cannot be read); 0 if it is gone."""
    try:
        return time.clock_gettime(_process_clock(pid))
    except OSError:
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def _process_clock(pid: int) -> int:
    """The clock id of a process's CPU clock, as clock_getcpuclockid(3) makes it on Linux (CPUCLOCK_SCHED of the
    whole process)."""
    return ((~pid) << 3) | 2


def postgres_backends(pids: Iterable[int], port: int = 5432) -> list[int]:
    """The PostgreSQL backends serving connections that ``pids`` hold to ``port`` on this machine: their CPU is the
    benchmark's own work (the server under test waits on it), not other load. Found without asking PostgreSQL: a
    backend's process title names its client's address and port ("postgres: ... 127.0.0.1(54321) idle")."""
    client_ports = {local for pid in pids for local in _connections_to(pid, port)}
    backends = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if title.startswith("postgres: ") and any(f"({local})" in title for local in client_ports):
            backends.append(int(entry.name))
    return backends


def _connections_to(pid: int, remote_port: int) -> list[int]:
    """Local ports of ``pid``'s TCP connections (IPv4 and IPv6) whose far end is ``remote_port``."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                inodes.add(os.readlink(fd).removeprefix("socket:[").removesuffix("]"))
            except OSError:  # closed since the listing (the listing's own descriptor, for one)
                continue
    except OSError:
        return []
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            columns = line.split()
            local, remote, inode = columns[1], columns[2], columns[9]
            if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                found.append(int(local.rsplit(":", 1)[1], 16))
    return found


def memory_mb(pid: int) -> dict[str, float]:
    """A process's resident memory now (``VmRSS``) and at its peak (``VmHWM``), in MB, from /proc."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(line.split()[1]) / 1024
    return found


def forewarn_environment() -> dict[str, str]:
    """This tree's source first, so the figures are this tree's whatever is installed; and no control token from the
    shell, which would change what the server asks of its clients."""
    env = dict(os.environ)
    env.pop("FOREWARN_CONTROL_TOKEN", None)
    src = str(SRC)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


def wait_healthy(
    process: subprocess.Popen,
    control: str,
    started: float,
    within: float | None = None,
    log: Path | None = None,
    poll: float = 0.05,
    what: str = "forewarn serve",
) -> float:
    """Seconds from ``started`` (a ``time.perf_counter()`` reading) until ``control``'s ``/healthz`` answers 200.
    SystemExit, with the end of ``log``, if the process exits first; after ``within`` seconds (None: no limit) the
    process is stopped and SystemExit says so."""
    while within is None or time.perf_counter() - started < within:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise SystemExit(f"{what} exited with status {process.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"{control}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return time.perf_counter() - started
        except OSError:
            pass
        time.sleep(poll)
    process.terminate()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
    raise SystemExit(f"{what} did not answer /healthz within {within:g} s")


def tree_pids(pid: int) -> list[int]:
    """A process and its direct children (nginx's worker, a server's helper)."""
    pids = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                pids.append(int(entry.name))
    return pids


def _machine() -> tuple[float, float, float]:
    """(busy, steal, total) seconds over all CPUs since boot, from the first line of /proc/stat."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq
    return busy / TICK, steal / TICK, (busy + idle + iowait + steal) / TICK


@dataclass
class Usage:
    """What one round cost: wall seconds, CPU seconds per named participant, other processes' cores, steal share;
    ``gone``: per participant, the CPU seconds (read at the round's start) of its processes that ended during the
    round, whose CPU in the round is unknown and so counted as other load (a script that reaped one, and so knows
    its CPU, can take it back)."""

    wall: float
    cpu: dict[str, float]
    others_cores: float
    steal: float
    loadavg: float
    gone: dict[str, float] = field(default_factory=dict)

    def share(self, name: str) -> float:
        """The participant's CPU over wall time: 1.0 is one saturated core."""
        return self.cpu.get(name, 0.0) / self.wall if self.wall > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall": self.wall,
            "cpu": self.cpu,
            "others_cores": self.others_cores,
            "steal": self.steal,
            "loadavg": self.loadavg,
            "gone": self.gone,
        }


class Meter:
    """Measures one round: ``with Meter({"server": [pid]}) as meter: ...`` then ``meter.usage``.

    This script's own process is counted as ``"client"`` unless named otherwise; ``own`` is False when the script is
    the measured thing itself (an in-process benchmark), so it is counted under that name. Each participant's CPU
    is counted process by process: one that started during the round counts whole, one that ended during it counts
    nothing (its start reading is in ``Usage.gone``), never less than nothing."""

    def __init__(self, participants: Mapping[str, Iterable[int] | Callable[[], Iterable[int]]], own: str = "client"):
        self._participants = participants
        self._own = own
        self.usage: Usage | None = None

    def _pids(self) -> dict[str, list[int]]:
        return {name: list(pids() if callable(pids) else pids) for name, pids in self._participants.items()}

    def _read(self) -> tuple[float, dict[str, dict[int, float]], float, tuple[float, float, float]]:
        cpu = {name: {pid: process_cpu(pid) for pid in pids} for name, pids in self._pids().items()}
        times = os.times()
        return time.perf_counter(), cpu, times.user + times.system, _machine()

    def __enter__(self) -> Meter:
        self._start = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._read()
        wall = end[0] - self._start[0]
        cpu: dict[str, float] = {}
        gone: dict[str, float] = {}
        for name in set(end[1]) | set(self._start[1]):
            before, after = self._start[1].get(name, {}), end[1].get(name, {})
            # A process's CPU clock only grows: a reading below the start's is a process that has ended.
            ended = {pid for pid, used in before.items() if after.get(pid, 0.0) < used}
            cpu[name] = sum(used - before.get(pid, 0.0) for pid, used in after.items() if pid not in ended)
            gone[name] = sum(before[pid] for pid in ended)
        cpu[self._own] = cpu.get(self._own, 0.0) + end[2] - self._start[2]
        busy = end[3][0] - self._start[3][0]
        steal = end[3][1] - self._start[3][1]
        total = end[3][2] - self._start[3][2]
        others = max(0.0, busy - sum(cpu.values()))
        self.usage = Usage(
            wall=wall,
            cpu=cpu,
            others_cores=others / wall if wall > 0 else 0.0,
            steal=steal / total if total > 0 else 0.0,
            loadavg=float(Path("/proc/loadavg").read_text().split()[0]),
            gone={name: seconds for name, seconds in gone.items() if seconds},
        )


def verdict(usage: Usage, saturated: Sequence[str] = (), drivers: Sequence[str] = ()) -> list[str]:
    """Why the round does not count (empty: it counts). ``drivers`` are the participants that make the load (this
    script as the client): one that used its core is the limit of the round, which then says so, not that the server
    was short of work."""
    reasons = []
    limits = [name for name in drivers if usage.share(name) >= SATURATED]
    for name in limits:
        reasons.append(f"the {name} used {usage.share(name):.2f} of its core (it, not the server, set the rate)")
    for name in saturated if not limits else ():
        if usage.share(name) < SATURATED:
            reasons.append(f"{name} used {usage.share(name):.2f} of its core (< {SATURATED})")
    if usage.wall < MIN_ROUND:
        reasons.append(
            f"the round lasted {usage.wall * 1000:.0f} ms: too short to judge other load at /proc/stat's"
            f" {1000 / TICK:.0f} ms ticks (at least {MIN_ROUND * 1000:.0f} ms)"
        )
    elif usage.others_cores > OTHERS_MAX:
        reasons.append(f"other processes used {usage.others_cores:.2f} cores (> {OTHERS_MAX})")
    if usage.steal > STEAL_MAX:
        reasons.append(f"steal {usage.steal:.0%} (> {STEAL_MAX:.0%})")
    return reasons


@dataclass
class Measured:
    """A round's result once it counts, or the last attempt's with the reasons it did not."""

    value: Any
    usage: Usage
    attempts: int
    refused: list[list[str]] = field(default_factory=list)  # reasons per refused attempt

    @property
    def valid(self) -> bool:
        return len(self.refused) < self.attempts

    def note(self) -> str:
        if self.valid:
            return "" if not self.refused else f"(valid on attempt {self.attempts})"
        return "INVALID: " + "; ".join(self.refused[-1])


def measured(
    run: Callable[[], T],
    participants: Mapping[str, Iterable[int] | Callable[[], Iterable[int]]],
    saturated: Sequence[str] = (),
    attempts: int = 3,
    own: str = "client",
    check: bool = False,
    drivers: Sequence[str] = (),
) -> Measured:
    """Run ``run`` under a Meter until a round counts, at most ``attempts`` times. In --check mode one attempt and no
    verdict: a check proves the setup works, not that the machine is quiet."""
    refused: list[list[str]] = []
    for attempt in range(1, (1 if check else attempts) + 1):
        with Meter(participants, own=own) as meter:
            value = run()
        assert meter.usage is not None
        reasons = [] if check else verdict(meter.usage, saturated, drivers)
        if not reasons:
            return Measured(value, meter.usage, attempt, refused)
        refused.append(reasons)
    return Measured(value, meter.usage, attempts, refused)


def machine_note() -> str:
    """A line for the report: CPUs and the load average when the run ended."""
    load = Path("/proc/loadavg").read_text().split()[:3]
    return f"{os.cpu_count()} CPUs, load average {' '.join(load)}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (numbers right-aligned), as bench/README.md shows them."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(_numberish(row[i]) for row in cells[1:]) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if n else ("-" * (w + 2)) for w, n in zip(widths, numeric)) + "|"
    return "\n".join([line(cells[0]), rule] + [line(row) for row in cells[1:]])


def _numberish(text: str) -> bool:
    stripped = text.replace(",", "").replace(".", "").replace("x", "").replace(" ms", "").replace("%", "").strip()
    return stripped.lstrip("-").isdigit() or text in ("", "-")
