"""Addresses registered as machines at runtime (``/v1/imds/callers``): what the sandbox's relay stands on. These need
no root: a client on loopback binds the registered address as its source."""

import socket

import pytest
import requests

from forewarn.scenarios.testnet import loopback_address
from helpers import Server

# Loopback addresses this client binds (FOREWARN_TEST_NET moves them: docs/testing.md).
ADDRESSES = [loopback_address(254, host) for host in (1, 2, 3, 4)]

FLEET = """
hosts: [{name: host-01}]
vms:
  - {name: vm-a, host: host-01}
  - {name: vm-b, host: host-01}
  - {name: vm-own, host: host-01, imds: {address: 127.0.0.10}}
ec2_instances:
  - {id: i-0123456789abcdef0, name: web, instance_type: m5.large, availability_zone: eu-west-1a, host: host-01}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("callers"), FLEET) as running:
        yield running


def name_from(server: Server, source: str) -> requests.Response:
    """The Azure compute name, asked from ``source`` (a loopback address this client binds)."""
    with socket.create_connection(("127.0.0.1", server.imds_port), source_address=(source, 0)) as connection:
        connection.sendall(
            b"GET /metadata/instance/compute/name?api-version=2021-02-01&format=text HTTP/1.1\r\n"
            b"Host: 169.254.169.254\r\nMetadata: true\r\nConnection: close\r\n\r\n"
        )
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b" ")[1].decode(), body.decode()


def test_a_registered_address_is_its_machine_until_removed(server):
    # vm-a and vm-b share the fleet and have no address nor port of their own: without a registration, nobody.
    assert name_from(server, ADDRESSES[0])[0] == "400"
    put = requests.put(f"{server.control}/v1/imds/callers/{ADDRESSES[0]}", json={"machine": "vm-b"}, timeout=10)
    assert put.status_code == 200, put.text
    assert put.json() == {
        "address": ADDRESSES[0],
        "machine": "vm-b",
        "kind": "vm",
        "imds": {"host": "127.0.0.1", "port": server.imds_port},
    }
    assert name_from(server, ADDRESSES[0]) == ("200", "vm-b")
    # Registering again moves the address: the cache of who is asking is dropped.
    requests.put(f"{server.control}/v1/imds/callers/{ADDRESSES[0]}", json={"machine": "vm-a"}, timeout=10)
    assert name_from(server, ADDRESSES[0]) == ("200", "vm-a")
    listed = requests.get(f"{server.control}/v1/imds/callers", timeout=10).json()
    assert [(c["address"], c["machine"]) for c in listed] == [(ADDRESSES[0], "vm-a")]
    removed = requests.delete(f"{server.control}/v1/imds/callers/{ADDRESSES[0]}", timeout=10)
    assert removed.json() == {"removed": True}
    assert name_from(server, ADDRESSES[0])[0] == "400"
    again = requests.delete(f"{server.control}/v1/imds/callers/{ADDRESSES[0]}", timeout=10)
    assert again.json() == {"removed": False}


def test_an_instance_is_registered_by_its_name_tag_too(server):
    put = requests.put(f"{server.control}/v1/imds/callers/{ADDRESSES[3]}", json={"machine": "web"}, timeout=10)
    try:
        assert put.status_code == 200 and put.json()["machine"] == "i-0123456789abcdef0"
    finally:
        requests.delete(f"{server.control}/v1/imds/callers/{ADDRESSES[3]}", timeout=10)


def test_an_instance_is_registered_by_its_id(server):
    put = requests.put(
        f"{server.control}/v1/imds/callers/{ADDRESSES[1]}", json={"machine": "i-0123456789abcdef0"}, timeout=10
    )
    assert put.status_code == 200 and put.json()["kind"] == "ec2_instance"
    try:
        with socket.create_connection(("127.0.0.1", server.imds_port), source_address=(ADDRESSES[1], 0)) as conn:
            conn.sendall(
                b"GET /latest/meta-data/instance-id HTTP/1.1\r\nHost: 169.254.169.254\r\nConnection: close\r\n\r\n"
            )
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer.endswith(b"\r\n\r\ni-0123456789abcdef0")
    finally:
        requests.delete(f"{server.control}/v1/imds/callers/{ADDRESSES[1]}", timeout=10)


@pytest.mark.parametrize(
    ("address", "body", "status", "message"),
    [
        (
            ADDRESSES[2],
            {"machine": "vm-c"},
            404,
            "no VM, EC2 instance or Compute Engine instance named 'vm-c' in the fleet",
        ),
        ("not-an-ip", {"machine": "vm-a"}, 400, "'not-an-ip' is not an IP address"),
        (ADDRESSES[2], {"machine": "vm-a", "extra": 1}, 400, "extra"),
        (ADDRESSES[2], {}, 400, "machine"),
        # Where every local program connects from: it would make every loopback client that machine.
        ("127.0.0.1", {"machine": "vm-a"}, 400, "where every program on this machine connects from"),
        ("::1", {"machine": "vm-a"}, 400, "where every program on this machine connects from"),
        ("::ffff:127.0.0.1", {"machine": "vm-a"}, 400, "where every program on this machine connects from"),
        ("0.0.0.0", {"machine": "vm-a"}, 400, "where every program on this machine connects from"),
        ("::", {"machine": "vm-a"}, 400, "where every program on this machine connects from"),
        # Another machine's address from the fleet file: its clients would become vm-a.
        ("127.0.0.10", {"machine": "vm-a"}, 409, "127.0.0.10 is the imds address of vm-own in the fleet file"),
    ],
)
def test_bad_registrations_are_refused_and_change_nothing(server, address, body, status, message):
    answer = requests.put(f"{server.control}/v1/imds/callers/{address}", json=body, timeout=10)
    assert answer.status_code == status, answer.text
    assert message in answer.json()["error"]["message"]
    assert requests.get(f"{server.control}/v1/imds/callers", timeout=10).json() == []


def test_a_machine_may_be_registered_at_its_own_fleet_address(server):
    put = requests.put(f"{server.control}/v1/imds/callers/127.0.0.10", json={"machine": "vm-own"}, timeout=10)
    try:
        assert put.status_code == 200, put.text
        assert name_from(server, "127.0.0.10") == ("200", "vm-own")
    finally:
        requests.delete(f"{server.control}/v1/imds/callers/127.0.0.10", timeout=10)
