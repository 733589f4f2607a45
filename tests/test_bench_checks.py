"""Every benchmark in bench/ runs in its ``--check`` mode: small and fast, no verdict on the machine's speed, so it
fails on a broken setup (a server that does not start, an event lost or doubled, a query answering wrongly), never on
a slow machine. The checks run side by side, each in its own process, within one bound."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from browser import CHROMIUM
from conftest import POSTGRES_URL

BENCH = Path(__file__).resolve().parent.parent / "bench"
BOUND = 300  # seconds for all of them together; about 60 on a quiet 2-core machine

CHECKS = {
    "resource_graph_query.py": [],
    "eventgrid_delivery.py": [],
    "ec2_vs_moto.py": [],  # forewarn alone when moto is not installed (--check installs nothing)
    "commands.py": ["--postgres", POSTGRES_URL],
    "wave.py": [],
    "startup.py": [],
    "gce_wait_for_change.py": [],
    "replicas.py": ["--db", POSTGRES_URL],
    "million.py": [],
    "floods.py": [],
    "queues.py": [],
    "agent.py": [],
    "stalls.py": ["--db", POSTGRES_URL],
    "resets.py": [],
    "ended_events.py": [],
    "rebuild_stall.py": [],
    "takeover_stall.py": ["--db", POSTGRES_URL],
}
if os.path.exists(CHROMIUM):  # .ci/run installs it; the browser tests say so where it is missing
    CHECKS["dashboard.py"] = []


def test_every_benchmark_passes_its_check(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    started = time.monotonic()
    waiting = list(CHECKS.items())
    running: dict[str, tuple[subprocess.Popen, object]] = {}
    failed = {}
    while waiting or running:
        # Two at a time: the machine has two cores, and the rest of the suite runs beside this test.
        while waiting and len(running) < 2:
            script, extra = waiting.pop(0)
            log = open(tmp_path / f"{script}.log", "wb")
            command = [sys.executable, str(BENCH / script), "--check", *extra]
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=BENCH.parent, env=env)
            running[script] = (process, log)
        time.sleep(0.2)
        for script, (process, log) in list(running.items()):
            code = process.poll()
            if code is None and time.monotonic() - started < BOUND:
                continue
            if code is None:
                process.kill()
                process.wait()
                code = "timed out"
            log.close()  # type: ignore[attr-defined]
            del running[script]
            if code != 0:
                failed[script] = (code, (tmp_path / f"{script}.log").read_text(errors="replace")[-2000:])
    assert not failed, "\n\n".join(f"{script} --check: {code}\n{tail}" for script, (code, tail) in failed.items())


@pytest.mark.skipif(
    shutil.which("wrk") is None or not (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()),
    reason="imds_vs_nginx.py needs nginx and wrk, and --check installs nothing (make bench installs them)",
)
def test_the_imds_benchmark_passes_its_check():
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    done = subprocess.run(
        [sys.executable, str(BENCH / "imds_vs_nginx.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=BENCH.parent,
        env=env,
        timeout=BOUND,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.skipif(
    shutil.which("wrk") is None or shutil.which("valgrind") is None,
    reason="imds_instructions.py needs valgrind and wrk (apt-get install valgrind wrk)",
)
def test_the_imds_instruction_count_passes_its_check():
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    done = subprocess.run(
        [sys.executable, str(BENCH / "imds_instructions.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=BENCH.parent,
        env=env,
        timeout=BOUND,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "instructions per request in all" in done.stdout
