"""A wave over a generated fleet of 10,000 to 100,000 VMs, on the manual clock: wall time per simulated hour,
memory, and how both grow with the fleet.

Each fleet size runs in its own process (so memory figures are its own), through the service as the server runs it:
the engine, the SQLite store (a file, synchronous=FULL, one transaction per clock step) and the Azure IMDS read model
subscribed to every change. Two waves per size:

- **probe**: by host, 50 hosts at a time (500 VMs per round at any size), 6 rounds: the cost of a clock step when the
  work due is the same. If the engine scanned the fleet on each step, the 100,000-VM step would cost ~10x the
  10,000-VM one; the target is a ratio near 1.
- **whole fleet**: by host, 5% of the hosts at a time (20 rounds of Freeze: 15 min notice, 5 min Started): wall time
  per simulated hour, per event, and the peak memory.

    .venv/bin/python bench/wave.py                      # 10k, 30k, 100k VMs (about 3 minutes)
    .venv/bin/python bench/wave.py --sizes 10000,100000
    .venv/bin/python bench/wave.py --check              # 2,000 VMs: fails on a broken setup only

Run on a quiet machine: these are wall times of one process (a busy machine inflates them all).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from forewarn.azure.component import AzureComponent
from forewarn.waves.component import WaveRunner

T0 = datetime(2026, 4, 20, 22, 11, 58, tzinfo=UTC)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one(size: int) -> dict:
    from forewarn.app.runtime import Maintenance
    from forewarn.azure.imds.scheduled_events import AzureImds
    from forewarn.azure.model import EventType
    from forewarn.fleet.file import parse_fleet
    from forewarn.fleet.generate import FleetShape, fleet_yaml
    from forewarn.net.callers import CallerResolver
    from forewarn.server.stores import open_fleet_store as open_store
    from forewarn.server.tuning import settle_heap
    from forewarn.waves.component import WaveChanged, WaveOrder, WaveSpec, WaveStatus

    result: dict = {"vms": size}
    gc.disable()  # as forewarn serve loads its fleet (server/composition.py), then settles the heap once it is built
    started = time.perf_counter()
    text = fleet_yaml(FleetShape(vms=size, seed="bench"))
    fleet = parse_fleet(text)
    result["fleet_s"] = time.perf_counter() - started
    hosts = len(fleet.hosts)
    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        service = Maintenance.open(open_store(str(Path(directory) / "wave.db")), fleet, "manual", 1.0, T0, "bench")
        AzureImds(service, CallerResolver(fleet, shared_ports=set()))
        settle_heap()
        result["open_s"] = time.perf_counter() - started
        result["rss_ready_mb"] = rss_mb()

        def run_wave(concurrency: int, max_steps: int | None = None) -> tuple[float, float, int, int, float]:
            """Wall time of the whole wave and of its clock steps alone, steps, events created, simulated hours."""
            spec = WaveSpec(
                EventType.FREEZE,
                WaveOrder.HOST,
                concurrency=concurrency,
                notice=timedelta(minutes=15),
                impact_window=timedelta(minutes=5),
                duration_seconds=5,
            )
            begin_sim = service.now()
            begin = time.perf_counter()
            changes = service.perform(lambda engine: engine.component(WaveRunner).start_wave(spec))
            wave_id = next(c.wave.wave_id for c in changes if isinstance(c, WaveChanged))
            steps = 0
            stepping = 0.0
            while service.settled_engine().component(WaveRunner).wave(wave_id).status is WaveStatus.RUNNING:
                if max_steps is not None and steps == max_steps:
                    service.perform(lambda engine: engine.component(WaveRunner).cancel_wave(wave_id))
                    while service.settled_engine().next_deadline() is not None:  # let what was Started finish
                        service.step_clock()
                    break
                step_begin = time.perf_counter()
                service.step_clock()
                stepping += time.perf_counter() - step_begin
                steps += 1
            wall = time.perf_counter() - begin
            return (
                wall,
                stepping,
                steps,
                len(service.settled_engine().component(AzureComponent).events),
                (service.now() - begin_sim).total_seconds() / 3600,
            )

        before = len(service.settled_engine().component(AzureComponent).events)
        _, stepping, steps, events, _ = run_wave(50, max_steps=18)  # 6 rounds: started, completed (+next), ...
        result["probe_events"] = events - before
        result["probe_ms_per_step"] = stepping / max(steps, 1) * 1000
        before = len(service.settled_engine().component(AzureComponent).events)
        wall, _, steps, events, sim_hours = run_wave(max(1, hosts // 20))
        result.update(
            wave_events=events - before,
            wave_steps=steps,
            wave_sim_hours=sim_hours,
            wave_wall_s=wall,
            wall_per_sim_hour_s=wall / sim_hours,
            us_per_event=wall / max(events - before, 1) * 1e6,
            rss_end_mb=rss_mb(),
            rss_peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            db_mb=(Path(directory) / "wave.db").stat().st_size / 2**20,
        )
        service.store.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,30000,100000", help="fleet sizes, comma-separated")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true", help="small and fast (2,000 VMs): fails on a broken setup only")
    args = parser.parse_args()
    if args.check:
        args.sizes = "2000"
    if args.one:
        print(json.dumps(one(args.one)))
        return
    sizes = [int(size) for size in args.sizes.split(",")]
    rows = []
    for size in sizes:
        print(f"{size:,} VMs ...", file=sys.stderr, flush=True)
        run = subprocess.run(
            [sys.executable, __file__, "--one", str(size)], capture_output=True, text=True, check=False
        )
        if run.returncode != 0:
            sys.exit(f"{size} VMs failed:\n{run.stderr}")
        rows.append(json.loads(run.stdout))
    base = rows[0]
    print(
        f"\nA wave on the manual clock, SQLite file store, IMDS read model subscribed ({', '.join(f'{s:,}' for s in sizes)} VMs)\n"
    )
    header = (
        "VMs",
        "fleet s",
        "open s",
        "probe ms/step",
        "wave events",
        "sim h",
        "wall s",
        "s per sim h",
        "us/event",
        "RSS ready MB",
        "RSS peak MB",
        "DB MB",
    )
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for row in rows:
        print(
            " | ".join(
                (
                    f"{row['vms']:,}",
                    f"{row['fleet_s']:.1f}",
                    f"{row['open_s']:.1f}",
                    f"{row['probe_ms_per_step']:.1f}",
                    f"{row['wave_events']:,}",
                    f"{row['wave_sim_hours']:.1f}",
                    f"{row['wave_wall_s']:.1f}",
                    f"{row['wall_per_sim_hour_s']:.2f}",
                    f"{row['us_per_event']:.0f}",
                    f"{row['rss_ready_mb']:.0f}",
                    f"{row['rss_peak_mb']:.0f}",
                    f"{row['db_mb']:.0f}",
                )
            )
        )
    print(f"\nGrowth against {base['vms']:,} VMs (fleet x{rows[-1]['vms'] / base['vms']:g} at the largest):")
    for row in rows[1:]:
        factor = row["vms"] / base["vms"]
        print(
            f"  {row['vms']:,} VMs (x{factor:g}): probe step x{row['probe_ms_per_step'] / base['probe_ms_per_step']:.2f}"
            f" (same work due; 1.0 = independent of the fleet), per event x{row['us_per_event'] / base['us_per_event']:.2f},"
            f" wall per sim hour x{row['wall_per_sim_hour_s'] / base['wall_per_sim_hour_s']:.2f}"
            f" (x{factor:g} more events per round), peak RSS x{row['rss_peak_mb'] / base['rss_peak_mb']:.2f}"
        )


if __name__ == "__main__":
    main()
