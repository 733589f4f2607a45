import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import secrets

import pytest

POSTGRES_URL = os.environ.get("FOREWARN_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def postgres_url():
    """A PostgreSQL URL whose search_path is a fresh schema, dropped afterwards."""
    psycopg = pytest.importorskip("psycopg")
    schema = f"forewarn_test_{secrets.token_hex(4)}"
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        if os.environ.get("FOREWARN_SKIP_POSTGRES"):
            pytest.skip(f"PostgreSQL unavailable: {error}")
        raise
    admin.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"
    admin.execute(f"DROP SCHEMA {schema} CASCADE")
    admin.close()


@pytest.fixture
def proxy(postgres_url):
    """A TCP proxy in front of the test PostgreSQL, which the test cuts and restores (tests/pg_proxy.py)."""
    from pg_proxy import PgProxy, upstream

    found = PgProxy(upstream(postgres_url))
    yield found
    found.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """Each store test runs against both databases."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return request.getfixturevalue("postgres_url")


def pytest_configure(config):
    from forewarn.testing import preload_servers

    preload_servers()  # hundreds of servers start: fork each from one process that imported the server
