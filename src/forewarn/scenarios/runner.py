"""Running a scenario against a server, through its control API: take each step at its simulated time, move the
clock (manual: step by step through every deadline; real: wait and poll), record what every observed VM's document
was at each incarnation, and check the expectations on the resulting timeline."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from forewarn.scenarios.api import Api, ApiError, Unreachable, parse_document
from forewarn.scenarios.expect import evaluate
from forewarn.scenarios.spec import TIME_KEYS, Scenario, Step, format_offset, time_value

DEFAULT_MAX_MOVES = 1000
DEFAULT_POLL = 0.1  # seconds of wall time between polls on a real clock
DEFAULT_TIMEOUT = 600.0  # wall seconds a real-clock run may wait, after its last step, for things to settle


class RunAborted(Exception):
    """The run could not go on (a step failed unexpectedly, the server went away, ...)."""


def parse_iso(text: str | None) -> datetime | None:
    if not text:
        return None
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class RunOptions:
    mode: str = "manual"  # manual: the runner moves the clock; real: it waits and polls; auto: the server's
    speed: float = 1.0
    poll: float = DEFAULT_POLL
    max_moves: int = DEFAULT_MAX_MOVES
    timeout: float = DEFAULT_TIMEOUT
    set_start: bool = True  # on a manual clock, move a server that is behind to the scenario's start time


class Runner:
    def __init__(
        self,
        scenario: Scenario,
        api: Api,
        options: RunOptions | None = None,
        emit: Callable[[str], None] | None = None,
        server_info: dict | None = None,
    ):
        self.scenario = scenario
        self.api = api
        self.options = options or RunOptions()
        self.emit = emit or (lambda line: None)
        self.server_info = server_info or {}
        self.azure = [name for name in scenario.observe if name in scenario.vms]
        self.ec2_watch = [name for name in scenario.observe if name in scenario.instances]
        self.watch_ec2 = bool(self.ec2_watch) or (scenario.observe_all and bool(scenario.instances))
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
        self._vm_impacts: list[dict] = []
        self._instance_rows: list[dict] = []
        self.actions: list[dict] = []
        self.step_checks: list[dict] = []
        self.produced: dict[str, list[str]] = {}
        self.warnings: list[str] = []

    # ------------------------------------------------------------------------------------------------ the run
    def run(self) -> dict:
        aborted = None
        settled = False
        try:
            self._begin()
            for step in self.scenario.steps:
                self._advance_to(self.start + step.time)
                self._perform(step)
                self.observe()
            settled = self._settle()
        except (RunAborted, ApiError, Unreachable) as error:
            aborted = str(error)
        return self._timeline(settled, aborted)

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
        now = parse_iso(clock["now"])
        start = self.scenario.start
        if start is not None and mode == "manual" and self.options.set_start and now < start:
            clock = self.api.post("/v1/clock/set", {"to": iso(start)})
            now = parse_iso(clock["now"])
        elif start is not None and abs(now - start) > timedelta(seconds=10 * max(1.0, self.options.speed)):
            self.warnings.append(
                f"the scenario starts at {iso(start)}; this server's clock is at {iso(now)}, so "
                "the run starts there (absolute times in the scenario may not match)"
            )
        for warning in self.warnings:
            self.emit(f"warning: {warning}")
        self.start = now
        self._read_clock(clock)
        self.observe(clock)

    def _check_fleet(self) -> None:
        fleet = self.api.get("/v1/fleet")
        known = {vm["name"] for vm in fleet["vms"]}
        missing = [name for name in self.scenario.vms if name not in known]
        if self.scenario.instances:
            known_instances = {i["instance_id"] for i in self.api.get("/v1/ec2/instances")}
            missing += [name for name in self.scenario.instances if name not in known_instances]
        if missing:
            raise RunAborted(
                f"the server's fleet has no {', '.join(missing)}: it is not the scenario's fleet "
                "(run without --server to start a private server with it)"
            )

    def _read_clock(self, clock: dict) -> None:
        self.now = parse_iso(clock["now"])
        self.next_deadline = parse_iso(clock.get("next_deadline"))

    # ---------------------------------------------------------------------------------------------- the clock
    def _advance_to(self, target: datetime) -> None:
        if self.options.mode == "manual":
            while self.next_deadline is not None and self.next_deadline <= target:
                self._move("/v1/clock/next", {})
            if self.now < target:
                self._move("/v1/clock/set", {"to": iso(target)})
        else:
            while self.now < target:
                remaining = (target - self.now).total_seconds() / self.options.speed
                time.sleep(max(0.0, min(self.options.poll, remaining)))
                self.observe()

    def _move(self, path: str, body: dict) -> None:
        self.moves += 1
        if self.moves > self.options.max_moves:
            raise RunAborted(f"more than {self.options.max_moves} clock moves (--max-moves)")
        self.observe(self.api.post(path, body))

    def _settle(self) -> bool:
        """After the last step: move on until no event of the run is live and no VM is in an impact."""
        if self.options.mode == "manual":
            while not self._settled():
                if self.next_deadline is None:
                    return False
                self._move("/v1/clock/next", {})
            return True
        deadline = time.monotonic() + self.options.timeout
        while not self._settled():
            if time.monotonic() > deadline:
                return False
            time.sleep(self.options.poll)
            self.observe()
        # The clock kept moving between the last reading and the check that found everything over: read the final
        # documents too, or the last change (an event leaving) could go unrecorded.
        self.observe()
        return True

    def _settled(self) -> bool:
        since = self.start
        if any(parse_iso(e["created_at"]) >= since for e in self.api.get("/v1/events")):
            return False
        if any(wave["status"] == "running" for wave in self.api.get("/v1/waves")):
            return False
        if any(vm.get("impact_until") for vm in self._vm_impacts):
            return False
        if self.scenario.instances or self.watch_ec2:
            if any(parse_iso(e["created_at"]) >= since for e in self.api.get("/v1/ec2/events")):
                return False
            for instance in self._instance_rows:
                if instance.get("impacted_by"):
                    return False
                action_time = parse_iso(instance.get("spot_action_time"))
                if action_time is not None and action_time > self.now:
                    return False
        return True

    # ---------------------------------------------------------------------------------------------- observing
    def observe(self, clock: dict | None = None) -> None:
        """Read every observed VM's document (and state); record what changed."""
        texts = {name: self.api.document(name) for name in self.azure}
        vms = self.api.get("/v1/vms")
        self._vm_impacts = vms
        ec2_events: list[dict] = []
        if self.scenario.instances or self.watch_ec2:
            self._instance_rows = self.api.get("/v1/ec2/instances")
            ec2_events = self.api.get("/v1/ec2/events", all="true") if self.watch_ec2 else []
        self._read_clock(clock if clock is not None else self.api.get("/v1/clock"))
        for name, text in texts.items():
            if self._last_text.get(name) == text:
                continue
            self._last_text[name] = text
            document = parse_document(text)
            self.documents[name].append(
                {**self._stamp(), "incarnation": document.get("DocumentIncarnation"), "document": document}
            )
            self._line(name, f"#{document.get('DocumentIncarnation')}", _summary(document))
        by_name = {vm["name"]: vm for vm in vms}
        for name in self.azure:
            vm = by_name.get(name)
            if vm is None:
                continue
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
        if self.watch_ec2:
            self._observe_instances(ec2_events)

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
            self._line(iid, f"v{version}", _instance_summary(snapshot))

    def _stamp(self) -> dict:
        return {"time": iso(self.now), "offset": (self.now - self.start).total_seconds() if self.start else 0.0}

    def _line(self, who: str, mark: str, text: str) -> None:
        offset = format_offset((self.now - self.start).total_seconds()) if self.start else "+00:00:00"
        self.emit(f"{offset:>13}  {self.now.strftime('%Y-%m-%d %H:%M:%S')}  {who:<20} {mark:<4} {text}")

    # ------------------------------------------------------------------------------------------------ actions
    def _perform(self, step: Step) -> None:
        entry: dict[str, Any] = {"step": step.index, "id": step.id, "do": step.do, "as": step.actor, **self._stamp()}
        try:
            params = self._resolve(step.params, step)
            entry["request"] = params
            result, ids = ACTION_HANDLERS[step.do](self, step, params)
        except ApiError as error:
            entry["error"] = {"status": error.status, "code": error.code, "message": error.message}
            self.actions.append(entry)
            self._line(f"> {step.do}", "", f"{_describe(step)} failed: {error.message} ({error.code})")
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
        if step.id:
            self.produced[step.id] = ids
        self._line(f"> {step.do}", "", f"{_describe(step)}" + (f" -> {', '.join(ids)}" if ids else ""))
        if step.fails is not None:
            self.step_checks.append(
                {
                    "what": f"steps[{step.index}] {step.do} fails with {step.fails}",
                    "passed": False,
                    "detail": "it succeeded",
                }
            )

    def _resolve(self, value: Any, step: Step, key: str | None = None) -> Any:
        if isinstance(value, str) and value.startswith("$"):
            name = value[1:]
            if name not in self.produced:
                raise RunAborted(
                    f"steps[{step.index}]: {value} has not run (left out in the {self.scenario.timing} "
                    "timing, or it failed)"
                )
            return list(self.produced[name])
        if isinstance(value, str) and key in TIME_KEYS:
            return iso(time_value(value, self.start))
        if isinstance(value, dict):
            return {k: self._resolve(v, step, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self._resolve(item, step, key) for item in value]
        return value

    def _events(self, params: dict) -> list[str]:
        """The `event` parameter as EventIds (a `$step` gives that step's events), narrowed to `vm`'s if given."""
        ids = _flat(params.get("event"))
        if params.get("vm"):
            ids = [i for i in ids if params["vm"] in self.api.get(f"/v1/events/{i}")["resources"]]
            if not ids:
                raise ApiError(400, "Invalid", f"none of the events concerns {params['vm']}")
        return ids

    # one handler per action: (result, ids produced)
    def _schedule(self, step, params):
        events = self.api.post("/v1/events", params)
        return events, [e["event_id"] for e in events]

    def _approve(self, step, params):
        actor = step.actor or "control"
        ids = self._events(params) if params.get("event") else None
        if actor != "control":
            document = parse_document(self.api.document(actor))
            visible = [e["EventId"] for e in document["Events"]]
            if ids is None:
                ids = [e["EventId"] for e in document["Events"] if e["EventStatus"] == "Scheduled"]
                if not ids:
                    raise ApiError(400, "Invalid", f"{actor} sees no Scheduled event to approve")
            else:
                wanted = ids
                ids = [i for i in wanted if i in visible]
                if not ids:
                    raise ApiError(
                        400, "Invalid", f"{actor} does not see {', '.join(wanted)}; its IMDS would refuse the approval"
                    )
        events = self.api.post("/v1/approvals", {"event_ids": ids, "by": actor})
        return events, ids

    def _cancel(self, step, params):
        ids = self._events(params)
        return [self.api.post(f"/v1/events/{i}/cancel") for i in ids], ids

    def _vm_operation(self, step, params):
        outcome = self.api.post(f"/v1/vms/{step.do}", params)
        return outcome, [e["event_id"] for e in outcome["events"]]

    def _policy(self, step, params):
        body = {k: v for k, v in params.items() if k != "owner"}
        return self.api.patch(f"/v1/policies/{params['owner']}", body), []

    def _scale_set(self, step, params):
        name = params["scale_set"]
        if step.do == "scale-in":
            outcome = self.api.post(f"/v1/scale-sets/{name}/scale-in", {"count": params.get("count", 1)})
        else:
            outcome = self.api.post(f"/v1/scale-sets/{name}/update-instances", {"vms": params.get("vms") or []})
        return outcome, [e["event_id"] for e in outcome["events"]]

    def _platform(self, step, params):
        outcome = self.api.post(f"/v1/platform/{step.do}", params)
        return outcome, [e["event_id"] for e in outcome["events"]]

    def _wave(self, step, params):
        outcome = self.api.post("/v1/waves", params)
        return outcome, [outcome["wave"]["wave_id"]]

    def _cancel_wave(self, step, params):
        ids = _flat(params["wave"])
        return [self.api.post(f"/v1/waves/{wave_id}/cancel") for wave_id in ids], ids

    def _ec2_schedule(self, step, params):
        events = self.api.post("/v1/ec2/events", params)
        return events, [e["event_id"] for e in events]

    def _ec2_cancel(self, step, params):
        ids = _flat(params["event"])
        return [self.api.post(f"/v1/ec2/events/{i}/cancel") for i in ids], ids

    def _ec2_reschedule(self, step, params):
        ids = _flat(params["event"])
        return [self.api.post(f"/v1/ec2/events/{i}/reschedule", {"not_before": params["not_before"]}) for i in ids], ids

    def _ec2_start(self, step, params):
        outcome = self.api.post(f"/v1/ec2/instances/{params['instance']}/start")
        return outcome, [e["event_id"] for e in outcome["events"]]

    def _ec2_spot(self, step, params):
        path = "/v1/ec2/spot/interrupt" if step.do == "ec2-interrupt" else "/v1/ec2/spot/rebalance"
        outcome = self.api.post(path, params)
        return outcome, [e["event_id"] for e in outcome["events"]]

    def _ec2_api(self, step, params):
        form = {}
        for key, value in params.items():
            if isinstance(value, list):
                if len(value) != 1:
                    raise RunAborted(f"steps[{step.index}].with.{key}: {len(value)} values for one Query parameter")
                value = value[0]
            form[key] = str(value).lower() if isinstance(value, bool) else str(value)
        text, ids = self.api.ec2_query(form)
        return text, ids

    # ----------------------------------------------------------------------------------------------- timeline
    def _timeline(self, settled: bool, aborted: str | None) -> dict:
        scenario = self.scenario
        events, ec2_events, ec2_instances, approvals = [], [], [], []
        if self.start is not None:
            try:
                events = [e for e in self.api.get("/v1/events", all="true") if parse_iso(e["created_at"]) >= self.start]
                for event in events:
                    event["journal"] = [
                        {**entry, "at": iso(parse_iso(entry["at"]))}
                        for entry in self.api.get(f"/v1/events/{event['event_id']}/journal")
                    ]
                    for entry in event["journal"]:
                        if entry["what"] == "approved":
                            at = parse_iso(entry["at"])
                            approvals.append(
                                {
                                    "time": iso(at),
                                    "offset": (at - self.start).total_seconds(),
                                    "event_id": event["event_id"],
                                    "by": entry.get("reason", "").removeprefix("by "),
                                }
                            )
                if scenario.instances:
                    ec2_events = [
                        e
                        for e in self.api.get("/v1/ec2/events", all="true")
                        if parse_iso(e["created_at"]) >= self.start
                    ]
                    ec2_instances = self.api.get("/v1/ec2/instances")
            except (ApiError, Unreachable) as error:  # the timeline is still written
                aborted = aborted or f"could not read the final state: {error}"
        approvals.sort(key=lambda a: a["offset"])
        timeline = {
            "scenario": scenario.name,
            "title": scenario.title,
            "file": scenario.path,
            "timing": scenario.timing,
            "clock": self.options.mode,
            "speed": self.options.speed if self.options.mode == "real" else None,
            **self.server_info,
            "start": iso(self.start),
            "end": iso(self.now),
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

    def _tolerance(self) -> float:
        """How far a recorded time may be from an expected one: exact on a manual clock; on a real clock, a few
        polls of simulated time."""
        if self.options.mode == "manual":
            return 0.0
        return 3 * self.options.poll * self.options.speed + 1.0


ACTION_HANDLERS: dict[str, Callable] = {
    "schedule": Runner._schedule,
    "approve": Runner._approve,
    "cancel": Runner._cancel,
    "restart": Runner._vm_operation,
    "redeploy": Runner._vm_operation,
    "reimage": Runner._vm_operation,
    "delete": Runner._vm_operation,
    "policy": Runner._policy,
    "scale-in": Runner._scale_set,
    "update-instances": Runner._scale_set,
    "hardware-failure": Runner._platform,
    "predicted-failure": Runner._platform,
    "evict": Runner._platform,
    "ec2-schedule": Runner._ec2_schedule,
    "ec2-cancel": Runner._ec2_cancel,
    "ec2-reschedule": Runner._ec2_reschedule,
    "ec2-start": Runner._ec2_start,
    "ec2-interrupt": Runner._ec2_spot,
    "ec2-rebalance": Runner._ec2_spot,
    "ec2-api": Runner._ec2_api,
    "wave": Runner._wave,
    "cancel-wave": Runner._cancel_wave,
}


def _flat(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [item for part in value for item in _flat(part)]


def _summary(document: dict) -> str:
    events = document.get("Events") or []
    if not events:
        return "no events"
    parts = []
    for event in events:
        text = (
            f"{event.get('EventStatus')} {event.get('EventType')} ({event.get('EventSource', '?')}) "
            f"{event.get('EventId')}"
        )
        if event.get("NotBefore"):
            text += f" NotBefore {event['NotBefore']}"
        resources = event.get("Resources") or []
        if len(resources) > 1:
            text += f" [{','.join(resources)}]"
        parts.append(text)
    return "; ".join(parts)


def _instance_summary(snapshot: dict) -> str:
    text = f"{snapshot['state']} on {snapshot['host']}"
    if snapshot.get("spot_action"):
        text += f"; spot {snapshot['spot_action']} at {snapshot['spot_action_time']}"
    for event in snapshot["events"]:
        text += f"; {event['code']} {event['state']} NotBefore {event['not_before']}"
    return text


def _describe(step: Step) -> str:
    parts = [f"as {step.actor}"] if step.actor else []
    for key, value in step.params.items():
        if isinstance(value, list):
            value = ",".join(map(str, value))
        elif isinstance(value, dict):
            value = "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
        text = str(value)
        parts.append(f"{key}={text if len(text) <= 40 else text[:37] + '...'}")
    return " ".join(parts)


def run_scenario(
    scenario: Scenario,
    server: str | None = None,
    ec2_url: str | None = None,
    options: RunOptions | None = None,
    seed: str | None = None,
    emit: Callable[[str], None] | None = None,
    control_token: str | None = None,
) -> dict:
    """Run a resolved scenario: on ``server`` (its control API URL, with its ``control_token`` if it has one) when
    given, otherwise on a private server started for the run (in-memory database, the scenario's fleet, ``seed`` for
    reproducible EventIds)."""
    from forewarn.scenarios.server import DEFAULT_SEED, PrivateServer

    options = options or RunOptions()
    if server is not None:
        api = Api(server, ec2_url, token=control_token)
        try:
            info = {"server": server, "ec2_url": ec2_url, "private_server": False, "seed": None}
            return Runner(scenario, api, options, emit, info).run()
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
            return Runner(scenario, api, options, emit, info).run()
        finally:
            api.close()
