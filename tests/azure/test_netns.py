"""VMs in network namespaces: each VM's client keeps one address, and the server tells them apart by it."""

import json
import secrets
import subprocess
import sys

import pytest

from helpers import Server


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@pytest.fixture
def namespaces():
    """Two namespaces, each with a veth to the host: host side 10.231.N.1, VM side 10.231.N.2."""
    tag = secrets.token_hex(3)
    try:
        sh("ip", "netns", "add", f"fwprobe{tag}")
        sh("ip", "netns", "del", f"fwprobe{tag}")
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"network namespaces unavailable here (needs root and iproute2): {error}")
    created = []
    subnet = 200 + secrets.randbelow(50)
    try:
        for index in range(2):
            ns, host_if, vm_if = f"fw{tag}{index}", f"fwh{tag}{index}", f"fwv{tag}{index}"
            net = f"10.{subnet}.{index}"
            sh("ip", "netns", "add", ns)
            created.append(ns)
            sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", vm_if)
            sh("ip", "link", "set", vm_if, "netns", ns)
            sh("ip", "addr", "add", f"{net}.1/24", "dev", host_if)
            sh("ip", "link", "set", host_if, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{net}.2/24", "dev", vm_if)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", vm_if, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield [(f"fw{tag}{i}", f"10.{subnet}.{i}.1", f"10.{subnet}.{i}.2") for i in range(2)]
    finally:
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_each_namespace_is_its_vm(tmp_path, namespaces):
    (ns_a, _, address_a), (ns_b, _, address_b) = namespaces
    fleet = f"""
vms:
  - {{name: vm-a, imds: {{address: {address_a}}}}}
  - {{name: vm-b, imds: {{address: {address_b}}}}}
"""
    server = Server(tmp_path, fleet, extra=["--imds-host", "0.0.0.0"]).start()
    try:
        server.schedule(type="Reboot", vms=["vm-b"])
        for ns, host_side, expected_name, expected_events in (
            (ns_a, namespaces[0][1], "vm-a", 0),
            (ns_b, namespaces[1][1], "vm-b", 1),
        ):
            script = (
                "import json, requests\n"
                f"base = 'http://{host_side}:{server.imds_port}/metadata'\n"
                "h = {'Metadata': 'true'}\n"
                "name = requests.get(base + '/instance/compute/name', params={'api-version': '2021-02-01', "
                "'format': 'text'}, headers=h).text\n"
                "doc = requests.get(base + '/scheduledevents', params={'api-version': '2020-07-01'}, headers=h).json()\n"
                "print(json.dumps([name, doc]))\n"
            )
            run = subprocess.run(
                ["ip", "netns", "exec", ns, sys.executable, "-c", script], capture_output=True, text=True, timeout=30
            )
            assert run.returncode == 0, run.stderr
            name, doc = json.loads(run.stdout)
            assert name == expected_name
            assert len(doc["Events"]) == expected_events
    finally:
        server.stop()
