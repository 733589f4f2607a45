"""Running a scenario against a server, through its control API: take each step at its simulated time, move the
clock (manual: through every deadline that concerns an observed machine or the run's own events; real: wait and
poll), record what every observed machine went through, and check the expectations on the resulting timeline.

What a run records of a cloud's machines is that cloud's observer (``Cloud.scenario_observer``): the runner reads the
server's journal (``GET /v1/journal``) and hands each observer the entries since its last observation, so that it
reads again only what they say changed. The journal also gives each event's history for the timeline, and tells
which events the run's waves scheduled."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from forewarn.cloud import registered
from forewarn.core.times import format_optional_time, format_time, parse_optional_time, parse_time
from forewarn.core.words import counted
from forewarn.scenario_steps import ScenarioObserver, StepRefused, flat
from forewarn.scenarios.actions import WAVE, steps
from forewarn.scenarios.api import Api, ApiError, Unreachable
from forewarn.scenarios.expect import evaluate
from forewarn.scenarios.lines import describe_step
from forewarn.scenarios.spec import Scenario, Step, format_offset, time_value

DEFAULT_MAX_MOVES = 1000  # and MOVES_PER_STEP more for each step of the scenario
MOVES_PER_STEP = 10
DEFAULT_POLL = 0.1  # seconds of wall time between polls on a real clock
DEFAULT_TIMEOUT = 600.0  # wall seconds a real-clock run may wait, after its last step, for things to settle
JOURNAL_PAGE = 32  # journal entries read after each move; more new ones than this: 8 times more, up to JOURNAL_MAX
JOURNAL_MAX = 10_000  # the most GET /v1/journal returns; more new entries than this: read everything again


class RunAborted(Exception):
    """The run could not go on (a step failed unexpectedly, the server went away, ...)."""


class RunInterrupted(BaseException):
    """A signal asked the run to stop (raised by the CLI's SIGINT and SIGTERM handlers): the timeline is kept,
    marked partial.

    A BaseException, as KeyboardInterrupt is: a handler's exception surfaces in whatever code runs when the signal
    lands, and libraries catch Exception there (click's ``isatty`` did, and a Ctrl-C was lost)."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


class StopRequest:
    """The signal that asked the run to stop, kept as well as raised: an exception raised in a signal handler is
    still lost where the signal lands in a finalizer (``__del__``, a weakref callback), so the runner also checks
    this before every clock move and step."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def request(self, signal_name: str) -> None:
        self.signal_name = signal_name
        raise RunInterrupted(signal_name)

    def check(self) -> None:
        if self.signal_name is not None:
            raise RunInterrupted(self.signal_name)


@dataclass
class RunOptions:
    mode: str = "manual"  # manual: the runner moves the clock; real: it waits and polls; auto: the server's
    speed: float = 1.0
    poll: float = DEFAULT_POLL
    max_moves: int | None = None  # None: DEFAULT_MAX_MOVES + MOVES_PER_STEP per step
    timeout: float = DEFAULT_TIMEOUT
    set_start: bool = True  # on a manual clock, move a server that is behind to the scenario's start time
    every_deadline: bool = False  # stop at every deadline of the server, not only at those that concern the run
    stop: StopRequest = field(default_factory=StopRequest)  # the CLI's signal handlers request through it


@dataclass
class Progress:
    """Where a run is, for a progress line."""

    steps_done: int
    steps: int
    offset: float  # simulated seconds from the start
    moves: int
    phase: str  # "steps", "settling" or "done"


class Runner:
    def __init__(
        self,
        scenario: Scenario,
        api: Api,
        options: RunOptions | None = None,
        emit: Callable[[str], None] | None = None,
        server_info: dict | None = None,
        progress: Callable[[Progress], None] | None = None,
    ):
        self.scenario = scenario
        self.api = api
        self.options = options or RunOptions()
        if self.options.max_moves is None:
            self.options.max_moves = DEFAULT_MAX_MOVES + MOVES_PER_STEP * len(scenario.steps)
        self.max_moves: int = self.options.max_moves
        self.emit = emit or (lambda line: None)
        self.progress = progress or (lambda state: None)
        self.server_info = server_info or {}
        self.steps_done = 0
        self.phase = "steps"
        self.steps = steps()
        # What the run itself created: what it waits for after its last step, and nothing else. By cloud: the
        # events its steps and waves created, the instances its steps acted on (a Spot interruption, a preemption).
        self.created: dict[str, set[str]] = {name: set() for name in self.steps.clouds}
        self.targets: dict[str, set[str]] = {name: set() for name in self.steps.clouds}
        self.created_waves: set[str] = set()
        self.wave_scheduled = {
            cloud_steps.scheduled_by_wave: name
            for name, cloud_steps in self.steps.clouds.items()
            if cloud_steps.scheduled_by_wave
        }
        # What the run records of each cloud's machines, by cloud name.
        self.observers: Mapping[str, ScenarioObserver] = {
            cloud.name: observer for cloud in registered() if (observer := cloud.scenario_observer()) is not None
        }
        # The change feed (the server's journal) and what it says.
        self.journal_seq = 0
        self.journal_complete = True  # every entry since the start was read (else histories are read per event)
        self.event_journal: dict[str, list[dict]] = {}
        self.waves_running = False
        # The server's time when the run began and at its last reading: None until _begin reads the clock.
        self.start: datetime | None = None
        self.now: datetime | None = None
        self.next_deadline: datetime | None = None
        self.moves = 0
        self.actions: list[dict] = []
        self.step_checks: list[dict] = []
        self.produced: dict[str, list[str]] = {}
        self.warnings: list[str] = []

    @property
    def run_start(self) -> datetime:
        """``start``, for the code that runs after _begin (steps, moves, checks)."""
        if self.start is None:
            raise RuntimeError("the run has not begun")
        return self.start

    @property
    def clock_now(self) -> datetime:
        """``now``, for the code that runs after the first reading of the server's clock."""
        if self.now is None:
            raise RuntimeError("the server's clock has not been read")
        return self.now

    # ------------------------------------------------------------------------------------------------ the run
    def run(self) -> dict:
        aborted = None
        settled = False
        interrupted = None
        try:
            self._begin()
            for step in self.scenario.steps:
                self.options.stop.check()
                self._advance_to(self.run_start + step.time)
                self._perform(step)
                self.observe()
                self.steps_done += 1
                self._report()
            self.phase = "settling"
            settled = self._settle()
        except (RunAborted, ApiError, Unreachable) as error:
            aborted = str(error)
        except RunInterrupted as signal:
            interrupted = signal.signal_name
            where = format_offset((self.now - self.start).total_seconds()) if self.start and self.now else "the start"
            aborted = (
                f"interrupted by {interrupted} at {where}, after {self.steps_done} of "
                f"{counted(len(self.scenario.steps), 'step')}; the timeline is partial"
            )
        self.phase = "done"
        self._report()
        timeline = self._timeline(settled, aborted)
        timeline["partial"] = interrupted is not None
        timeline["interrupted"] = interrupted
        return timeline

    def _report(self) -> None:
        offset = (self.now - self.start).total_seconds() if self.start and self.now else 0.0
        self.progress(Progress(self.steps_done, len(self.scenario.steps), offset, self.moves, self.phase))

    def _begin(self) -> None:
        clock = self.api.get("/v1/clock")
        mode = clock["mode"]
        if self.options.mode == "auto":  # a given server, neither --manual nor --speed: follow its clock
            self.options.mode = mode
            self.options.speed = clock["speed"]
        if mode != self.options.mode:
            raise RunAborted(
                f"the server's clock is {mode}, but the run was asked for a {self.options.mode} clock"
                + (
                    " (start the server with --clock manual, or run with --speed)"
                    if mode == "real"
                    else " (run with --manual)"
                )
            )
        if mode == "real" and abs(clock["speed"] - self.options.speed) > 1e-9:
            self.warnings.append(f"the server's clock runs at x{clock['speed']:g}, not x{self.options.speed:g}")
            self.options.speed = clock["speed"]
        self._check_fleet()
        if not self.server_info.get("private_server", True) and self.scenario.server_args():
            self.warnings.append(
                "the scenario asks its private server for "
                + " ".join(self.scenario.server_args())
                + "; this server keeps its own settings, so timings may differ"
            )
        now = parse_time(clock["now"])
        start = self.scenario.start
        if start is not None and mode == "manual" and self.options.set_start and now < start:
            clock = self.api.post("/v1/clock/set", {"to": format_time(start)})
            now = parse_time(clock["now"])
        elif start is not None and abs(now - start) > timedelta(seconds=10 * max(1.0, self.options.speed)):
            self.warnings.append(
                f"the scenario starts at {format_time(start)}; this server's clock is at {format_time(now)}, so "
                "the run starts there (absolute times in the scenario may not match)"
            )
        for warning in self.warnings:
            self.emit(f"warning: {warning}")
        self.start = now
        latest = self.api.get("/v1/journal", limit=1)
        self.journal_seq = latest[-1]["seq"] if latest else 0
        self.waves_running = any(wave["status"] == "running" for wave in self.api.get("/v1/waves"))
        self._read_clock(clock)
        self.observe(clock, everything=True)

    def _check_fleet(self) -> None:
        """The server's fleet has the scenario's machines; each observer learns which of them are its cloud's."""
        machines: dict[str, list[str]] = {}
        for machine in self.api.get("/v1/fleet/machines"):
            machines.setdefault(machine["cloud"], []).append(machine["name"])
        known = {name for names in machines.values() for name in names}
        missing = [name for name in (*self.scenario.vms, *self.scenario.instances) if name not in known]
        if missing:
            raise RunAborted(
                f"the server's fleet has no {', '.join(missing)}: it is not the scenario's fleet "
                "(run without --server to start a private server with it)"
            )
        for cloud, observer in self.observers.items():
            observer.begin(self.api, machines.get(cloud, []), self.scenario.observe, self.scenario.observe_all)

    def _read_clock(self, clock: dict) -> None:
        self.now = parse_time(clock["now"])
        self.next_deadline = parse_optional_time(clock.get("next_deadline"))

    # ---------------------------------------------------------------------------------------------- the clock
    def _advance_to(self, target: datetime) -> None:
        if self.options.mode == "manual":
            while self.next_deadline is not None and self.next_deadline <= target:
                self._step_toward(target)
            if self.clock_now < target:  # no deadline on the way: nothing to read (the journal keeps what others did)
                self._move("/v1/clock/set", {"to": format_optional_time(target)}, observe=False)
        else:
            while self.clock_now < target:
                remaining = (target - self.clock_now).total_seconds() / self.options.speed
                time.sleep(max(0.0, min(self.options.poll, remaining)))
                self.observe()

    def _step_toward(self, limit: datetime | None) -> None:
        """One move of a manual clock, no further than ``limit`` (None: no further than the next deadline).

        Deadlines that concern neither an observed machine nor, once the steps are done, the run's own events are
        passed in one move (``clock/set`` runs every deadline up to the time it is given, in order): they change
        nothing the run records. Where that cannot be told, the clock goes deadline by deadline."""
        known, quiet_until = self._quiet_until()
        if limit is not None and known and not self.options.every_deadline:
            target = limit if quiet_until is None else min(limit, quiet_until)
            if self.next_deadline is not None and self.next_deadline < target and target > self.clock_now:
                self._move("/v1/clock/set", {"to": format_optional_time(target)})
                return
        self._move("/v1/clock/next", {})

    def _quiet_until(self) -> tuple[bool, datetime | None]:
        """(known, until): the earliest time a deadline can change what an observer records (until None: none
        can); known False when that cannot be told (an observer cannot tell, a wave may schedule anywhere)."""
        if self.waves_running:
            return False, None
        times: list[datetime] = []
        for observer in self.observers.values():
            known, until = observer.quiet_until()
            if not known:
                return False, None
            if until is not None:
                times.append(until)
        return True, min(times) if times else None

    def _move(self, path: str, body: dict, observe: bool = True) -> None:
        self.options.stop.check()
        self.moves += 1
        if self.moves > self.max_moves:
            raise RunAborted(f"more than {counted(self.max_moves, 'clock move')} (--max-moves)")
        clock = self.api.post(path, body)
        if observe:
            self.observe(clock)
        else:
            self._read_clock(clock)
        if self.moves % 50 == 0:
            self._report()

    def _settle(self) -> bool:
        """After the last step: move on until nothing the run created is live: its events, its waves, the impacts
        of its events on VMs and instances, and the Spot actions it asked for. Whatever else a shared server holds
        is not waited for, and the clock goes no further than the run's own next deadline."""
        if self.options.mode == "manual":
            while True:
                settled, until = self._pending()
                if settled:
                    return True
                if self.next_deadline is None:
                    return False
                self._step_toward(until)
        deadline = time.monotonic() + self.options.timeout
        while not self._pending()[0]:
            if time.monotonic() > deadline:
                return False
            time.sleep(self.options.poll)
            self.observe()
        # The clock kept moving between the last reading and the check that found everything over: read the final
        # documents too, or the last change (an event leaving) could go unrecorded.
        self.observe()
        return True

    def _pending(self) -> tuple[bool, datetime | None]:
        """(settled, until): whether everything the run created is over, and if not, the earliest time it can
        change (None when that cannot be told: step deadline by deadline)."""
        times: list[datetime | None] = []
        for name, cloud_steps in self.steps.clouds.items():
            if self.created[name] or self.targets[name]:
                times += cloud_steps.pending(self.api, self.created[name], self.targets[name], self.clock_now)
        if self.created_waves and any(
            wave["wave_id"] in self.created_waves and wave["status"] == "running" for wave in self.api.get("/v1/waves")
        ):
            times.append(None)
        if not times:
            return True, None
        known = [moment for moment in times if moment is not None]
        return False, None if len(known) < len(times) else min(known)

    # ---------------------------------------------------------------------------------------------- observing
    def observe(self, clock: dict | None = None, everything: bool = False) -> None:
        """Read what changed (each observer: what the journal's entries since the last reading name); record it."""
        self.options.stop.check()
        if clock is None:
            clock = self.api.get("/v1/clock")  # on a real clock, this brings the server up to date first
        complete = everything or self._read_journal()
        self._read_clock(clock)
        for observer in self.observers.values():  # everything: at the start, or when the journal moved on too far
            observer.observe(self.api, self, everything or not complete)

    def _read_journal(self) -> bool:
        """Hand the journal's entries since the last reading to the observers; False when more changed than the
        journal returns at once (then everything is read again)."""
        limit = JOURNAL_PAGE
        entries = self.api.get("/v1/journal", limit=limit)
        while len(entries) == limit and entries[0]["seq"] > self.journal_seq and limit < JOURNAL_MAX:
            limit = min(limit * 8, JOURNAL_MAX)  # the journal is read from its end: ask for more until it reaches back
            entries = self.api.get("/v1/journal", limit=limit)
        complete = not (len(entries) == limit and entries[0]["seq"] > self.journal_seq)
        new = [entry for entry in entries if entry["seq"] > self.journal_seq]
        if new:
            self.journal_seq = new[-1]["seq"]
        waves = False
        for entry in new:
            what = entry["what"]
            if entry.get("event_id"):
                self.event_journal.setdefault(entry["event_id"], []).append(
                    {key: value for key, value in entry.items() if key not in ("seq", "event_id")}
                )
                wave_cloud = self.wave_scheduled.get(what)
                if wave_cloud and str(entry.get("reason", "")).split(",")[0] in self.created_waves:
                    self.created[wave_cloud].add(entry["event_id"])  # scheduled by one of the run's waves
            for observer in self.observers.values():
                observer.note(entry)
            waves = waves or what.startswith("wave ")
        if waves:
            self.waves_running = any(wave["status"] == "running" for wave in self.api.get("/v1/waves"))
        if not complete:
            self.journal_complete = False
        return complete

    def stamp(self) -> dict:
        now = self.clock_now
        return {
            "time": format_time(now),
            "offset": (now - self.start).total_seconds() if self.start else 0.0,
        }

    def line(self, who: str, mark: str, text: str) -> None:
        now = self.clock_now
        offset = format_offset((now - self.start).total_seconds()) if self.start else "+00:00:00"
        self.emit(f"{offset:>13}  {now.strftime('%Y-%m-%d %H:%M:%S')}  {who:<20} {mark:<4} {text}")

    # ------------------------------------------------------------------------------------------------ actions
    def _perform(self, step: Step) -> None:
        entry: dict[str, Any] = {"step": step.index, "id": step.id, "do": step.do, "as": step.actor, **self.stamp()}
        try:
            params = self._resolve(step.params, step)
            entry["request"] = params
            result, ids = self.steps.actions[step.do].run(self.api, step, params)
        except StepRefused as error:
            raise RunAborted(str(error)) from None
        except ApiError as error:
            entry["error"] = {"status": error.status, "code": error.code, "message": error.message}
            self.actions.append(entry)
            self.line(f"> {step.do}", "", f"{describe_step(step)} failed: {error.message} ({error.code})")
            if step.fails is None:
                raise RunAborted(f"steps[{step.index}] ({step.do}) failed: {error}") from None
            passed = step.fails in (error.code, str(error.status))
            self.step_checks.append(
                {
                    "what": f"steps[{step.index}] {step.do} fails with {step.fails}",
                    "passed": passed,
                    "detail": f"failed with {error.code}: {error.message}",
                }
            )
            return
        entry["result"] = result
        entry["produced"] = ids
        self.actions.append(entry)
        self._note_created(step, params, result, ids)
        if step.id:
            self.produced[step.id] = ids
        self.line(f"> {step.do}", "", f"{describe_step(step)}" + (f" -> {', '.join(ids)}" if ids else ""))
        if step.fails is not None:
            self.step_checks.append(
                {
                    "what": f"steps[{step.index}] {step.do} fails with {step.fails}",
                    "passed": False,
                    "detail": "it succeeded",
                }
            )

    def _note_created(self, step: Step, params: dict, result: Any, ids: list[str]) -> None:
        """Remember what the step created (what the run waits for at its end): the events its answer holds that
        were created since the run began, its wave, the instances whose Spot interruption it asked for."""
        if step.do == WAVE:
            self.created_waves.update(ids)
            self.waves_running = True
            return
        cloud = self.steps.cloud_of[step.do]
        if cloud is None:
            return
        if self.steps.actions[step.do].targets_instances:
            self.targets[cloud].update(flat(params.get("instances")))
        events = result if isinstance(result, list) else result.get("events") if isinstance(result, dict) else None
        for event in events or []:
            if not isinstance(event, dict) or "event_id" not in event:
                continue
            created = parse_optional_time(event.get("created_at"))
            if created is not None and created >= self.run_start:
                self.created[cloud].add(event["event_id"])

    def _resolve(self, value: Any, step: Step, key: str | None = None) -> Any:
        if isinstance(value, str) and value.startswith("$"):
            name = value[1:]
            if name not in self.produced:
                raise RunAborted(
                    f"steps[{step.index}]: {value} has not run (left out in the {self.scenario.timing} "
                    "timing, or it failed)"
                )
            return list(self.produced[name])
        if isinstance(value, str) and key in self.steps.time_keys:
            return format_time(time_value(value, self.run_start))
        if isinstance(value, dict):
            return {k: self._resolve(v, step, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self._resolve(item, step, key) for item in value]
        return value

    # ----------------------------------------------------------------------------------------------- timeline
    def _timeline(self, settled: bool, aborted: str | None) -> dict:
        scenario = self.scenario
        start = self.start
        if start is not None:
            try:
                self._read_journal()  # the journal's last entries, for the events' histories
                journal = self.event_journal if self.journal_complete else None
                for observer in self.observers.values():
                    observer.finish(self.api, start, journal)
            except (ApiError, Unreachable) as error:  # the timeline is still written
                aborted = aborted or f"could not read the final state: {error}"
            except RunInterrupted:  # asked again to stop: what was gathered is written
                aborted = aborted or "interrupted while reading the final state; the timeline is partial"
        timeline = {
            "scenario": scenario.name,
            "title": scenario.title,
            "file": scenario.path,
            "timing": scenario.timing,
            "clock": self.options.mode,
            "speed": self.options.speed if self.options.mode == "real" else None,
            **self.server_info,
            "start": format_optional_time(self.start),
            "end": format_optional_time(self.now),
            "moves": self.moves,
            "warnings": self.warnings,
            "actions": self.actions,
            **{key: value for observer in self.observers.values() for key, value in observer.timeline().items()},
            "settled": settled,
            "aborted": aborted,
        }
        results = list(self.step_checks)
        if self.start is not None and aborted is None:
            event_keys = [key for observer in self.observers.values() for key in observer.event_keys]
            results += evaluate(scenario, timeline, event_keys, self._tolerance())
            if not settled:
                results.append(
                    {
                        "what": "the run settles (no live event, no VM in an impact)",
                        "passed": False,
                        "detail": "deadlines ran out or the timeout passed with events still live",
                    }
                )
        timeline["expectations"] = results
        timeline["passed"] = aborted is None and all(r["passed"] for r in results)
        return timeline

    def _tolerance(self) -> float:
        """How far a recorded time may be from an expected one: exact on a manual clock; on a real clock, a few
        polls of simulated time."""
        if self.options.mode == "manual":
            return 0.0
        return 3 * self.options.poll * self.options.speed + 1.0


def run_scenario(
    scenario: Scenario,
    server: str | None = None,
    ec2_url: str | None = None,
    options: RunOptions | None = None,
    seed: str | None = None,
    emit: Callable[[str], None] | None = None,
    control_token: str | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> dict:
    """Run a resolved scenario: on ``server`` (its control API URL, with its ``control_token`` if it has one) when
    given, otherwise on a private server started for the run (in-memory database, the scenario's fleet, ``seed`` for
    reproducible EventIds)."""
    from forewarn.scenarios.server import DEFAULT_SEED, PrivateServer

    options = options or RunOptions()
    if server is not None:
        api = Api(server, ec2_url, token=control_token)
        try:
            info: dict[str, Any] = {"server": server, "ec2_url": ec2_url, "private_server": False, "seed": None}
            return Runner(scenario, api, options, emit, info, progress).run()
        finally:
            api.close()
    seed = seed or DEFAULT_SEED
    if options.mode == "auto":
        options.mode = "manual"
    with PrivateServer(scenario, clock=options.mode, speed=options.speed, seed=seed) as private:
        api = Api(private.control, private.ec2)
        try:
            info = {
                "server": private.control,
                "ec2_url": private.ec2,
                "private_server": True,
                "seed": seed,
                "server_options": scenario.server_args(),
            }
            return Runner(scenario, api, options, emit, info, progress).run()
        finally:
            api.close()
