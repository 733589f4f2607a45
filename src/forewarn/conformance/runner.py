"""Running a battery: one private server (``forewarn.testing.Forewarn``, which starts ``forewarn serve`` through
``scenarios.server``) on the manual clock, reset before each case; for each case, the handler as each of its
machines behind an observing proxy, the case's steps, the clock moved with wall time (so a handler sees a clock
that runs, and a NotBefore that comes), and the user's probes. A client of the server: it never imports the
engine."""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from forewarn.conformance.grading import grade_case
from forewarn.conformance.processes import HandlerProcess, port_names, probe
from forewarn.conformance.proxy import ObservingProxy
from forewarn.conformance_cases import Case, CaseResult, CloudCases, Observation
from forewarn.core.words import counted
from forewarn.scenarios.testnet import free_ports

TICK = 0.1  # seconds between two clock moves
PROBE_EVERY = 0.25
STATE_EVERY = 0.5
WARM_UP = 10.0  # the longest the runner waits for each handler's first metadata call
REFUSED = object()  # what a refused step's call answered
CLOCK_PLACEHOLDER = re.compile(r"\{clock\+([^{}]+)\}")  # {clock+61m}: the simulated time then, plus 61 minutes


@dataclass
class RunOptions:
    command: Sequence[str]
    drained: str | None = None
    restored: str | None = None
    timing: str = "fast"
    machines: int | None = None  # the most machines a case may run the handler on
    logs: Path | None = None
    progress: Callable[[str], None] = field(default=lambda line: None)
    sandbox: bool = False  # run each machine's handler in a sandbox of the machine (root: docs/sandbox.md)
    stop: threading.Event = field(default_factory=threading.Event)  # set: the cases under way end, no other starts


class RunStopped(Exception):
    """The run was stopped (``RunOptions.stop``) in the middle of a case: its handlers and proxies are stopped."""


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso_time(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def with_times(value: Any, now: datetime) -> Any:
    """``value`` (a step's body) with each string ``{clock+DURATION}`` replaced by the time ``now`` plus DURATION,
    for a call that takes an absolute time (a reschedule's new start)."""
    from forewarn.core.durations import parse_duration

    if isinstance(value, dict):
        return {key: with_times(item, now) for key, item in value.items()}
    if isinstance(value, list):
        return [with_times(item, now) for item in value]
    if isinstance(value, str):
        return CLOCK_PLACEHOLDER.sub(lambda found: iso_time(now + parse_duration(found.group(1))), value)
    return value


def form_post(url: str, fields: dict) -> str:
    """A form POST to one of the server's other ports (a cloud's own API, for what the control API has no route
    for); its answer's text. An answer other than 2xx raises."""
    import urllib.parse
    import urllib.request

    data = urllib.parse.urlencode({key: str(value) for key, value in fields.items()}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data, method="POST"), timeout=30) as answer:
        return answer.read().decode()


