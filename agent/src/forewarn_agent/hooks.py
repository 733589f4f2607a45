"""The user's hooks: a shell command per phase, optionally per kind of event, run with the event in its environment
and as JSON on its standard input, and stopped (its whole process group) when its time is up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from forewarn_agent.notice import Notice

PHASES = ("drain", "restore")


@dataclass(frozen=True)
class Hook:
    phase: str  # drain (a notice) or restore (canceled or ended)
    command: str
    kinds: Tuple[str, ...] = ()  # empty: every kind

    def applies(self, phase: str, kind: str) -> bool:
        return self.phase == phase and (not self.kinds or kind in self.kinds)


@dataclass(frozen=True)
class Outcome:
    command: str
    status: Optional[int]  # None: stopped at its deadline
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == 0


def environment(notice: Notice, phase: str, machine: str, seconds_left: Optional[float]) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "FOREWARN_PHASE": phase,
            "FOREWARN_CLOUD": notice.cloud,
            "FOREWARN_MACHINE": machine,
            "FOREWARN_EVENT_ID": notice.event_id,
            "FOREWARN_EVENT_KIND": notice.kind,
            "FOREWARN_EVENT_STATUS": notice.status,
            "FOREWARN_RESOURCES": ",".join(notice.resources),
            "FOREWARN_NOT_BEFORE": "" if notice.not_before is None else str(int(notice.not_before)),
            "FOREWARN_SECONDS_LEFT": "" if seconds_left is None else str(max(0, int(seconds_left))),
        }
    )
    return env


def run_hooks(
    hooks: Sequence[Hook], phase: str, notice: Notice, machine: str, budget: float, seconds_left: Optional[float]
) -> List[Outcome]:
    """Each hook of ``phase`` that applies to the notice's kind, in order, until one fails; all of them together get
    ``budget`` seconds. The phase of the environment is ``drain``, ``canceled`` or ``ended``."""
    import time

    outcomes: List[Outcome] = []
    deadline = time.monotonic() + budget
    stage = "drain" if phase == "drain" else "restore"
    payload = json.dumps({"phase": phase, "machine": machine, "event": notice.as_json()}).encode()
    for hook in [h for h in hooks if h.applies(stage, notice.kind)]:
        started = time.monotonic()
        status = _run_one(hook.command, environment(notice, phase, machine, seconds_left), payload, deadline - started)
        outcomes.append(Outcome(hook.command, status, time.monotonic() - started))
        if status != 0:
            break
    return outcomes


def _run_one(command: str, env: Dict[str, str], payload: bytes, seconds: float) -> Optional[int]:
    if seconds <= 0:
        return None
    process = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE, env=env, start_new_session=True)
    try:
        process.communicate(payload, timeout=seconds)
        return process.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        return None
