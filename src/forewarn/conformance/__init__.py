"""The conformance battery: run a user's unmodified maintenance handler through each cloud's cases, observe its
metadata calls, its process and the user's probes, and grade it (docs/conformance.md).

Names no cloud: each cloud gives its cases and observer through ``Cloud.conformance()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from forewarn.conformance_cases import Case, CaseResult, CloudCases

__all__ = ["battery", "run"]


class ShipsCases(Protocol):
    """The part of ``forewarn.cloud.Cloud`` the battery uses. The registry is read directly: ``forewarn.cloud``
    names this package's types in its protocol, so importing it from here would make the two packages a cycle."""

    @property
    def name(self) -> str: ...

    def conformance(self) -> CloudCases | None: ...


def registered() -> tuple[ShipsCases, ...]:
    from forewarn.registry import clouds

    return cast("tuple[ShipsCases, ...]", clouds())


def battery(
    clouds: Sequence[str] | None = None, timing: str = "fast", files: Sequence[str] = ()
) -> list[tuple[Case, CloudCases]]:
    """The cases of the named clouds (all that ship cases when None), each with its cloud's observer; ``files``:
    the user's own case files, as ``CLOUD:PATH`` (the cloud whose observer reads them)."""
    from forewarn.conformance.cases import CaseFileError, load_cases, user_file

    shipped = {cloud.name: found for cloud in registered() if (found := cloud.conformance()) is not None}
    unknown = [name for name in clouds or () if name not in shipped]
    if unknown:
        raise CaseFileError(f"no cases for cloud {unknown[0]!r}; clouds with cases: {', '.join(shipped)}")
    cases = []
    for name in clouds or list(shipped):
        for file in shipped[name].files:
            cases += [(case, shipped[name]) for case in load_cases(file, name, timing, shipped[name].observer.checks())]
    for given in files:
        name, _, path = given.rpartition(":")
        if name not in shipped:
            raise CaseFileError(f"{given}: say whose cases these are, as CLOUD:PATH ({', '.join(shipped)})")
        checks = shipped[name].observer.checks()
        cases += [(case, shipped[name]) for case in load_cases(user_file(path), name, timing, checks)]
    return cases


def run(
    command: Sequence[str],
    *,
    clouds: Sequence[str] | None = None,
    cases: Sequence[str] | None = None,
    timing: str = "fast",
    drained: str | None = None,
    restored: str | None = None,
    machines: int | None = None,
    files: Sequence[str] = (),
    logs: str | Path | None = None,
    progress: Any = None,
) -> list[CaseResult]:
    """Run ``command`` (the handler; ``{metadata_url}``, ``{machine}`` and ``{state_dir}`` in it are replaced)
    through the battery on a private server; the graded cases."""
    from forewarn.conformance.cases import select
    from forewarn.conformance.runner import RunOptions, run_cases
    from forewarn.testing import Forewarn

    chosen = battery(clouds, timing, files)
    picked = [entry for entry in chosen if entry[0] in select([case for case, _ in chosen], cases)]
    options = RunOptions(
        list(command),
        drained,
        restored,
        timing,
        machines,
        Path(logs) if logs else None,
        progress or (lambda line: None),
    )
    with Forewarn() as server:
        return run_cases(server, picked, options)
