"""Two forewarns side by side: the demo fleet's servers do not clash, a port that is taken is named with the option
that chooses another, and a SQLite file is held by one live server at a time."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
import requests

from forewarn.recording.model import Entry, Recording, save_recording
from forewarn.scenarios.server import PortTaken, launch_serve
from helpers import ROOT, Server, free_ports

DOCUMENT = "/metadata/scheduledevents?api-version=2020-07-01"


def serve_fails(*args: str) -> subprocess.CompletedProcess:
    """``forewarn serve ARGS`` expected to stop at once; any port it does not name is a free one."""
    options = [
        option for option in ("--port", "--imds-port", "--arm-port", "--ec2-port", "--gce-port") if option not in args
    ]
    ports = [text for option, port in zip(options, free_ports(len(options))) for text in (option, str(port))]
    run = subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", *args, *ports, "--clock", "manual"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    assert run.returncode == 1, (run.returncode, run.stderr)
    return run


def held_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_two_demo_servers_run_side_by_side_and_each_vm_address_answers_for_its_own_server(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        Server(tmp_path / "a", fleet_text=None, extra=["--fleet", "demo"]) as first,
        Server(tmp_path / "b", fleet_text=None, extra=["--fleet", "demo"]) as second,
    ):
        first.schedule(type="Freeze", vms=["WestNO_0"], notice="5m")
        seen = {
            server.port: requests.get(f"http://127.0.0.10:{server.imds_port}{DOCUMENT}", headers={"Metadata": "true"})
            for server in (first, second)
        }
        assert [len(seen[server.port].json()["Events"]) for server in (first, second)] == [1, 0]
        for server in (first, second):
            assert "cannot listen" not in server.log_path.read_text()


def test_a_fleets_fixed_vm_port_that_is_taken_stops_the_start_naming_it_and_the_way_out(tmp_path):
    with held_port() as taken:
        port = taken.getsockname()[1]
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(f"vms:\n  - {{name: db-1, imds: {{port: {port}}}}}\n")
        run = serve_fails("--fleet", str(fleet), "--db", ":memory:")
        assert (
            f"forewarn: cannot listen on 127.0.0.1:{port} for the metadata endpoint of db-1 (set by its imds.port in "
            "the fleet; --no-vm-ports serves the fleet without its VMs' own ports): Address already in use; is "
            "another forewarn serve running?"
        ) in run.stderr
        with Server(tmp_path, fleet_text=fleet.read_text(), extra=["--no-vm-ports"]) as server:
            answer = requests.get(f"{server.imds}{DOCUMENT}", headers={"Metadata": "true"}, timeout=10)
            assert answer.status_code == 200  # db-1 is the fleet's only VM: the shared port answers as it


@pytest.mark.parametrize(("option", "title"), [("--ec2-port", "the EC2 API"), ("--port", "the control API")])
def test_a_vm_port_that_is_one_of_the_servers_own_stops_the_start(tmp_path, option, title):
    """Skipped, the VM's agent would read that API's answers as its metadata (EC2's MissingAction, in XML)."""
    [port] = free_ports(1)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"vms:\n  - {{name: db-1, imds: {{port: {port}}}}}\n")
    run = serve_fails("--fleet", str(fleet), "--db", ":memory:", option, str(port))
    assert (
        f"forewarn: cannot listen on 127.0.0.1:{port} for the metadata endpoint of db-1 (set by its imds.port in "
        f"the fleet; --no-vm-ports serves the fleet without its VMs' own ports): it is this server's own port too "
        f"({title})\n"
    ) in run.stderr


def test_a_vm_address_whose_metadata_port_another_socket_holds_stops_the_start(tmp_path):
    """Skipped, the VM's agent at http://ADDRESS:IMDS_PORT would talk to whoever holds it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.91", 0))
        taken.listen()
        port = taken.getsockname()[1]
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text("vms:\n  - {name: db-1, imds: {address: 127.0.0.91}}\n")
        run = serve_fails("--fleet", str(fleet), "--db", ":memory:", "--imds-port", str(port))
    assert (
        f"forewarn: cannot listen on 127.0.0.91:{port} for the metadata endpoint of db-1 (set by its imds.address in "
        "the fleet, on --imds-port): Address already in use; is another forewarn serve running?"
    ) in run.stderr


def test_a_taken_port_stops_the_start_before_the_database_is_created(tmp_path):
    with held_port() as taken:
        port = taken.getsockname()[1]
        run = serve_fails("--port", str(port), "--db", str(tmp_path / "new.db"), "--fleet", "demo")
    assert f"forewarn: cannot listen on 127.0.0.1:{port}" in run.stderr
    assert not (tmp_path / "new.db").exists()


def test_a_sqlite_file_is_held_by_one_live_server_and_let_go_when_it_dies(tmp_path):
    database = str(tmp_path / "shared.db")
    first = Server(tmp_path, db=database).start()
    try:
        run = serve_fails("--db", database)
        assert (
            f"forewarn: SQLite database {database!r} is in use by another forewarn server (process "
            f"{first.process.pid}) (it holds '{database}.lock'); stop that server, or give this one another --db"
        ) in run.stderr
        assert requests.get(f"{first.control}/healthz", timeout=10).status_code == 200  # the first one is untouched
    finally:
        first.kill()  # kill -9: the kernel drops the lock with the process
    with Server(tmp_path, db=database, fleet_text=None) as second:
        assert second.get("/v1/fleet")["vms"]


def recording(tmp_path):
    path = tmp_path / "vm.json"
    entry = Entry(0.0, "2026-04-20T22:00:00Z", 200, '{"DocumentIncarnation":1,"Events":[]}')
    save_recording(
        Recording("http://127.0.0.1:8169" + DOCUMENT, "2020-07-01", "2026-04-20T22:00:00Z", 1.0, [entry]), path
    )
    return path


def test_replay_defaults_to_a_port_serve_does_not_use_and_names_a_taken_one(tmp_path):
    help_text = subprocess.run(
        [sys.executable, "-m", "forewarn", "replay", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    ).stdout
    assert "[default: 8179;" in " ".join(help_text.split())
    with held_port() as taken:
        port = taken.getsockname()[1]
        run = subprocess.run(
            [sys.executable, "-m", "forewarn", "replay", str(recording(tmp_path)), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PYTHONPATH": str(ROOT / "src")},
        )
    assert run.returncode == 1
    assert (
        f"forewarn: cannot listen on 127.0.0.1:{port}: Address already in use; choose another with --port"
    ) in run.stderr


def test_a_start_whose_control_port_another_server_took_first_is_not_taken_for_that_server(tmp_path):
    """Another starter (a test worker, a scenario run) may choose the same free port and bind it first: the second
    server then exits, and its start must not pass the first one's ``/healthz`` on that port for its own."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with Server(tmp_path / "a") as first:
        second = Server(tmp_path / "b")
        second.args[second.args.index("--port") + 1] = str(first.port)
        with pytest.raises(PortTaken, match="Address already in use"):
            launch_serve(second.args, second.log_path, first.control)
        assert requests.get(f"{first.control}/healthz", timeout=10).json()["pid"] == first.process.pid
