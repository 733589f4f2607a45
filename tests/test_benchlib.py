"""bench/benchlib.py's verdict on a round: other load judged against OTHERS_MAX cores whatever the round's length, and
a PostgreSQL backend serving the benchmark counted as the benchmark's own CPU, not as other load."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psycopg

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


def test_the_postgres_backend_of_a_participant_is_the_benchmarks_own_work():
    with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
        backend = connection.info.backend_pid
        assert benchlib.postgres_backends([os.getpid()]) == [backend]
        participants = {"postgres": lambda: benchlib.postgres_backends([os.getpid()])}
        with benchlib.Meter(participants) as meter:
            connection.execute("SELECT sum(x) FROM generate_series(1, 3000000) AS x").fetchone()
        assert meter.usage is not None
        assert meter.usage.cpu["postgres"] > 0.1  # the query's CPU, counted as ours: not in others_cores
    assert benchlib.postgres_backends([os.getpid()]) == []
