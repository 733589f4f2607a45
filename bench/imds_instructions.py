#!/usr/bin/env python3
"""Instructions per Azure IMDS GET, counted by callgrind: the figure that holds on a busy machine.

Run from the repository root:  .venv/bin/python bench/imds_instructions.py

imds_vs_nginx.py's wall-clock rounds are refused whenever other processes use the machine; the number of instructions
the server executes per request does not depend on them. This script:

  1. starts ``forewarn serve`` under ``valgrind --tool=callgrind`` with counting off, on imds_vs_nginx.py's fleet and
     events (the same 1,304-byte document at the defaults);
  2. warms it up with wrk (keep-alive, the same command line as imds_vs_nginx.py), then counts the instructions of a
     second wrk run (``callgrind_control``: counting on, zeroed, dumped);
  3. reports instructions per request: all of the process's user-space instructions, and those under libuv's read
     callback (the requests' own work, without the timers that run meanwhile). The kernel's work (the read and the
     write of each request) is not counted.

Under callgrind the server runs about 50 times slower, so the run takes a few minutes. Needs valgrind and wrk; the
exit status is 0 when the count was made.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from imds_vs_nginx import PATH, QUERY, START, VENV_BIN, BenchError, Forewarn, Proc, free_port, make_fleet, populate

CALLGRIND_CONTROL = "callgrind_control"


def say(message: str = "") -> None:
    print(message, flush=True)


def start_counted(fleet_file: Path, tmp: Path, out: Path) -> Forewarn:
    """forewarn serve under callgrind, counting off until told (``callgrind_control -i on``)."""
    port, imds_port = free_port(), free_port()
    serve = "import sys; from forewarn.cli.main import main; sys.argv[0] = 'forewarn'; sys.exit(main())"
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        str(VENV_BIN / "python"),
        "-c",
        serve,
        *("serve", "--fleet", str(fleet_file), "--db", ":memory:", "--clock", "manual", "--start", START),
        *("--seed", "bench", "--port", str(port), "--imds-port", str(imds_port)),
        *("--arm-port", "0", "--ec2-port", "0", "--gce-port", "0", "--log-level", "warning"),
        *("--imds-limit", "connections_per_source=0"),
    ]
    proc = Proc("forewarn under callgrind", argv, tmp / "forewarn.log")
    server = Forewarn(proc, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{imds_port}{PATH}?{QUERY}")
    proc.wait_ready(server.control + "/healthz", 900)
    return server


def wrk(url: str, seconds: float, connections: int) -> int:
    """Requests wrk made in ``seconds`` (keep-alive, one thread); fails on errors or non-2xx answers."""
    # Under callgrind a request can take longer than wrk's default 2 s timeout, which would reconnect and miscount.
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "60s", "-H", "Metadata: true", url]
    output = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120).stdout
    total = re.search(r"^\s+(\d+) requests in", output, re.M)
    if total is None or "Non-2xx" in output or "Socket errors" in output:
        raise BenchError(f"wrk did not run cleanly:\n{output}")
    return int(total.group(1))


def control(pid: int, *args: str) -> None:
    subprocess.run([CALLGRIND_CONTROL, *args, str(pid)], check=True, capture_output=True, timeout=120)


def counts(dump: Path) -> tuple[int, int]:
    """All instructions of a dump, and those under libuv's read callback."""
    annotated = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", str(dump)], capture_output=True, text=True, check=True
    ).stdout
    total = reads = 0
    for line in annotated.splitlines():
        found = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$", line)
        if found is None:
            continue
        value = int(found.group(1).replace(",", ""))
        if found.group(2).startswith("PROGRAM TOTALS"):
            total = value
        elif ":uv__read [" in found.group(2):
            reads = max(reads, value)
    return total, reads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vms", type=int, default=10_000, help="fleet size, a multiple of 100 (default 10000)")
    parser.add_argument("--events", type=int, default=1_000, help="live events to create, at least (default 1000)")
    parser.add_argument("--duration", type=float, default=15, help="seconds of the counted wrk run (default 15)")
    parser.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    parser.add_argument("--check", action="store_true", help="small and fast (1,000 VMs, a 2 s count)")
    args = parser.parse_args()
    if args.check:
        args.vms, args.events, args.duration = 1_000, 100, 2
    missing = [tool for tool in ("valgrind", CALLGRIND_CONTROL, "callgrind_annotate", "wrk") if not shutil.which(tool)]
    if missing:
        say(f"bench failed: {', '.join(missing)} not found (apt-get install valgrind wrk)")
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="forewarn-instructions-"))
    server = None
    try:
        plan = make_fleet(args.vms)
        fleet_file = tmp / "fleet.yaml"
        fleet_file.write_text(plan.text)
        out = tmp / "callgrind.out"
        started = time.monotonic()
        server = start_counted(fleet_file, tmp, out)
        events = populate(server, plan, args.events)
        say(f"forewarn under callgrind: up in {time.monotonic() - started:.0f} s; {events['live']} live events")
        wrk(server.imds_url, 1 if args.check else 3, args.connections)  # warm: every cache filled, uncounted
        control(server.proc.pid, "-i", "on")
        control(server.proc.pid, "-z")
        requests = wrk(server.imds_url, args.duration, args.connections)
        control(server.proc.pid, "-d")
        control(server.proc.pid, "-i", "off")
        dump = max(tmp.glob("callgrind.out*"), key=lambda path: path.stat().st_mtime)
        total, reads = counts(dump)
        if not requests or not total:
            raise BenchError(f"nothing counted ({requests} requests, {total} instructions)")
        say(
            f"GET {PATH}?{QUERY}, wrk -t1 -c{args.connections}, {requests:,} requests counted: "
            f"{total / requests:,.0f} instructions per request in all, {reads / requests:,.0f} under the read callback"
        )
        return 0
    except BenchError as error:
        say(f"bench failed: {error}")
        return 1
    finally:
        if server is not None:
            server.proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent.parent)
    sys.exit(main())