def json_post(url: str, target: str, body: Any) -> Any:
    """A call of an API action over the AWS JSON protocol (``X-Amz-Target``: EventBridge's PutRule, say) on one of
    the server's other ports; its answer's JSON. An answer other than 2xx raises."""
    import json
    import urllib.request

    headers = {"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1"}
    request = urllib.request.Request(url, json.dumps(body or {}).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"{}")


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
        self.jumps: list[tuple[float, float]] = []  # (when, the clock's lead over wall time from then on)

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def lead(self) -> float:
        return self.jumps[-1][1] if self.jumps else 0.0

    def seconds_since_start(self, iso: str) -> float:
        """When the simulated time ``iso`` came, in seconds of the case's wall time: a time the clock jumped over
        came at the jump."""
        simulated = (parse_time(iso) - self.sim_start).total_seconds()
        wall, lead_before = simulated, 0.0
        for at, lead in self.jumps:
            if simulated >= at + lead:
                wall = simulated - lead
            elif simulated >= at + lead_before:
                wall = at
            lead_before = lead
        return wall

    def run(self) -> Observation:
        self.server.reset()
        self.sim_start = parse_time(self.server.now)
        self.began = time.monotonic()
        try:
            for step in self.case.setup:
                self.request(step)
            self.start_handlers()
            while not self.finished():
                if self.options.stop.is_set():
                    raise RunStopped(self.case.name)
                self.tick()
                time.sleep(TICK)
            self.obs.events = self.read_states()
        finally:
            for handler in self.handlers.values():
                handler.stop()
            for machine, proxy in self.proxies.items():
                if self.options.sandbox:
                    self.server.sandbox().down(machine)
                proxy.stop()
        self.obs.calls = sorted((c for p in self.proxies.values() for c in p.taken()), key=lambda call: call.at)
        self.obs.approvals = self.cloud.observer.approvals(self.obs.calls)
        self.obs.wall = self.elapsed()
        return self.obs

    def sandboxed(self, machine: str, proxy: ObservingProxy) -> list[str]:
        """What runs a command in ``machine``'s sandbox, whose metadata address leads to ``proxy``."""
        host, port = proxy.server.server_address[:2]
        vm = self.server.sandbox().up(machine, relay_to=(str(host), int(port)))
        return vm.command([])

    def start_handlers(self) -> None:
        names = port_names(self.options.command)
        ports = dict(zip(names, free_ports(len(names)))) if names else {}
        for machine in self.case.machines:
            proxy = ObservingProxy(machine, self.endpoint_of(machine), self.began, self.probe_drained)
            proxy.start()
            self.proxies[machine] = proxy
            state_dir = self.state_dir(machine)
            shutil.rmtree(state_dir, ignore_errors=True)  # a --logs directory used before: the case starts clean
            state_dir.mkdir(parents=True)
            log = self.logs / f"{machine}.log"
            inside = self.sandboxed(machine, proxy) if self.options.sandbox else ()
            handler = HandlerProcess(
                self.options.command, machine, proxy.url, log, state_dir, inside, ports, self.case.placeholders
            )
            self.handlers[machine] = handler
            handler.start()
        deadline = time.monotonic() + WARM_UP
        while time.monotonic() < deadline and not all(proxy.taken() for proxy in self.proxies.values()):
            if self.options.stop.is_set():
                raise RunStopped(self.case.name)
            self.move_clock()
            time.sleep(TICK)
        silent = [machine for machine, proxy in self.proxies.items() if not proxy.taken()]
        if silent:
            self.obs.notes.append(f"no metadata call within {WARM_UP:g} s of starting: {', '.join(silent)}")
        self.steps_from = self.elapsed()

    def endpoint_of(self, machine: str) -> str:
        """What the machine's observing proxy leads to: its metadata endpoint, or the server's port the case names
        (``endpoint: ec2``, where a queue-mode handler reads SQS and calls Auto Scaling)."""
        if self.case.endpoint is None:
            return str(self.server.metadata_url(machine))
        return str(getattr(self.server, f"{self.case.endpoint}_url"))

    def state_dir(self, machine: str) -> Path:
        """The machine's own directory for this case (processes.py): beside its log, empty when the case starts."""
        return self.logs / f"{machine}.state"

    def clock(self) -> datetime:
        return self.sim_start + timedelta(seconds=self.elapsed() + self.lead())

    def move_clock(self) -> None:
        self.server.set_clock(iso_time(self.clock()))

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
        if step.advance is not None:
            self.jumps.append((self.elapsed(), self.lead() + step.advance))
            self.move_clock()
            self.obs.notes.append(f"the clock jumped {step.advance:g} s ahead at {self.elapsed():.1f} s")
        elif step.drop is not None:
            for machine in [step.machine] if step.machine else self.case.machines:
                self.proxies[machine].drop(step.drop)
            self.obs.notes.append(f"metadata connections dropped for {step.drop:g} s at {self.elapsed():.1f} s")
        elif step.throttle is not None or step.expire is not None:
            self.refuse(step)
        elif step.kill is not None:
            machine = step.machine or self.case.machines[0]
            self.handlers[machine].signal(step.kill)
            self.obs.kills.append((machine, self.elapsed()))
            self.restarts.append((self.elapsed() + (step.restart or 0.0), machine))
        else:
            self.call(step)

    def refuse(self, step: Any) -> None:
        for machine in [step.machine] if step.machine else self.case.machines:
            if step.throttle is not None:
                self.proxies[machine].throttle(step.throttle)
            else:
                self.proxies[machine].expire(step.expire)
        what = f"answered 429 for {step.throttle:g} s" if step.throttle is not None else f"{step.expire} expired"
        self.obs.notes.append(f"metadata calls {what} at {self.elapsed():.1f} s")

    def call(self, step: Any) -> None:
        method, path = str(step.call).split(maxsplit=1)
        if "{event}" in path:
            if not self.obs.event_ids:
                self.obs.notes.append(f"{step.call}: the case has no event yet")
                return
            path = path.replace("{event}", self.obs.event_ids[0])
        answer = self.request(step, path)
        if answer is REFUSED:
            return
        self.obs.steps_done.append((self.elapsed(), f"{method} {path}", answer))
        for event_id in self.cloud.observer.event_ids(answer):
            self.obs.event_ids.append(event_id)
            self.obs.appeared[event_id] = self.elapsed()
        if path.rstrip("/").endswith("/cancel"):
            self.obs.cancels.append(self.elapsed())

    def request(self, step: Any, path: str | None = None) -> Any:
        """The step's call made (to the control API, or to another port of the server as a form POST or a JSON
        call of ``target``), its answer; REFUSED when it was refused, which is noted: part of what happened."""
        method, given_path = str(step.call).split(maxsplit=1)
        path = given_path if path is None else path
        body = with_times(step.body, self.clock())
        try:
            if step.port and step.target:
                return json_post(f"{getattr(self.server, step.port + '_url')}{path}", step.target, body)
            if step.port:
                return form_post(f"{getattr(self.server, step.port + '_url')}{path}", body or {})
            return self.server.call(method, path, body)
        except Exception as error:
            self.obs.notes.append(f"{step.target or step.call} at {self.elapsed():.1f} s was refused: {error}")
            return REFUSED

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


