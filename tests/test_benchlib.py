"""bench/benchlib.py's verdict on a round: other load judged against OTHERS_MAX cores whatever the round's length, and
a PostgreSQL backend serving the benchmark counted as the benchmark's own CPU, not as other load; a participant that
ends during a round counted as nothing rather than less."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import POSTGRES_URL

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import benchlib


def usage(wall: float, others: float) -> benchlib.Usage:
    return benchlib.Usage(wall=wall, cpu={"server": wall}, others_cores=others, steal=0.0, loadavg=0.0)


def test_a_short_round_is_allowed_no_more_other_load_than_a_long_one():
    # A 0.2 s round where others used 0.5 cores: the allowance is OTHERS_MAX cores, not OTHERS_MAX plus ticks / wall.
    assert any("other processes used 0.50 cores" in reason for reason in benchlib.verdict(usage(0.2, 0.5), ["server"]))
    assert any("other processes" in reason for reason in benchlib.verdict(usage(5.0, 0.36), ["server"]))
    assert benchlib.verdict(usage(0.2, 0.3), ["server"]) == []


def test_a_round_too_short_for_the_ticks_to_judge_is_refused_as_such():
    reasons = benchlib.verdict(usage(benchlib.MIN_ROUND * 0.9, 0.0), ["server"])
    assert len(reasons) == 1 and "too short to judge other load" in reasons[0]


def test_a_process_cpu_is_read_finer_than_a_tick():
    before = benchlib.process_cpu(os.getpid())
    while benchlib.process_cpu(os.getpid()) == before:
        pass
    assert 0 < benchlib.process_cpu(os.getpid()) - before < 1 / benchlib.TICK


CLIENT = """
import sys, psycopg
connection = psycopg.connect(sys.argv[1], autocommit=True)
print(connection.info.backend_pid, flush=True)
for line in sys.stdin:
    if line == "query\\n":
        connection.execute("SELECT sum(x) FROM generate_series(1, 3000000) AS x").fetchone()
    else:
        connection.close()
    print("done", flush=True)
"""


def test_the_postgres_backend_of_a_participant_is_the_benchmarks_own_work():
    # The client is a process of its own: this worker may still hold connections of earlier tests.
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, POSTGRES_URL], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdin is not None and client.stdout is not None
        backend = int(client.stdout.readline())
        assert benchlib.postgres_backends([client.pid]) == [backend]
        participants = {"postgres": lambda: benchlib.postgres_backends([client.pid])}
        with benchlib.Meter(participants) as meter:
            client.stdin.write("query\n")
            client.stdin.flush()
            assert client.stdout.readline() == "done\n"
        assert meter.usage is not None
        assert meter.usage.cpu["postgres"] > 0.1  # the query's CPU, counted as ours: not in others_cores
        client.stdin.write("close\n")
        client.stdin.flush()
        assert client.stdout.readline() == "done\n"
        assert benchlib.postgres_backends([client.pid]) == []
    finally:
        client.kill()
        client.wait()


def test_a_participant_that_ends_in_the_round_counts_nothing_and_is_reported_gone():
    burn = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\ninput()"
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE)
    try:
        while benchlib.process_cpu(child.pid) < 0.2:  # its CPU before the round, which the round must not subtract
            time.sleep(0.01)
        with benchlib.Meter({"child": [child.pid]}) as meter:
            child.communicate(b"\n", timeout=30)
    finally:
        child.kill()
        child.wait()
    assert meter.usage is not None
    assert meter.usage.cpu["child"] == 0.0 and meter.usage.gone["child"] >= 0.2
