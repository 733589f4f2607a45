"""A SQLite store's page cache: 64 MiB unless told (SQLite's own 2 MiB makes a large fleet's wave read the same pages
from the file again and again), set by `forewarn serve --sqlite-cache`, refused in the CLI's style below 1 MiB."""

from __future__ import annotations

from click.testing import CliRunner

from forewarn.cli.main import cli
from forewarn.server.config import ServeConfig
from forewarn.server.opening import open_configured_store
from helpers import open_store


def cache_kib(store) -> int:
    # negative: KiB; what the writer's connection was set to
    return -store.connection.execute("PRAGMA cache_size").fetchone()[0]


def test_a_sqlite_file_gets_a_64_mib_cache_and_the_server_takes_the_size_it_is_given(tmp_path):
    store = open_store(str(tmp_path / "default.db"))
    assert cache_kib(store) == 64 * 1024
    store.close()
    configured = open_configured_store(ServeConfig(db=str(tmp_path / "given.db"), sqlite_cache=8 * 1024**2))
    assert cache_kib(configured) == 8 * 1024
    configured.close()


def test_the_serve_option_is_parsed_as_a_size_and_refused_below_one_mib(tmp_path):
    runner = CliRunner()
    too_small = runner.invoke(cli, ["serve", "--db", str(tmp_path / "x.db"), "--sqlite-cache", "512KiB"])
    assert too_small.exit_code == 2
    assert "Invalid value for --sqlite-cache: must be at least 1MiB" in too_small.output
    no_unit = runner.invoke(cli, ["serve", "--db", str(tmp_path / "x.db"), "--sqlite-cache", "64"])
    assert no_unit.exit_code == 2
    assert "expected a whole number of KiB, MiB or GiB (e.g. 2GiB), not '64'" in no_unit.output
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened
    assert "--sqlite-cache SIZE" in runner.invoke(cli, ["serve", "--help"]).output