def run_group(
    serve: Sequence[str], entries: Sequence[tuple[int, tuple[Case, CloudCases]]], options: RunOptions, jobs: int
) -> dict[int, CaseResult]:
    """The cases of one group (the same options of ``forewarn serve``), ``jobs`` at a time: each of the ``jobs``
    workers starts a server of its own and takes the next case until none is left; the results by place. Whatever
    ends the wait (Ctrl-C, a worker's error) stops the other workers' cases, whose handlers and servers are stopped
    before it is raised here."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    from forewarn.testing import Forewarn

    pending: queue.SimpleQueue[tuple[int, tuple[Case, CloudCases]]] = queue.SimpleQueue()
    for entry in entries:
        pending.put(entry)

    def worker() -> list[tuple[int, CaseResult]]:
        done: list[tuple[int, CaseResult]] = []
        with Forewarn(args=list(serve)) as server:
            while not options.stop.is_set():
                try:
                    index, entry = pending.get_nowait()
                except queue.Empty:
                    return done
                done += [(index, result) for result in run_cases(server, [entry], options)]
        return done

    width = max(1, min(jobs, len(entries)))
    with ThreadPoolExecutor(width, thread_name_prefix="conformance") as pool:
        workers = [pool.submit(worker) for _ in range(width)]
        try:
            return dict(pair for running in workers for pair in running.result())
        except BaseException:
            options.stop.set()
            raise


def run_cases(server: Any, cases: Sequence[tuple[Case, CloudCases]], options: RunOptions) -> list[CaseResult]:
    results = []
    logs = options.logs or Path(tempfile.mkdtemp(prefix="forewarn-conformance-"))
    for case, cloud in cases:
        if options.machines is not None and len(case.machines) > options.machines:
            results.append(
                skipped(case, f"needs {counted(len(case.machines), 'machine')}; --machines is {options.machines}")
            )
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
