"""The parts of forewarn that need an optional dependency, and the extra (pyproject.toml's optional-dependencies)
that installs each.

``pip install forewarn`` is what a user who tests needs: the server with every metadata surface, the control API,
the CLI, the dashboard and the pytest fixture, on SQLite. What only some users need is an extra, so that the base
install stays small (docs/testing.md has the sizes): PostgreSQL, Resource Graph's query engine, SigV4 signature
checks, delivery to webhooks, uvloop. The modules of an extra are imported only where its part runs; without them,
that part says which extra to install, in one line, in the style of the surface it belongs to (a ``forewarn:``
line from the CLI, an ARM error from the ARM port, a delivery failure on the delivery), and the start-up banner
lists what is off.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    name: str  # pip install 'forewarn[name]'
    modules: tuple[str, ...]  # what it installs, as imported
    needs: str  # what needs it, as the subject of the message: "PostgreSQL needs the extra: ..."
    off: str | None = None  # what a server without it does not do, for the banner (None: only an option asks for it)

    @property
    def message(self) -> str:
        return f"{self.needs} needs the extra: pip install 'forewarn[{self.name}]'"

    def installed(self) -> bool:
        """Whether every module is there to import (found, not imported: the check costs no import time)."""
        for module in self.modules:
            try:
                if importlib.util.find_spec(module) is None:
                    return False
            except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules (blocked)
                return False
        return True

    def require(self) -> None:
        """ExtraMissing (an ImportError) with the one-line message when a module of the extra is not installed."""
        if not self.installed():
            raise ExtraMissing(self)


class ExtraMissing(ImportError):
    def __init__(self, extra: Extra):
        super().__init__(extra.message)
        self.extra = extra


POSTGRES = Extra("postgres", ("psycopg", "prometheus_client"), "PostgreSQL")
RESOURCE_GRAPH = Extra(
    "resource-graph",
    ("duckdb", "duckdb_kql"),
    "Resource Graph",
    off="Resource Graph queries (the ARM port answers them with an error naming the extra)",
)
SIGV4 = Extra("sigv4", ("botocore",), "Checking EC2 API signatures (--ec2-credential)")
WEBHOOKS = Extra(
    "webhooks",
    ("aiohttp",),
    "Delivery to webhooks",
    off="delivery to webhooks, Event Grid's and AWS Health's (each attempt fails, naming the extra)",
)
FAST = Extra("fast", ("uvloop",), "uvloop", off="uvloop (the metadata endpoints run on asyncio's own loop, slower)")

#: Every extra but ``all`` and ``test`` (tests/test_extras.py checks pyproject.toml lists these, and nothing else).
EXTRAS = (POSTGRES, RESOURCE_GRAPH, SIGV4, WEBHOOKS, FAST)


def banner_lines() -> list[str]:
    """One banner line for each part a server lacks for want of its extra."""
    return [
        f"  off           {extra.off}: pip install 'forewarn[{extra.name}]'"
        for extra in EXTRAS
        if extra.off is not None and not extra.installed()
    ]
