"""A seeded random generator of maintenance over a fleet: a scenario file with a realistic mix of operations.

Operations arrive as a Poisson process (``per_hour`` on average) over ``duration``; each is drawn from MIX, whose
kinds and timings are the median timings of Microsoft's mock server (Azure-Samples/scheduled-events-mock-server) and
the exceptional cases of "Scheduled Events for Azure Virtual Machines". No public source gives how often each kind
happens; the weights are our choice, led by the mock's note that host maintenance is "the most common reason for a
scheduled event". The same fleet, seed and arguments give the same file, so a failing run can be replayed exactly and
shrunk by hand.

The file is an ordinary scenario (docs/scenarios.md): read it, edit it, run it with ``forewarn scenario run``.

What the generator knows of the fleet is the file, not the server: VMs move on a Redeploy (to the next host), and a
Spot eviction deletes them. So host-wide operations name the VMs the file puts on the host, a host is named by
``hardware-failure`` / ``predicted-failure`` only while nothing has been redeployed away from it, and an evicted VM
is never named again. Every step is then valid when it runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from forewarn.core.words import counted
from forewarn.fleet.model import Fleet

# kind: (weight, what it is). Timings are the mock's medians ("realistic"); see _operation for each one's step.
MIX: dict[str, tuple[float, str]] = {
    "host-maintenance": (30, "Freeze, 9 s, host agent maintenance (15 min notice, Started 10 min)"),
    "live-migration": (25, "Freeze, 5 s, memory-preserving live migration (15 min notice, Started 5 min)"),
    "platform-reboot": (8, "Reboot of a host's VMs (15 min notice)"),
    "platform-redeploy": (5, "Redeploy of a host's VMs after a failure (15 min notice)"),
    "canceled-maintenance": (5, "Freeze Scheduled, then canceled after 8 min"),
    "user-restart": (8, "a user restarts a VM"),
    "user-redeploy": (4, "a user redeploys a VM"),
    "spot-eviction": (8, "Preempt of a Spot VM, 30 s notice, then deleted"),
    "predicted-failure": (4, "Redeploy with 1 to 7 days of notice (degraded hardware)"),
    "hardware-failure": (3, "a host fails: Redeploy events appear as Started"),
}
_MOVES_VMS = {"platform-redeploy", "user-redeploy", "predicted-failure", "hardware-failure"}


@dataclass(frozen=True)
class Generation:
    seed: str = "forewarn"
    duration: timedelta = timedelta(hours=24)
    per_hour: float = 2.0
    start: datetime | None = None
    observe: int = 20  # how many of the VMs operated on to record (all of them is too many on a large fleet)

    def checked(self) -> Generation:
        if not timedelta(minutes=1) <= self.duration <= timedelta(days=366):
            raise ValueError("the duration must be between 1 minute and 366 days")
        if not 0 < self.per_hour <= 3600:
            raise ValueError("--per-hour must be more than 0 and at most 3600")
        if not 1 <= self.observe <= 10_000:
            raise ValueError("--observe must be between 1 and 10,000")
        return self


def generate_scenario(fleet: Fleet, fleet_ref: str, generation: Generation) -> dict:
    """The scenario as plain data, ready to be written as YAML."""
    generation = generation.checked()
    rng = random.Random(generation.seed)
    vms = [vm for part in fleet.parts.values() if part.machine_kind == "vm" for vm in part.machines.values()]
    vms_of_host: dict[str, list[str]] = {}
    for vm in vms:
        vms_of_host.setdefault(vm.host, []).append(vm.name)
    if not vms_of_host:
        raise ValueError("the fleet has no Azure VM to maintain")
    alive = {name for names in vms_of_host.values() for name in names}
    moved_away: set[str] = set()  # hosts a VM may have left
    spot = sorted(vm.name for vm in vms if vm.interruptible)
    steps: list[tuple[float, int, dict]] = []
    touched: dict[str, None] = {}
    counts = dict.fromkeys(MIX, 0)
    total = generation.duration.total_seconds()
    moment = rng.expovariate(generation.per_hour / 3600)
    index = 0
    while moment < total:
        kind = _draw(rng, spot_available=bool(set(spot) & alive))
        host = rng.choice(sorted(vms_of_host))
        on_host = [name for name in vms_of_host[host] if name in alive]
        created = _operation(kind, rng, index, host, on_host, alive, spot, moved_away)
        if created is not None:
            counts[kind] += 1
            for offset, step, names in created:
                steps.append((round(moment + offset), len(steps), step))
                touched.update(dict.fromkeys(names))
            if kind in _MOVES_VMS:
                moved_away.add(host)
            index += 1
        moment += rng.expovariate(generation.per_hour / 3600)
    steps.sort(key=lambda item: (item[0], item[1]))
    observed = sorted(touched)[: generation.observe] or sorted(alive)[: generation.observe]
    summary = ", ".join(f"{count} {kind}" for kind, count in counts.items() if count)
    scenario = {
        "name": f"generated-{_slug(generation.seed)}",
        "title": f"Random maintenance over {counted(len(vms), 'VM')} for {_duration(generation.duration)} "
        f"(seed {generation.seed})",
        "description": f"Generated by `forewarn scenario generate` with seed {generation.seed!r}, "
        f"operations at {generation.per_hour:g} an hour on average: {summary or 'nothing'}.",
        "source": "forewarn's random maintenance generator (src/forewarn/scenarios/generate.py); timings from "
        'Azure-Samples/scheduled-events-mock-server and "Scheduled Events for Azure Virtual Machines"',
        "fleet": fleet_ref,
        "observe": observed,
        "steps": [{"at": f"{at}s", **step} for at, _, step in steps],
    }
    if generation.start is not None:
        scenario["start"] = generation.start.isoformat().replace("+00:00", "Z")
    if not steps:
        raise ValueError("no operation falls inside the duration; raise --per-hour or --duration")
    return scenario


def _draw(rng: random.Random, spot_available: bool) -> str:
    kinds = [kind for kind in MIX if spot_available or kind != "spot-eviction"]
    return rng.choices(kinds, weights=[MIX[kind][0] for kind in kinds])[0]


def _operation(
    kind: str,
    rng: random.Random,
    index: int,
    host: str,
    on_host: list[str],
    alive: set[str],
    spot: list[str],
    moved_away: set[str],
):
    """The steps of one operation: [(offset in seconds, step, VMs it names)], or None when it cannot apply."""
    step_id = f"op{index}"
    if kind == "spot-eviction":
        candidates = [name for name in spot if name in alive]
        victim = rng.choice(candidates)
        alive.discard(victim)
        return [(0, {"id": step_id, "do": "evict", "with": {"vms": [victim]}}, [victim])]
    if not on_host:
        return None
    if kind in ("user-restart", "user-redeploy"):
        vm = rng.choice(on_host)
        action = "restart" if kind == "user-restart" else "redeploy"
        return [(0, {"id": step_id, "do": action, "with": {"vms": [vm]}}, [vm])]
    if kind in ("hardware-failure", "predicted-failure"):
        if host in moved_away:  # VMs may have left it: the host might run nothing now
            return None
        params: dict[str, Any] = {"hosts": [host]}
        if kind == "predicted-failure":
            params["notice"] = f"{rng.randint(1, 7)}d"
        return [(0, {"id": step_id, "do": kind, "with": params}, on_host)]
    schedules: dict[str, dict[str, Any]] = {
        "host-maintenance": {
            "type": "Freeze",
            "duration_seconds": 9,
            "impact_window": "10m",
            "description": "Host server is undergoing maintenance.",
        },
        "live-migration": {"type": "Freeze", "duration_seconds": 5, "impact_window": "5m"},
        "platform-reboot": {"type": "Reboot", "impact_window": "10m"},
        "platform-redeploy": {
            "type": "Redeploy",
            "impact_window": "10m",
            "description": "Virtual machine has encountered a failure.",
        },
        "canceled-maintenance": {
            "type": "Freeze",
            "duration_seconds": 9,
            "description": "Host server is undergoing maintenance.",
        },
    }
    schedule = schedules[kind]
    steps = [
        (0, {"id": step_id, "do": "schedule", "with": {**schedule, "vms": list(on_host), "notice": "15m"}}, on_host)
    ]
    if kind == "canceled-maintenance":
        steps.append((8 * 60, {"do": "cancel", "with": {"event": f"${step_id}"}}, []))
    return steps


def fleet_reference(source: str, out: str) -> str:
    """How the scenario names its fleet: ``demo``, or the path relative to where the scenario is written."""
    if source == "demo":
        return "demo"
    path = Path(source).resolve()
    if out == "-":
        return str(path)
    try:
        return str(path.relative_to(Path(out).resolve().parent))
    except ValueError:
        return str(path)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text.lower())[:40] or "seed"


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m"
