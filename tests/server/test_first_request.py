"""What a first request would import on the event loop is imported before the server serves: anyio's asyncio backend
(FastAPI's task groups load it on first use: 8 ms of a first POST) and the codec JSON bodies are decoded with."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import asyncio, sys
import forewarn.server.composition  # everything the server imports before it serves
backend = "anyio._backends._asyncio"
print(backend in sys.modules, "encodings.utf_8_sig" in sys.modules)
from forewarn.server.tuning import import_first_request_modules
asyncio.run(import_first_request_modules())
print(backend in sys.modules)
"""


def test_the_modules_a_first_request_would_import_are_imported_before_the_server_serves():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]  # the backend only once asked for; the codec at import
