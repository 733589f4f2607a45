"""The loop: poll the cloud, act on each event that names this machine (drain hooks, then the approval where the
cloud takes one), and restore when it is gone. Every step is written to the state file before and after it runs."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Dict, List

from forewarn_agent.clouds import MetadataError, Watcher
from forewarn_agent.config import Config
from forewarn_agent.hooks import run_hooks
from forewarn_agent.http import Unreachable, request
from forewarn_agent.notice import Notice
from forewarn_agent.state import StateFile
from forewarn_agent.status import Metrics

log = logging.getLogger("forewarn_agent")


class Agent:
    def __init__(self, config: Config, watcher: Watcher, state: StateFile, metrics: Metrics):
        self.config = config
        self.watcher = watcher
        self.state = state
        self.metrics = metrics
        self.stopping = threading.Event()
        self.failures = 0

    # ------------------------------------------------------------------------------------------------ the loop
    def run(self) -> None:
        while not self.stopping.is_set():
            self.step()
            if not self.stopping.is_set():
                self.watcher.wait(self._pause())

    def stop(self) -> None:
        self.stopping.set()
        self.watcher.stop()

    def _pause(self) -> float:
        """The interval; after failures, longer (up to 30 s), so a throttled or failing service is not pressed."""
        return self.config.interval if not self.failures else min(30.0, self.config.interval * 2**self.failures)

    def step(self) -> None:
        try:
            notices = self.watcher.poll()
        except (Unreachable, MetadataError) as error:
            self.failures = min(self.failures + 1, 8)
            self.metrics.add("forewarn_agent_polls_total", outcome="failed")
            log.warning("metadata service: %s", error, extra={"fields": {"failures": self.failures}})
            return
        self.failures = 0
        self.metrics.add("forewarn_agent_polls_total", outcome="ok")
        self.metrics.set("forewarn_agent_last_poll_seconds", time.time())
        self.reconcile(notices, self.watcher.now())

    def reconcile(self, notices: List[Notice], now: float) -> None:
        own = {notice.key: notice for notice in notices if notice.own and not notice.finished}
        finished = {notice.key: notice.finished for notice in notices if notice.own and notice.finished}
        for notice in own.values():
            self._present(notice, now)
        for key, record in self.state.open_records().items():
            if key not in own:
                self._gone(key, record, finished.get(key) or self.watcher.gone_phase(record, now), now)
        self.state.forget_old(now)

    # --------------------------------------------------------------------------------------------- an event
    def _present(self, notice: Notice, now: float) -> None:
        if notice.advance:
            self._announced(notice, now)
            return
        record = self.state.record(notice.key)
        if record is None:
            record = {"event_id": notice.event_id, "cloud": notice.cloud, "kind": notice.kind, "first_seen": now}
            self._save(notice.key, record)
            self.metrics.add("forewarn_agent_events_total", kind=notice.kind)
            self._log("notice", notice, status=notice.status, not_before=notice.not_before)
        record.update(not_before=notice.not_before, status=notice.status)
        if notice.status == "Started":
            record["started"] = True
        if record.get("drain") in (None, "running"):  # "running": the agent stopped in the middle; run it again
            self._drain(notice, record, now)
        if notice.approvable and self.config.approve and not record.get("approved") and record.get("drain") == "done":
            self._maybe_approve(notice, record, now)

    def _drain(self, notice: Notice, record: Dict[str, Any], now: float) -> None:
        record["drain"] = "running"
        record["drain_runs"] = record.get("drain_runs", 0) + 1
        self._save(notice.key, record)
        ok = self._hooks("drain", notice, now)
        record["drain"] = "done" if ok else "failed"
        record["drained_at"] = time.time()
        self._save(notice.key, record)

    def _maybe_approve(self, notice: Notice, record: Dict[str, Any], now: float) -> None:
        others = [name for name in notice.resources if name != self.watcher.machine]
        waiting = [name for name in others if not self._peer_drained(name, notice.event_id)]
        left = notice.seconds_left(now)
        at_margin = bool(self.config.approve_margin) and left is not None and left <= self.config.approve_margin
        if waiting and not at_margin:
            if record.get("waiting_for") != waiting:
                record["waiting_for"] = waiting
                self._save(notice.key, record)
                self._log("waiting for peers", notice, peers=waiting)
            return
        if self.config.dry_run:
            self._log("would approve (dry run)", notice)
            record["approved"] = True
            self._save(notice.key, record)
            return
        try:
            self.watcher.approve(notice)
        except (Unreachable, MetadataError) as error:
            log.warning("approval of %s failed: %s", notice.event_id, error, extra={"fields": {}})
            return
        record["approved"] = True
        record["approved_at"] = time.time()
        self._save(notice.key, record)
        self.metrics.add("forewarn_agent_approvals_total")
        self._log("approved", notice, waited_for=waiting if at_margin else [])
        self._webhook("approved", notice, True)

    def _peer_drained(self, name: str, event_id: str) -> bool:
        address = self.config.peer_address(name)
        if address is None:
            return False  # no way to ask: the event starts at NotBefore, or at the approval margin
        try:
            answer = request("GET", f"{address}/v1/events/{event_id}", timeout=2.0)
            return answer.status == 200 and bool(answer.json().get("drained"))
        except (Unreachable, ValueError, AttributeError):
            return False

    def _announced(self, notice: Notice, now: float) -> None:
        """Maintenance announced days ahead: logged, counted and sent to the webhook once; the drain waits for the
        notice itself, which comes the cloud's notice before the window."""
        if self.state.record(notice.key) is not None:
            return
        record = {"event_id": notice.event_id, "cloud": notice.cloud, "kind": notice.kind, "first_seen": now}
        self._save(notice.key, dict(record, advance=True, not_before=notice.not_before))
        self.metrics.add("forewarn_agent_events_total", kind=notice.kind)
        self._log("announced", notice, not_before=notice.not_before, details=notice.raw)
        self._webhook("announced", notice, True)

    def _gone(self, key: str, record: Dict[str, Any], phase: str, now: float) -> None:
        if record.get("advance"):  # the announcement left (its notice came, or it was moved): nothing to restore
            record.update(done=True, done_at=time.time())
            self._save(key, record)
            return
        not_before = record.get("not_before")
        notice = Notice(
            key=key,
            cloud=record.get("cloud", self.watcher.cloud),
            event_id=record.get("event_id", key),
            kind=record.get("kind", ""),
            status=phase.capitalize(),
            not_before=not_before,
            resources=(self.watcher.machine,),
        )
        self._log(phase, notice)
        record["restore"] = "done" if self._hooks(phase, notice, now) else "failed"
        record["done"] = True
        record["done_at"] = time.time()
        self._save(key, record)

    # ------------------------------------------------------------------------------------------------ helpers
    def _hooks(self, phase: str, notice: Notice, now: float) -> bool:
        left = notice.seconds_left(now)
        budget = self.config.hook_timeout
        if phase == "drain" and left is not None:
            budget = max(1.0, min(budget, left - self.config.margin))
        if self.config.dry_run:
            self._log(f"would run {phase} hooks (dry run)", notice, budget=budget)
            return True
        outcomes = run_hooks(self.config.hooks, phase, notice, self.watcher.machine, budget, left)
        ok = all(outcome.ok for outcome in outcomes)
        self.metrics.add("forewarn_agent_hook_runs_total", phase=phase, outcome="ok" if ok else "failed")
        details = [{"command": o.command, "status": o.status, "seconds": round(o.seconds, 3)} for o in outcomes]
        self._log(f"{phase} hooks {'done' if ok else 'failed'}", notice, hooks=details)
        self._webhook(phase, notice, ok)
        return ok

    def _save(self, key: str, record: Dict[str, Any]) -> None:
        with self.state.lock:
            self.state.events[key] = record
        self.state.save()

    def _log(self, message: str, notice: Notice, **fields: Any) -> None:
        data = {"event_id": notice.event_id, "kind": notice.kind, "cloud": notice.cloud, **fields}
        log.info("%s: %s %s", message, notice.kind, notice.event_id, extra={"fields": data})

    def _webhook(self, phase: str, notice: Notice, ok: bool) -> None:
        if not self.config.webhook or self.config.dry_run:
            return
        body = json.dumps(
            {"phase": phase, "ok": ok, "machine": self.watcher.machine, "event": notice.as_json()}
        ).encode()

        def send() -> None:
            try:
                request("POST", self.config.webhook, {"Content-Type": "application/json"}, body, 5.0)
            except Unreachable as error:
                log.warning("webhook: %s", error, extra={"fields": {"event_id": notice.event_id}})

        threading.Thread(target=send, name="webhook", daemon=True).start()
