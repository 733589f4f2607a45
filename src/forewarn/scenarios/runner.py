"""Running a scenario against a server, through its control API: take each step at its simulated time, move the
clock (manual: through every deadline that concerns an observed VM or the run's own events; real: wait and poll),
record what every observed VM's document was at each incarnation, and check the expectations on the resulting
timeline.

What changed is read from the server's journal (``GET /v1/journal``): after a move, only the documents of the
scopes and the states of the VMs it names are read again, so a step costs the same on a fleet of 5,000 VMs as on
one of five. The journal also gives each event's history for the timeline, and tells which events the run's waves
scheduled."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from forewarn.core.times import format_optional_time, format_time, parse_optional_time, parse_time
from forewarn.scenario_steps import StepRefused, flat
from forewarn.scenarios.actions import WAVE, steps
from forewarn.scenarios.api import Api, ApiError, Unreachable, parse_document
from forewarn.scenarios.expect import evaluate
from forewarn.scenarios.lines import describe_step, document_summary, instance_summary
from forewarn.scenarios.spec import Scenario, Step, format_offset, time_value

DEFAULT_MAX_MOVES = 1000  # and MOVES_PER_STEP more for each step of the scenario
MOVES_PER_STEP = 10
DEFAULT_POLL = 0.1  # seconds of wall time between polls on a real clock
DEFAULT_TIMEOUT = 600.0  # wall seconds a real-clock run may wait, after its last step, for things to settle
JOURNAL_PAGE = 32  # journal entries read after each move; more new ones than this: 8 times more, up to JOURNAL_MAX
JOURNAL_MAX = 10_000  # the most GET /v1/journal returns; more new entries than this: read everything again
MANY_VMS = 20  # more changed observed VMs than this: one read of /v1/vms instead of one per VM


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


EC2_ID = re.compile(r"^i-[0-9a-f]{17}$")


@dataclass
class _Changes:
    """What the journal says changed since the last reading."""

    scopes: set[str] = field(default_factory=set)
    vms: set[str] = field(default_factory=set)
    ec2: bool = False
    gce: bool = False
    waves: bool = False


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
        self.gce_names: set[str] = set()  # the fleet's Compute Engine instances (read at the start)
        self.gce_instances: dict[str, list[dict]] = {}  # observed ones: their snapshots
        self._last_gce: dict[str, dict] = {}
        # The change feed (the server's journal) and what it says.
        self.journal_seq = 0
        self.journal_complete = True  # every entry since the start was read (else histories are read per event)
        self.event_journal: dict[str, list[dict]] = {}
        self.waves_running = False
        self.scope_of: dict[str, str] = {}
        self._last_document: dict[str, dict] = {}
        self._last_row: dict[str, dict] = {}
        self._quiet: tuple[bool, datetime | None] | None = None  # cached _quiet_until(), dropped on any change
        self.azure = [name for name in scenario.observe if name in scenario.vms]
        # EC2 instances by their ids; the scenario's other instances are Compute Engine's (by name).
        self.ec2_watch = [name for name in scenario.observe if name in scenario.instances and EC2_ID.match(name)]
        self.watch_ec2 = bool(self.ec2_watch) or (
            scenario.observe_all and any(EC2_ID.match(name) for name in scenario.instances)
        )
        # The server's time when the run began and at its last reading: None until _begin reads the clock.
        self.start: datetime | None = None
        self.now: datetime | None = None
        self.next_deadline: datetime | None = None
        self.moves = 0
        self.documents: dict[str, list[dict]] = {name: [] for name in self.azure}
        self.vm_states: dict[str, list[dict]] = {name: [] for name in self.azure}
        self.instances: dict[str, list[dict]] = {name: [] for name in self.ec2_watch}
        self._last_text: dict[str, str] = {}
        self._last_state: dict[str, tuple] = {}
        self._last_instance: dict[str, dict] = {}
        self._instance_rows: list[dict] = []
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
                f"{len(self.scenario.steps)} steps; the timeline is partial"
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
        fleet = self.api.get("/v1/fleet")
        self.scope_of = {vm["name"]: vm["scope"] for vm in fleet["vms"]}
        known = set(self.scope_of)
        missing = [name for name in self.scenario.vms if name not in known]
        if self.scenario.instances:
            known_instances = {machine["name"] for machine in self.api.get("/v1/fleet/machines")}
            missing += [name for name in self.scenario.instances if name not in known_instances]
            self.gce_names = {i["name"] for i in self.api.get("/v1/gce/instances")}
            self.gce_instances = {name: [] for name in self.scenario.observe if name in self.gce_names}
            if self.scenario.observe_all:
                self.gce_instances = {name: [] for name in self.gce_names}
        if missing:
            raise RunAborted(
                f"the server's fleet has no {', '.join(missing)}: it is not the scenario's fleet "
                "(run without --server to start a private server with it)"
            )

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

        Deadlines that concern neither an observed VM nor, once the steps are done, the run's own events are
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
        """(known, until): the earliest time a deadline can change an observed document or VM state (until None:
        none can); known False when that cannot be told (an observed event is Started and may have extra impacts,
        a wave may schedule anywhere, EC2 instances are watched)."""
        if self._quiet is not None:
            return self._quiet
        if self.watch_ec2 or self.waves_running or self.gce_instances:
            self._quiet = (False, None)
            return self._quiet
        times: list[datetime] = []
        for name in self.azure:
            for event in (self._last_document.get(name) or {}).get("Events") or []:
                if event.get("EventStatus") != "Scheduled" or not event.get("NotBefore"):
                    self._quiet = (False, None)
                    return self._quiet
                try:  # whole seconds, so no later than the deadline itself
                    times.append(parsedate_to_datetime(event["NotBefore"]).astimezone(UTC))
                except (TypeError, ValueError):
                    self._quiet = (False, None)
                    return self._quiet
            until = parse_optional_time((self._last_row.get(name) or {}).get("impact_until"))
            if until is not None:
                times.append(until)
        self._quiet = (True, min(times) if times else None)
        return self._quiet

    def _move(self, path: str, body: dict, observe: bool = True) -> None:
        self.options.stop.check()
        self.moves += 1
        if self.moves > self.max_moves:
            raise RunAborted(f"more than {self.max_moves} clock moves (--max-moves)")
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
        """Read what changed (the observed VMs' documents and states, the watched instances); record it."""
        self.options.stop.check()
        if clock is None:
            clock = self.api.get("/v1/clock")  # on a real clock, this brings the server up to date first
        changes = None if everything else self._changes()
        self._read_clock(clock)
        if changes is None:  # everything: at the start, or when the journal moved on too far to tell
            document_names, state_names, ec2 = list(self.azure), list(self.azure), True
            gce = True
        else:
            gce = changes.gce
            document_names = [name for name in self.azure if self.scope_of.get(name) in changes.scopes]
            state_names = [name for name in self.azure if name in changes.vms]
            ec2 = changes.ec2
        self._observe_documents(document_names)
        self._observe_vm_states(state_names)
        if self.watch_ec2 and ec2:
            self._instance_rows = self.api.get("/v1/ec2/instances")
            self._observe_instances(self.api.get("/v1/ec2/events", all="true"))
        if self.gce_instances and gce:
            self._observe_gce(self.api.get("/v1/gce/instances"))

    def _observe_documents(self, names: list[str]) -> None:
        """Each VM's document, recorded when it changed."""
        by_scope: dict[str, str] = {}  # the VMs of a scope share one document: read it once
        texts = {}
        for name in names:
            scope = self.scope_of.get(name, name)
            if scope not in by_scope:
                by_scope[scope] = self.api.document(name)
            texts[name] = by_scope[scope]
        for name, text in texts.items():
            if self._last_text.get(name) == text:
                continue
            self._last_text[name] = text
            document = parse_document(text)
            self._last_document[name] = document
            self._quiet = None
            self.documents[name].append(
                {**self._stamp(), "incarnation": document.get("DocumentIncarnation"), "document": document}
            )
            self._line(name, f"#{document.get('DocumentIncarnation')}", document_summary(document))

    def _observe_vm_states(self, names: list[str]) -> None:
        """Each VM's power, host and boot, recorded when one of them changed."""
        rows = self._vm_rows(names)
        for name in names:
            vm = rows.get(name)
            if vm is None:
                continue
            self._last_row[name] = vm
            self._quiet = None
            key = (vm["power"], vm["host"], vm["booted_at"])
            if self._last_state.get(name) == key:
                continue
            first = name not in self._last_state
            self._last_state[name] = key
            self.vm_states[name].append(
                {
                    **self._stamp(),
                    "power": vm["power"],
                    "host": vm["host"],
                    "booted_at": vm["booted_at"],
                    "impacted_by": vm["impacted_by"],
                }
            )
            if not first:
                self._line(name, "", f"{vm['power']} on {vm['host']}")

    def _observe_gce(self, rows: list[dict]) -> None:
        """A snapshot of each observed Compute Engine instance whenever what its metadata server or the API shows
        changed: the maintenance-event value, the status, the host, preempted, the upcoming window."""
        for row in rows:
            name = row["name"]
            if name not in self.gce_instances:
                continue
            upcoming = row.get("upcoming")
            snapshot = {
                "maintenance_event": row["maintenance_event"],
                "status": row["status"] + (" (deleted)" if row["deleted"] else ""),
                "host": row["host"],
                "preempted": row["preempted"],
                "upcoming": None if upcoming is None else upcoming["window_start"],
            }
            if self._last_gce.get(name) == snapshot:
                continue
            first = name not in self._last_gce
            self._last_gce[name] = snapshot
            self.gce_instances[name].append({**self._stamp(), **snapshot})
            if not first:
                detail = f"{snapshot['maintenance_event']}, {snapshot['status']} on {snapshot['host']}"
                if snapshot["preempted"]:
                    detail += ", preempted"
                if snapshot["upcoming"]:
                    detail += f", upcoming maintenance at {snapshot['upcoming']}"
                self._line(name, "", detail)

    def _vm_rows(self, names: list[str]) -> dict[str, dict]:
        if not names:
            return {}
        if len(names) > MANY_VMS:
            wanted = set(names)
            return {vm["name"]: vm for vm in self.api.get("/v1/vms") if vm["name"] in wanted}
        return {name: self.api.get(f"/v1/vms/{name}") for name in names}

    def _changes(self) -> _Changes | None:
        """The journal's entries since the last reading, as what they changed; None when more changed than the
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
        changes = _Changes()
        for entry in new:
            what = entry["what"]
            if entry.get("event_id"):
                self.event_journal.setdefault(entry["event_id"], []).append(
                    {key: value for key, value in entry.items() if key not in ("seq", "event_id")}
                )
                wave_cloud = self.wave_scheduled.get(what)
                if wave_cloud and str(entry.get("reason", "")).split(",")[0] in self.created_waves:
                    self.created[wave_cloud].add(entry["event_id"])  # scheduled by one of the run's waves
            if "scope" in entry:
                changes.scopes.add(entry["scope"])
            if "vm" in entry:
                changes.vms.add(entry["vm"])
            if what.startswith(("ec2 ", "instance ", "notification ")) or "instance" in entry:
                changes.ec2 = True
            if what.startswith("gce "):
                changes.gce = True
            if what.startswith("wave "):
                changes.waves = True
        if changes.waves:
            self.waves_running = any(wave["status"] == "running" for wave in self.api.get("/v1/waves"))
            self._quiet = None
        if not complete:
            self.journal_complete = False
            return None
        return changes

    def _observe_instances(self, ec2_events: list[dict]) -> None:
        for row in self._instance_rows:
            iid = row["instance_id"]
            if iid not in self.instances:
                if not self.scenario.observe_all:
                    continue
                self.instances[iid] = []
            events = [
                {
                    key: e[key]
                    for key in (
                        "event_id",
                        "code",
                        "state",
                        "description",
                        "not_before",
                        "not_after",
                        "not_before_deadline",
                    )
                }
                for e in ec2_events
                if e["instance_id"] == iid
            ]
            snapshot = {
                "state": row["state"],
                "host": row["host"],
                "booted_at": row["booted_at"],
                "lifecycle_state": row["lifecycle_state"],
                "replaces": row["replaces"],
                "spot_action": row["spot_action"],
                "spot_action_time": row["spot_action_time"],
                "events": events,
            }
            if self._last_instance.get(iid) == snapshot:
                continue
            self._last_instance[iid] = snapshot
            version = len(self.instances[iid]) + 1
            self.instances[iid].append({**self._stamp(), "version": version, **snapshot})
            self._line(iid, f"v{version}", instance_summary(snapshot))

    def _stamp(self) -> dict:
        now = self.clock_now
        return {
            "time": format_time(now),
            "offset": (now - self.start).total_seconds() if self.start else 0.0,
        }

    def _line(self, who: str, mark: str, text: str) -> None:
        now = self.clock_now
        offset = format_offset((now - self.start).total_seconds()) if self.start else "+00:00:00"
        self.emit(f"{offset:>13}  {now.strftime('%Y-%m-%d %H:%M:%S')}  {who:<20} {mark:<4} {text}")

    # ------------------------------------------------------------------------------------------------ actions
    def _perform(self, step: Step) -> None:
        entry: dict[str, Any] = {"step": step.index, "id": step.id, "do": step.do, "as": step.actor, **self._stamp()}
        try:
            params = self._resolve(step.params, step)
            entry["request"] = params
            result, ids = self.steps.actions[step.do].run(self.api, step, params)
        except StepRefused as error:
            raise RunAborted(str(error)) from None
        except ApiError as error:
            entry["error"] = {"status": error.status, "code": error.code, "message": error.message}
            self.actions.append(entry)
            self._line(f"> {step.do}", "", f"{describe_step(step)} failed: {error.message} ({error.code})")
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
        self._line(f"> {step.do}", "", f"{describe_step(step)}" + (f" -> {', '.join(ids)}" if ids else ""))
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
            self._quiet = None
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
        events: list[dict] = []
        ec2_events: list[dict] = []
        ec2_instances: list[dict] = []
        approvals: list[dict] = []
        start = self.start
        if start is not None:
            try:
                self._changes()  # the journal's last entries, for the events' histories
                events = [e for e in self.api.get("/v1/events", all="true") if parse_time(e["created_at"]) >= start]
                for event in events:
                    approvals += self._with_history(event, start)
                if scenario.instances:
                    ec2_events = [
                        e for e in self.api.get("/v1/ec2/events", all="true") if parse_time(e["created_at"]) >= start
                    ]
                    ec2_instances = self.api.get("/v1/ec2/instances")
            except (ApiError, Unreachable) as error:  # the timeline is still written
                aborted = aborted or f"could not read the final state: {error}"
            except RunInterrupted:  # asked again to stop: what was gathered is written
                aborted = aborted or "interrupted while reading the final state; the timeline is partial"
        approvals.sort(key=lambda a: a["offset"])
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
            "vms": self.documents,
            "vm_states": self.vm_states,
            "instances": self.instances,
            "actions": self.actions,
            "approvals": approvals,
            "events": events,
            "ec2_events": ec2_events,
            "ec2_instances": ec2_instances,
            "gce_instances": self.gce_instances,
            "settled": settled,
            "aborted": aborted,
        }
        results = list(self.step_checks)
        if self.start is not None and aborted is None:
            results += evaluate(scenario, timeline, self._tolerance())
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

    def _with_history(self, event: dict, start: datetime) -> list[dict]:
        """Give the event its history (``journal``); the approvals in it."""
        history = (
            self.event_journal.get(event["event_id"], [])
            if self.journal_complete
            else self.api.get(f"/v1/events/{event['event_id']}/journal")
        )
        event["journal"] = [{**entry, "at": format_optional_time(_entry_time(entry, event))} for entry in history]
        approvals = []
        for entry in event["journal"]:
            if entry["what"] == "approved":
                at = parse_time(entry["at"])
                approvals.append(
                    {
                        "time": format_time(at),
                        "offset": (at - start).total_seconds(),
                        "event_id": event["event_id"],
                        "by": entry.get("reason", "").removeprefix("by "),
                    }
                )
        return approvals

    def _tolerance(self) -> float:
        """How far a recorded time may be from an expected one: exact on a manual clock; on a real clock, a few
        polls of simulated time."""
        if self.options.mode == "manual":
            return 0.0
        return 3 * self.options.poll * self.options.speed + 1.0


def _entry_time(entry: dict, event: dict) -> datetime | None:
    """When a journal entry happened. The journal stamps an entry with the time of the command that committed it;
    a clock move that passed several deadlines commits them together, so a start or a completion takes its time
    from the event itself."""
    exact = {"started": event.get("started_at"), "completed": event.get("ended_at")}.get(entry["what"])
    return parse_optional_time(exact or entry["at"])


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
