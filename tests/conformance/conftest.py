"""The battery's fixture as the ``forewarn.conformance.plugin`` pytest11 entry point gives it to an installed
forewarn, but with cases run side by side. The suite turns the installed plugins off (pyproject.toml's addopts: they
would import forewarn from wherever it was installed, not from this checkout) and takes the fixture from this
checkout's code."""

from __future__ import annotations

import pytest

from forewarn.conformance.plugin import judging

JOBS = 4  # cases at once, each on a server of its own: a case mostly waits for its notice to run out


@pytest.fixture
def forewarn_conformance(tmp_path):
    return judging(tmp_path / "conformance", jobs=JOBS)
