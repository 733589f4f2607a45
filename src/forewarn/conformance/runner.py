"""Running a battery: one private server (``forewarn.testing.Forewarn``, which starts ``forewarn serve`` through
``scenarios.server``) on the manual clock, reset before each case; for each case, the handler as each of its
machines behind an observing proxy, the case's steps, the clock moved with wall time (so a handler sees a clock
that runs, and a NotBefore that comes), and the user's probes. A client of the server: it never imports the
engine."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from forewarn.conformance.grading import grade_case
from forewarn.conformance.processes import HandlerProcess, probe
from forewarn.conformance.proxy import ObservingProxy
from forewarn.conformance_cases import Case, CaseResult, CloudCases, Observation

TICK = 0.1  # seconds between two clock moves
PROBE_EVERY = 0.25
STATE_EVERY = 0.5
WARM_UP = 10.0  # the longest the runner waits for each handler's first metadata call


@dataclass
class RunOptions:
    command: Sequence[str]
    drained: str | None = None
    restored: str | None = None
    timing: str = "fast"
    machines: int | None = None  # the most machines a case may run the handler on
    logs: Path | None = None
    progress: Callable[[str], None] = field(default=lambda line: None)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class CaseRun:
    """One case on a reset server."""

    def __init__(self, server: Any, case: Case, cloud: CloudCases, options: RunOptions, logs: Path):
        self.server, self.case, self.cloud, self.options, self.logs = server, case, cloud, options, logs
        self.obs = Observation(case, cloud.observer, probes=(options.drained is not None, options.restored is not None))
        self.began = 0.0
        self.sim_start = datetime.now()
        self.proxies: dict[str, ObservingProxy] = {}
        self.handlers: dict[str, HandlerProcess] = {}
        self.restarts: list[tuple[float, str]] = []
        self.done_steps: set[int] = set()
        self.last_probe = self.last_state = -1.0
        self.settled_at: float | None = None
        self.steps_from = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def seconds_since_start(self, iso: str) -> float:
        return (parse_time(iso) - self.sim_start).total_seconds()

    def run(self) -> Observation:
        self.server.reset()
        self.sim_start = parse_time(self.server.now)
        self.began = time.monotonic()
        try:
            self.start_handlers()
            while not self.finished():
                self.tick()
                time.sleep(TICK)
            self.obs.events = self.read_states()
        finally:
            for handler in self.handlers.values():
                handler.stop()
            for proxy in self.proxies.values():
                proxy.stop()
        self.obs.calls = sorted((c for p in self.proxies.values() for c in p.taken()), key=lambda call: call.at)
        self.obs.approvals = self.cloud.observer.approvals(self.obs.calls)
        self.obs.wall = self.elapsed()
        return self.obs

    def start_handlers(self) -> None:
        for machine in self.case.machines:
            proxy = ObservingProxy(machine, self.server.metadata_url(machine), self.began, self.probe_drained)
            proxy.start()
            self.proxies[machine] = proxy
            state_dir = self.state_dir(machine)
            shutil.rmtree(state_dir, ignore_errors=True)  # a --logs directory used before: the case starts clean
            state_dir.mkdir(parents=True)
            log = self.logs / f"{machine}.log"
            handler = HandlerProcess(self.options.command, machine, proxy.url, log, state_dir)
            self.handlers[machine] = handler
            handler.start()
        deadline = time.monotonic() + WARM_UP
        while time.monotonic() < deadline and not all(proxy.taken() for proxy in self.proxies.values()):
            self.move_clock()
            time.sleep(TICK)
        silent = [machine for machine, proxy in self.proxies.items() if not proxy.taken()]
        if silent:
            self.obs.notes.append(f"no metadata call within {WARM_UP:g} s of starting: {', '.join(silent)}")
        self.steps_from = self.elapsed()

    def state_dir(self, machine: str) -> Path:
        """The machine's own directory for this case (processes.py): beside its log, empty when the case starts."""
        return self.logs / f"{machine}.state"

    def move_clock(self) -> None:
        now = self.sim_start + timedelta(seconds=self.elapsed())
        self.server.set_clock(now.isoformat().replace("+00:00", "Z"))

    def tick(self) -> None:
        self.move_clock()
        self.run_due_steps()
        self.restart_killed()
        now = self.elapsed()
        if now - self.last_probe >= PROBE_EVERY:
            self.last_probe = now
            self.run_probes(now)
        for machine, handler in self.handlers.items():
            status = handler.exited()
            if status is not None and not any(m == machine for m, *_ in self.obs.exits):
                self.obs.exits.append((machine, now, status))

    def noticed_at(self) -> float | None:
        seen = self.cloud.observer.seen
        for proxy in self.proxies.values():
            for call in proxy.taken():
                if any(seen(call, event_id) for event_id in self.obs.event_ids):
                    return call.done
        return None

    def run_due_steps(self) -> None:
        for index, step in enumerate(self.case.steps):
            if index in self.done_steps:
                continue
            if step.after == "noticed":
                noticed = self.noticed_at()
                if noticed is None or self.elapsed() < noticed + step.at:
                    continue
            elif self.elapsed() < self.steps_from + step.at:
                continue
            self.done_steps.add(index)
            self.perform(step)

    def perform(self, step: Any) -> None:
        if step.kill is not None:
            machine = step.machine or self.case.machines[0]
            self.handlers[machine].signal(step.kill)
            self.obs.kills.append((machine, self.elapsed()))
            self.restarts.append((self.elapsed() + (step.restart or 0.0), machine))
            return
        method, path = str(step.call).split(maxsplit=1)
        if "{event}" in path:
            if not self.obs.event_ids:
                self.obs.notes.append(f"{step.call}: the case has no event yet")
                return
            path = path.replace("{event}", self.obs.event_ids[0])
        try:
            answer = self.server.call(method, path, step.body)
        except Exception as error:  # a refused step is part of what happened: graded, not raised
            self.obs.notes.append(f"{step.call} at {self.elapsed():.1f} s was refused: {error}")
            return
        for event_id in self.cloud.observer.event_ids(answer):
            self.obs.event_ids.append(event_id)
            self.obs.appeared[event_id] = self.elapsed()
        if path.rstrip("/").endswith("/cancel"):
            self.obs.cancels.append(self.elapsed())

    def restart_killed(self) -> None:
        for due in [entry for entry in self.restarts if entry[0] <= self.elapsed()]:
            self.restarts.remove(due)
            self.handlers[due[1]].start()

    def probe_drained(self, approver: str) -> None:
        """Just before an approval goes on: every machine's probe, not only the approver's. The approval lets the
        event go ahead for every VM it names, and a peer's drain done a moment earlier (its agent told the approver)
        must count, though the periodic probes have not run since."""
        if not self.options.drained:
            return
        for machine, proxy in list(self.proxies.items()):
            if probe(self.options.drained, machine, proxy.url, self.state_dir(machine)):
                self.obs.drained.setdefault(machine, []).append(self.elapsed())

    def run_probes(self, now: float) -> None:
        for machine, proxy in self.proxies.items():
            state_dir = self.state_dir(machine)
            if self.options.drained and probe(self.options.drained, machine, proxy.url, state_dir):
                self.obs.drained.setdefault(machine, []).append(now)
            if self.options.restored and probe(self.options.restored, machine, proxy.url, state_dir):
                self.obs.restored.setdefault(machine, []).append(now)

    def read_states(self) -> dict:
        return self.cloud.observer.event_states(self.server, self.obs.event_ids, self.seconds_since_start)

    def finished(self) -> bool:
        now = self.elapsed()
        if now >= self.case.limit:
            self.obs.notes.append(f"stopped at the case's limit, {self.case.limit:g} s")
            return True
        if len(self.done_steps) < len(self.case.steps) or self.restarts or now - self.last_state < STATE_EVERY:
            return False
        self.last_state = now
        if not self.obs.event_ids or not self.cloud.observer.settled(self.read_states(), now):
            self.settled_at = None
            return False
        if self.settled_at is None:
            self.settled_at = now
        return now - self.settled_at >= self.case.settle


def run_cases(server: Any, cases: Sequence[tuple[Case, CloudCases]], options: RunOptions) -> list[CaseResult]:
    results = []
    logs = options.logs or Path(tempfile.mkdtemp(prefix="forewarn-conformance-"))
    for case, cloud in cases:
        if options.machines is not None and len(case.machines) > options.machines:
            results.append(skipped(case, f"needs {len(case.machines)} machines; --machines is {options.machines}"))
            continue
        directory = logs / case.name
        directory.mkdir(parents=True, exist_ok=True)
        options.progress(f"{case.cloud} {case.name} ...")
        observation = CaseRun(server, case, cloud, options, directory).run()
        result = grade_case(observation)
        options.progress(f"{case.cloud} {case.name}: {result.grade} ({result.wall:.1f} s)")
        results.append(result)
    return results


def skipped(case: Case, reason: str) -> CaseResult:
    from forewarn.conformance_cases import NOT_JUDGED, Grade

    return CaseResult(case, NOT_JUDGED, [Grade("run", NOT_JUDGED, reason)], 0.0)
