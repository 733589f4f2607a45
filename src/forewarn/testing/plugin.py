"""The pytest plugin (entry point ``pytest11``: ``forewarn.testing.plugin``): the ``forewarn`` fixture.

``forewarn`` hands a test a running :class:`~forewarn.testing.Forewarn`. Servers are shared: one per fleet and
options in each test process (each pytest-xdist worker has its own), started at its first test and reset
(``POST /v1/reset``) before every later one, so that a test starts in the time of a reset instead of a server's
start-up. ``@pytest.mark.forewarn(fresh=True)`` gives a test a server of its own instead.

The fleet: the ``forewarn_fleet`` fixture (``demo`` unless a conftest or module overrides it: YAML text, a path or a
dict), or ``@pytest.mark.forewarn(fleet=...)``. The marker also takes Forewarn's options: ``clock``, ``start``,
``seed``, ``args``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pytest

from forewarn.testing import Forewarn, fleet_text

SHARED_SERVERS = 4  # per test process: a suite that uses more fleets stops the least recently used one


class SharedServers:
    """The servers of one test process, by fleet text and options."""

    def __init__(self) -> None:
        self._servers: OrderedDict[tuple[str, str], Forewarn] = OrderedDict()

    def get(self, fleet: Any, options: dict[str, Any]) -> Forewarn:
        key = (fleet_text(fleet), repr(sorted(options.items())))
        server = self._servers.get(key)
        if server is not None and server.running:
            self._servers.move_to_end(key)
            return server.reset()
        if server is not None:  # a test stopped it, or it died: a new one
            server.stop()
        server = Forewarn(key[0], **options).start()
        self._servers[key] = server
        while len(self._servers) > SHARED_SERVERS:
            self._servers.popitem(last=False)[1].stop()
        return server

    def close(self) -> None:
        while self._servers:
            self._servers.popitem()[1].stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "forewarn(fleet=None, clock='manual', start=None, seed=..., args=(), fresh=False): the forewarn fixture's "
        "server for this test (fresh=True: one of its own, not the shared one)",
    )


@pytest.fixture(scope="session")
def forewarn_shared_servers() -> Iterator[SharedServers]:
    """The servers the ``forewarn`` fixture shares in this test process; stopped at the end of the session."""
    servers = SharedServers()
    yield servers
    servers.close()


@pytest.fixture
def forewarn_fleet() -> Any:
    """The fleet of the ``forewarn`` fixture: override it (in a conftest.py or a module) with YAML text, a fleet
    file's path or a dict. Default: the demo fleet."""
    return "demo"


@pytest.fixture
def forewarn(
    request: pytest.FixtureRequest, forewarn_fleet: Any, forewarn_shared_servers: SharedServers
) -> Iterator[Forewarn]:
    """A running forewarn on free ports, manual clock, in the state of a fresh server."""
    marker = request.node.get_closest_marker("forewarn")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    fleet = options.pop("fleet", forewarn_fleet)
    if options.pop("fresh", False):
        with Forewarn(fleet, **options) as server:
            yield server
        return
    yield forewarn_shared_servers.get(fleet, options)
