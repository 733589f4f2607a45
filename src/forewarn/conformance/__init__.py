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
    sandbox: bool = False,
    mode: str = "metadata",
    jobs: int = 1,
) -> list[CaseResult]:
    """Run ``command`` (the handler; ``{metadata_url}``, ``{machine}``, ``{state_dir}`` and ``{port:NAME}`` in it
    are replaced) through the battery on a private server; the graded cases. ``sandbox``: each handler runs in a
    sandbox of its machine, where http://169.254.169.254 is its metadata endpoint (root only: docs/sandbox.md).
    ``mode``: the kind of handler (``metadata``, ``queue``): without ``cases``, the cases of that mode run; named
    cases run whatever their mode. ``jobs``: how many cases run at once, each on a server of its own."""
    import tempfile

    from forewarn.conformance.cases import select
    from forewarn.conformance.runner import RunOptions, run_group

    if sandbox:
        from forewarn.sandbox import SandboxUnavailable, unavailable_reason

        reason = unavailable_reason()
        if reason is not None:
            raise SandboxUnavailable(reason)
    chosen = battery(clouds, timing, files)
    picked = [entry for entry in chosen if entry[0] in select([case for case, _ in chosen], cases)]
    picked = picked if cases else [entry for entry in picked if entry[0].mode == mode]
    if jobs < 1:
        raise ValueError(f"jobs is {jobs}: at least one case must run at a time")
    options = RunOptions(
        list(command),
        drained,
        restored,
        timing,
        machines,
        Path(logs) if logs else Path(tempfile.mkdtemp(prefix="forewarn-conformance-")),
        progress or (lambda line: None),
        sandbox,
    )
    results: dict[int, CaseResult] = {}
    for serve, entries in by_server(picked).items():  # a case with serve options gets a server of its own
        results.update(run_group(serve, entries, options, jobs))
    return [results[index] for index in sorted(results)]


def by_server(
    picked: Sequence[tuple[Case, CloudCases]],
) -> dict[tuple[str, ...], list[tuple[int, tuple[Case, CloudCases]]]]:
    """The cases (with their place in ``picked``) grouped by the options of ``forewarn serve`` they need."""
    groups: dict[tuple[str, ...], list[tuple[int, tuple[Case, CloudCases]]]] = {}
    for index, entry in enumerate(picked):
        groups.setdefault(tuple(entry[0].serve), []).append((index, entry))
    return groups
