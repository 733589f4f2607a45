"""FOREWARN_TEST_NET moves the ports and loopback addresses tests and benchmarks take (docs/testing.md)."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys

import pytest

from forewarn.scenarios.testnet import (
    NetSetting,
    NetSettingError,
    free_ports,
    loopback_address,
    net_setting,
    numbered_address,
    worker_share,
)
from helpers import ROOT, Server

METADATA = {"Metadata": "true"}


def test_the_setting_says_a_port_range_a_loopback_base_or_both():
    assert net_setting("") == NetSetting(None, 0)
    assert net_setting("40000-44999 127.42") == NetSetting((40000, 44999), 42)
    assert net_setting("127.7,20000-20999") == NetSetting((20000, 20999), 7)
    assert net_setting("30000-30099") == NetSetting((30000, 30099), 0)


@pytest.mark.parametrize("value", ["40000", "127.300", "10.0", "80-1000", "60000-60050", "50000-40000", "ports"])
def test_a_setting_that_says_neither_is_refused_naming_the_variable(value):
    with pytest.raises(NetSettingError, match="FOREWARN_TEST_NET"):
        net_setting(value)


def test_ports_are_drawn_from_the_range_and_a_taken_one_is_skipped(monkeypatch):
    monkeypatch.setenv("FOREWARN_TEST_NET", "41000-41099")
    taken = []
    try:
        for port in range(41000, 41090):  # all but ten of the range held by "another service"
            sock = socket.socket()
            try:
                sock.bind(("", port))
            except OSError:
                sock.close()
                continue
            taken.append(sock)
        held = {sock.getsockname()[1] for sock in taken}
        for _ in range(20):
            ports = free_ports(3)
            assert len(set(ports)) == 3 and all(41000 <= port <= 41099 and port not in held for port in ports)
    finally:
        for sock in taken:
            sock.close()


def test_ports_given_to_a_server_not_yet_started_are_not_drawn_again(monkeypatch):
    """Free until that server binds them: a second draw for the same server (a VM's own port) must skip them."""
    monkeypatch.setenv("FOREWARN_TEST_NET", "41100-41199")
    given = set(range(41100, 41190))  # ten left, some of which another process's connection may hold for a moment
    for _ in range(20):
        ports = free_ports(3, avoid=given)
        assert len(set(ports)) == 3 and all(41190 <= port <= 41199 for port in ports)


def test_each_xdist_worker_draws_from_a_slice_of_its_own():
    def share(worker: str, workers: str, low: int = 12768, high: int = 32767) -> tuple[int, int]:
        return worker_share(low, high, {"PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": workers})

    assert [share(f"gw{index}", "3") for index in range(3)] == [(12768, 19433), (19434, 26099), (26100, 32765)]
    assert worker_share(12768, 32767, {}) == (12768, 32767)  # not under xdist
    assert share("gw0", "3", 41000, 41099) == (41000, 41099)  # slices of 33 ports: the whole range
    assert share("master", "3") == share("gw5", "3") == (12768, 32767)


def test_addresses_move_to_the_loopback_base(monkeypatch):
    assert loopback_address(3, 7) == "127.0.3.7" and numbered_address(3_999) == "127.0.16.250"
    monkeypatch.setenv("FOREWARN_TEST_NET", "127.42")
    assert loopback_address(3, 7) == "127.42.3.7" and numbered_address(0) == "127.42.1.1"


def test_a_test_server_and_its_vms_live_where_the_setting_says(tmp_path, monkeypatch):
    monkeypatch.setenv("FOREWARN_TEST_NET", "42000-42999 127.42")
    address = loopback_address(1, 1)
    fleet = f"hosts: [{{name: host-a}}]\nvms:\n  - {{name: moved, host: host-a, imds: {{address: {address}}}}}\n"
    with Server(tmp_path, fleet_text=fleet) as server:
        ports = [server.port, server.imds_port, server.arm_port, server.ec2_port, server.gce_port]
        assert all(42000 <= port <= 42999 for port in ports)
        connection = http.client.HTTPConnection("127.0.0.1", server.imds_port, source_address=(address, 0), timeout=10)
        connection.request(
            "GET", "/metadata/instance/compute/name?api-version=2021-02-01&format=text", headers=METADATA
        )
        answer = connection.getresponse()
        assert answer.status == 200 and answer.read() == b"moved"
        connection.close()


def test_a_benchmark_takes_its_ports_from_the_setting():
    script = "import benchlib, imds_vs_nginx; print(imds_vs_nginx.free_port(), benchlib.numbered_address(0))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT / "bench",
        env={"FOREWARN_TEST_NET": "43000-43099 127.43", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    port, address = done.stdout.split()
    assert 43000 <= int(port) <= 43099 and address == "127.43.1.1"
