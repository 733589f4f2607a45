"""Imported by the fork server of a test suite's servers (scenarios/server.py) before it forks them: the composition
root and each registered cloud's serving modules, which the composition root otherwise loads at each start."""

from __future__ import annotations

import forewarn.server.composition  # noqa: F401 (loaded before the fork)
from forewarn.server.config import ServeConfig
from forewarn.server.opening import served_clouds

served_clouds(ServeConfig())  # each registered cloud's Serving: its modules, and the registry's import of the cloud
