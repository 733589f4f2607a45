"""The benchmarks' verdicts are as strict as the goals bench/README.md prints: IMDS at >= 0.6 of an nginx tuned for a
static file, over the rounds that counted only; EC2 listings against moto cold (after a change) as well as warm; the
stalls' p99.9 on every probe, in the rounds that counted."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import imds_vs_nginx


def wrk_round(rps: float, refused: list[str] | None = None) -> dict:
    return {"rps": rps, "p50_ms": 0.3, "p90_ms": 0.5, "p99_ms": 0.7, "server_cpu": 0.98, "non_2xx": 0,
            "socket_errors": 0, "refused": refused or []}  # fmt: skip


def test_the_imds_goal_is_met_at_six_tenths_of_nginx_and_not_below():
    assert imds_vs_nginx.judge(0.60, []) == "MET"
    assert imds_vs_nginx.judge(0.57, []) == "MISSED"  # met under the old 0.5
    assert imds_vs_nginx.judge(0.9, ["round 2 nginx: other processes used 0.50 cores (> 0.35)"]) == "INVALID"


def test_the_summary_is_over_the_rounds_that_counted():
    busy = ["other processes used 0.90 cores (> 0.35)"]
    runs = {
        "nginx": [wrk_round(100_000), wrk_round(40_000, busy), wrk_round(102_000)],
        "forewarn": [wrk_round(61_000), wrk_round(59_000), wrk_round(90_000, busy)],
    }
    summary = imds_vs_nginx.summarize(runs)
    assert summary["nginx"]["rps"] == 101_000 and summary["nginx"]["valid_rounds"] == 2
    assert summary["forewarn"]["rps"] == 60_000 and summary["forewarn"]["valid_rounds"] == 2


def test_nginx_is_tuned_for_a_static_file(tmp_path):
    conf = imds_vs_nginx.nginx_conf(tmp_path, 8080, tmp_path / "document.json")
    for directive in ("sendfile on;", "open_file_cache max=", "keepalive_requests 2147483647;", "access_log off;"):
        assert directive in conf
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        pytest.skip("nginx is not installed (make bench installs it): the directives are checked, not nginx -t")
    for sub in ("logs", "client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp_path / sub).mkdir()
    (tmp_path / "nginx.conf").write_text(conf)
    done = subprocess.run(
        [nginx, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-e", str(tmp_path / "logs/error.log"), "-t"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr


def wave_run(
    vms: int, cpu_us: float, peak_mb: float, refused: tuple[str, ...] = (), calibration_us: float = 100.0
) -> dict:
    return {
        "vms": vms,
        "cpu_us_per_event": cpu_us,
        "calibrations_per_event": cpu_us / calibration_us,
        "rss_wave_peak_mb": peak_mb,
        "probe_ms_per_step": 20.0,
        "refused": list(refused),
    }


def test_the_wave_is_judged_on_the_median_of_its_runs_that_counted():
    # by its path: the standard library has a module named wave
    spec = importlib.util.spec_from_file_location(
        "bench_wave", Path(__file__).resolve().parent.parent / "bench/wave.py"
    )
    assert spec is not None and spec.loader is not None
    wave = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wave)
    busy = ("other processes used 0.90 cores (> 0.35)",)

    def judged(*groups: tuple[int, list[dict]]) -> list[str]:
        return wave.verdicts(wave.summaries_of(list(groups), check=False))

    assert wave.plan([10_000, 100_000, 1_000_000], None, False) == [
        (10_000, 5),
        (100_000, 3),
        (10_000, 5),
        (1_000_000, 1),
        (10_000, 5),
    ]  # the reference runs just before and just after each larger size
    assert wave.plan([2_000], None, True) == [(2_000, 1)]
    small = [wave_run(10_000, cpu, 60) for cpu in (90, 100, 140)] + [wave_run(10_000, 50, 60, busy)]
    assert wave.summary(10_000, small, check=False)["cpu_median"] == 100  # the refused run is not counted
    # minutes later the machine is a fifth slower: the calibration takes a fifth longer too
    slower = [wave_run(10_000, cpu, 60, calibration_us=120) for cpu in (108, 120, 168)]
    assert judged(
        (10_000, small),
        (100_000, [wave_run(100_000, 109, 150)]),
        (10_000, small),
        (1_000_000, [wave_run(1_000_000, 126, 1_150, calibration_us=120)]),
        (10_000, slower),
    ) == [
        "MET: wave peak at 1,000,000 VMs 1,150 MB (goal: under 1,200 MB)",
        "MET: CPU per event at 100,000 VMs against 10,000 just before and after: +9% in calibrations (1.090 against"
        " 1.000), +9% in CPU time (109 against 100 µs); goal: within ±10%",
        # the runs around the million: 90, 100, 140 µs at 100 µs a calibration, 108, 120, 168 at 120
        # the CPU time grew by 11% against those runs, the machine's slower minutes included
        "MET: CPU per event at 1,000,000 VMs against 10,000 just before and after: +5% in calibrations (1.050"
        " against 1.000), +11% in CPU time (126 against 114 µs); goal: within ±10%",
    ]
    missed = judged((10_000, small), (1_000_000, [wave_run(1_000_000, 111, 1_200)]), (10_000, small))
    assert [line.split(":")[0] for line in missed] == ["NOT met", "NOT met"]
    assert "no verdict on the peak" in judged((10_000, small), (100_000, [wave_run(100_000, 100, 60)]))[0]
    refused = judged((10_000, small), (1_000_000, [wave_run(1_000_000, 100, 900, busy)]), (10_000, small))
    assert [line.split(":")[0] for line in refused] == ["INVALID", "INVALID"]  # never met on a busy machine
    no_reference = judged(
        (10_000, [wave_run(10_000, 100, 60, busy)]), (100_000, [wave_run(100_000, 100, 60)]), (10_000, [])
    )
    assert no_reference[1].startswith("INVALID: CPU per event: no run at 10,000 VMs counted")
    assert wave.runs_at(10_000, None, False) == 5 and wave.runs_at(1_000_000, None, False) == 1
    assert wave.runs_at(10_000, None, True) == 1 and wave.runs_at(10_000, 2, False) == 2


def test_the_ec2_goal_is_judged_on_the_cold_listings_too():
    import ec2_vs_moto

    cold = {"refused": [], "cold_listings_per_s": 80.0}
    moto = {"listings_per_s": 4.0}
    assert ec2_vs_moto.cold_row(cold, moto, check=False)[0][2:] == ["20.00x", "not met"]  # warm listings met 38x
    assert ec2_vs_moto.cold_verdict({**cold, "cold_listings_per_s": 120.0}, 30.0) == "met"
    assert (
        ec2_vs_moto.cold_verdict({**cold, "refused": ["other processes used 0.90 cores (> 0.35)"]}, 40.0) == "INVALID"
    )
    assert ec2_vs_moto.cold_row(None, moto, check=False) == []


def stalls_row(p999s: dict[str, float], valid: bool = True) -> dict:
    by_cloud = {cloud: {"longest_ms": p999 + 1, "p999_ms": p999, "answered": 1000} for cloud, p999 in p999s.items()}
    return {"by_cloud": by_cloud, "valid": valid, "refused": [] if valid else ["other processes used 0.50 cores"]}


def test_the_stalls_p999_goal_is_judged_on_every_probe_in_the_rounds_that_counted():
    import stalls

    assert stalls.p999_verdict("wave start", stalls_row({"Azure": 19.9, "EC2": 3.0}), check=False) == "met"
    assert stalls.p999_verdict("wave start", stalls_row({"Azure": 3.0, "GCE": 20.0}), check=False) == "NOT met"
    assert stalls.p999_verdict("wave start", stalls_row({"Azure": 30.0}, valid=False), check=False) == "INVALID"
    rows = {
        10_000: {"wave start": stalls_row({"Azure": 5.0}), "reset": stalls_row({"Azure": 40.0}, valid=False)},
        1_000_000: {"wave start": stalls_row({"Azure": 5.0}), "replica catch-up": stalls_row({"Azure": 21.3})},
    }
    summary = stalls.p999_summary(rows, check=False)
    assert "10,000: 1 of 1 met" in summary
    assert "1,000,000: 1 of 2 met (replica catch-up 21.3 ms)" in summary
