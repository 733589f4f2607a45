"""Processes that open one new PostgreSQL database at the same moment all open it: its tables are created once, by
whichever comes first, and the others find them made (store/base.py, ``migrate``).

Each round forks several processes (this test process, with forewarn imported: they reach the database within
milliseconds of each other) that meet at a barrier and then open the store on a fresh schema. Without the schema's
lock, most rounds lose all but one process to PostgreSQL refusing a second ``CREATE TABLE`` of the same name
(``duplicate key value violates unique constraint "pg_type_typname_nsp_index"``).
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from forewarn.store.migrations import LATEST
from helpers import open_store

psycopg = pytest.importorskip("psycopg")

POSTGRES_URL = os.environ.get("FOREWARN_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
ROUNDS = 8
PROCESSES = 4
BARRIER_WAIT = 60.0  # seconds for every forked process to reach the barrier, on a loaded machine


@contextmanager
def fresh_schema() -> Iterator[str]:
    schema = f"forewarn_first_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        separator = "&" if "?" in POSTGRES_URL else "?"
        try:
            yield f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def open_at_once(url: str, barrier, failures) -> None:
    try:
        barrier.wait(BARRIER_WAIT)
        open_store(url).close()
    except Exception as error:
        failures.put(f"{type(error).__name__}: {str(error).splitlines()[0]}")
        raise SystemExit(1) from None


def schema_version(url: str) -> int:
    with psycopg.connect(url) as connection:
        [(value,)] = connection.execute("SELECT value FROM forewarn_meta WHERE key = 'schema_version'").fetchall()
        return int(value)


def test_processes_opening_a_new_database_together_all_open_it():
    forked = multiprocessing.get_context("fork")
    refused: list[str] = []
    for _ in range(ROUNDS):
        with fresh_schema() as url:
            barrier = forked.Barrier(PROCESSES)
            failures = forked.Queue()
            processes = [forked.Process(target=open_at_once, args=(url, barrier, failures)) for _ in range(PROCESSES)]
            for process in processes:
                process.start()
            for process in processes:
                process.join(BARRIER_WAIT + 30)
            while not failures.empty():
                refused.append(failures.get())
            assert all(process.exitcode is not None for process in processes), "a process did not finish"
            assert schema_version(url) == LATEST
    assert refused == [], f"{len(refused)} of {ROUNDS * PROCESSES} processes failed to open the store: {refused[:3]}"
