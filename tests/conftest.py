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


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Tell each pytest-xdist worker how tests are handed out (its own --dist option reads "no"): tests/docs runs
    every page once for its whole file, which only one worker may do."""
    node.workerinput["dist"] = node.config.option.dist


# The files that keep a worker busiest (seconds of one worker, quiet machine, 2026-12-04), run first: pytest-xdist
# hands out whole files in collection order (make test's --dist loadfile --no-loadscope-reorder), so a long file
# left for the end is the suite's tail, its other workers idle. Longest first, the short files fill in around them.
LONGEST_FIRST = (
    "tests/conformance/test_ec2_lifecycle_cases.py",  # 138 s
    "tests/docs/test_docs_examples.py",  # 123 s
    "tests/conformance/test_battery.py",  # 87 s
    "tests/conformance/test_dropped_connections.py",  # 85 s
    "tests/scenarios/test_scenarios.py",  # 59 s
    "tests/conformance/test_agent_battery_aws.py",  # 50 s
    "tests/test_bench_checks.py",  # 48 s
    "tests/conformance/test_agent_battery_azure.py",  # 45 s
    "tests/conformance/test_agent_battery_gcp.py",  # 35 s
    "tests/server/test_http_limits.py",  # 32 s
    "tests/conformance/test_gce_battery.py",  # 31 s
    "tests/conformance/test_queue_battery.py",  # 29 s
    "tests/agent/test_agent.py",  # 29 s
    "tests/scenarios/test_scenario_generation.py",  # 28 s
    "tests/conformance/test_ec2_battery.py",  # 28 s
)


def pytest_collection_modifyitems(config, items):
    root = Path(__file__).resolve().parent.parent
    rank = {str(root / name): place for place, name in enumerate(LONGEST_FIRST)}

    def place(item) -> int:
        return rank.get(str(Path(item.fspath).resolve()), len(rank))

    items.sort(key=place)  # stable: the other files, and each file's tests, keep their order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report ends with the log of each test server still running or started during the test: a
    failure seen once in CI (a port another process took, a server that died) is then told by its server's log."""
    from helpers import servers_of_the_test

    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name, tail in servers_of_the_test(item.nodeid):
            report.sections.append((f"server log {name}", tail))
