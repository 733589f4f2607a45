"""The battery in pytest: the ``forewarn_conformance`` fixture (loaded through the ``pytest11`` entry point
``forewarn.conformance.plugin``) gives a function that runs a handler through cases and returns a :class:`Verdict`.

It lives here, not in ``forewarn.testing``: the battery runs its server through ``forewarn.testing``, so that
package cannot import this one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forewarn.conformance_cases import FAIL, PASS, CaseResult


@dataclass(frozen=True)
class Verdict:
    results: Sequence[CaseResult]

    @property
    def grades(self) -> dict[str, str]:
        """Each case's grade, by name."""
        return {result.case.name: result.grade for result in self.results}

    @property
    def failed(self) -> list[str]:
        return [result.case.name for result in self.results if result.grade == FAIL]

    def explain(self) -> str:
        from forewarn.conformance.report import scorecard

        return scorecard(self.results, "", sum(result.wall for result in self.results))

    def assert_passes(self) -> None:
        """Every case passed (a case not judged fails this too: give the probes)."""
        assert all(result.grade == PASS for result in self.results), self.explain()


def judging(logs: Path, **defaults: Any) -> Callable[..., Verdict]:
    """``judge(command, **options)``: ``forewarn.conformance.run`` with ``defaults`` under the given options, the
    handlers' output kept under ``logs``; its results as a :class:`Verdict`."""

    def judge(command: Sequence[str], **options: Any) -> Verdict:
        from forewarn.conformance import run

        return Verdict(run(command, **{"logs": logs, **defaults, **options}))

    return judge


@pytest.fixture
def forewarn_conformance(tmp_path: Path) -> Callable[..., Verdict]:
    """``forewarn_conformance(command, cases=[...], drained=..., restored=...)``: the options of
    ``forewarn.conformance.run``; the handler's output is kept under the test's ``tmp_path``."""
    return judging(tmp_path / "conformance")
