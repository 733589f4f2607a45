"""The CLI's small words (issue 25): fleet files checked without serving, documents and events printed for people,
plurals, plain `forewarn clock`, `forewarn reset` and `forewarn journal [--follow]`."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading

import pytest

from helpers import ROOT, Server, forewarn, fresh, takes_ctrl_c

FOLLOW_WAIT = 30.0  # seconds for a followed entry to be printed (polled every 0.1 s), on a loaded machine
TYPO_FLEET = """
hosts: [{name: host-01}]
availability_sets: [{name: web}]
vms:
  - {name: web-0, host: host-01, availabilty_set: web}
"""


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("polish")) as running:
        yield running


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forewarn", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )


def test_fleet_validate_accepts_a_good_file_and_says_what_it_holds():
    run = cli("fleet", "validate", "demo")
    assert run.returncode == 0, run.stderr
    assert run.stdout == (
        "demo: ok (9 Azure VMs in 5 scopes, 2 EC2 instances, 3 Compute Engine instances, on 4 hosts)\n"
    )
    found = json.loads(cli("fleet", "validate", "demo", "--json").stdout)
    assert found["valid"] is True
    assert (found["azure_vms"], found["ec2_instances"], found["gce_instances"], found["hosts"]) == (9, 2, 3, 4)


def test_fleet_validate_refuses_a_misspelt_key_and_suggests_the_right_one(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(TYPO_FLEET)
    run = cli("fleet", "validate", str(fleet))
    assert run.returncode == 1
    assert run.stdout == ""
    expected = f"{fleet}:5: vms[0].availabilty_set: unknown key 'availabilty_set'; did you mean 'availability_set'?"
    assert run.stderr == expected + "\n"
    as_json = cli("fleet", "validate", str(fleet), "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout) == {"file": str(fleet), "valid": False, "problems": [expected]}
    # serve reads the file the same way, and says the same
    served = cli("serve", "--fleet", str(fleet), "--db", ":memory:", "--port", "0")
    assert served.returncode == 1
    assert "did you mean 'availability_set'?" in served.stderr


def test_fleet_validate_names_one_vm_and_one_host_in_the_singular(tmp_path):
    fleet = tmp_path / "one.yaml"
    fleet.write_text("hosts: [{name: host-01}]\nvms: [{name: solo, host: host-01}]\n")
    run = cli("fleet", "validate", str(fleet))
    assert run.stdout == (
        f"{fleet}: ok (1 Azure VM in 1 scope, 0 EC2 instances, 0 Compute Engine instances, on 1 host)\n"
    )


def test_document_ends_with_a_newline_unless_raw(small_server):
    with fresh(small_server) as server:
        server.schedule(type="Freeze", vms=["solo"])
        served = server.scheduled_events().content
        printed = forewarn(server, "document", "solo").stdout.encode()
        raw = forewarn(server, "document", "solo", "--raw").stdout.encode()
    assert printed == served + b"\n"
    assert raw == served


def test_show_prints_lists_and_empty_fields_for_people(small_server):
    with fresh(small_server) as server:
        [event] = server.schedule(type="Reboot", vms=["WestNO_0", "WestNO_1"])
        shown = forewarn(server, "show", event["event_id"]).stdout
    assert "resources: WestNO_0, WestNO_1\n" in shown
    assert "started_at: -\n" in shown
    assert "[" not in shown and "None" not in shown


def test_a_wave_of_one_event_says_event(small_server):
    with fresh(small_server) as server:
        started = forewarn(server, "wave", "start", "--set", "solo").stdout
    assert "  1 event scheduled\n" in started


def test_plain_clock_prints_the_time(small_server):
    with fresh(small_server) as server:
        plain = forewarn(server, "clock").stdout
        shown = forewarn(server, "clock", "show").stdout
    assert plain == shown
    assert plain.startswith("2026-04-20T22:11:58Z  (manual clock; next deadline: ")


def test_plain_clock_prints_json_as_show_does_and_a_misplaced_json_moves_nothing(small_server):
    with fresh(small_server) as server:
        assert json.loads(forewarn(server, "clock", "--json").stdout) == json.loads(
            forewarn(server, "clock", "show", "--json").stdout
        )
        misplaced = forewarn(server, "clock", "--json", "advance", "1h", check=False)
        assert misplaced.returncode == 2
        assert "--json goes after the command: forewarn clock advance ... --json" in misplaced.stderr
        assert json.loads(forewarn(server, "clock", "--json").stdout)["now"] == "2026-04-20T22:11:58Z"


def test_reset_puts_the_server_back_to_its_start(small_server):
    with fresh(small_server) as server:
        server.schedule(type="Freeze", vms=["solo"])
        server.advance("1h")
        run = forewarn(server, "reset")
        assert run.stdout == "reset; simulated time 2026-04-20T22:11:58Z (manual clock)\n"
        assert server.get("/v1/events", all="true") == []
        assert forewarn(server, "journal").stdout == "no journal entries\n"


def test_journal_prints_entries_for_people_and_as_json(small_server):
    with fresh(small_server) as server:
        [event] = server.schedule(type="Freeze", vms=["solo"])
        lines = forewarn(server, "journal").stdout.splitlines()
        entries = json.loads(forewarn(server, "journal", "--json").stdout)
    assert [entry["what"] for entry in entries] == ["scheduled"]
    [line] = lines
    assert line.split()[:4] == [str(entries[0]["seq"]), "2026-04-20", "22:11:58", "scheduled"]
    assert event["event_id"] in line


def test_journal_follow_prints_new_entries_and_ends_cleanly_on_ctrl_c(small_server):
    with fresh(small_server) as server:
        [first] = server.schedule(type="Freeze", vms=["solo"])
        follower = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "forewarn",
                "--server",
                server.control,
                "journal",
                "-f",
                "--interval",
                "0.1",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=takes_ctrl_c,
            text=True,
            env={"PYTHONPATH": str(ROOT / "src")},
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in follower.stdout], daemon=True).start()

        def next_entry() -> tuple[str, str | None]:
            entry = json.loads(lines.get(timeout=FOLLOW_WAIT))
            return entry["what"], entry["event_id"]

        try:
            assert next_entry() == ("scheduled", first["event_id"])  # the entry already there
            [later] = server.schedule(type="Reboot", vms=["WestNO_0"])
            assert next_entry() == ("scheduled", later["event_id"])
            server.advance("1h")
            seen = set()
            while ("started", later["event_id"]) not in seen:
                seen.add(next_entry())
            assert ("started", first["event_id"]) in seen
            follower.send_signal(signal.SIGINT)
            follower.wait(FOLLOW_WAIT)
            errors = follower.stderr.read()
        finally:
            if follower.poll() is None:
                follower.kill()
    assert follower.returncode == 0
    assert errors == ""


def test_a_postgresql_store_is_named_by_its_url_once(tmp_path, postgres_url):
    with Server(tmp_path, db=postgres_url) as server:
        pass  # the banner is written before /healthz answers
    log = server.log_path.read_text()
    assert "store postgresql://postgres@" in log
    assert "postgresql:postgresql" not in log


MIXED_FLEET = """
hosts: [{name: host-01}, {name: host-02}]
vms: [{name: solo, host: host-01}]
ec2_instances: [{id: i-0a1b2c3d4e5f60718, name: orders-db, host: host-01}]
gce_instances: [{name: web-1, zone: us-central1-a, host: host-02}, {name: web-2, zone: us-central1-b, host: host-02}]
"""


def test_fleet_lists_every_clouds_machines(tmp_path):
    """`forewarn fleet` once listed Azure VMs only; EC2 and Compute Engine instances follow them now."""
    with Server(tmp_path, fleet_text=MIXED_FLEET) as server:
        run = forewarn(server, "fleet")
        found = json.loads(forewarn(server, "fleet", "--json").stdout)
    titles = [line for line in run.stdout.splitlines() if line.endswith(")") and " (" in line]
    assert titles == ["Azure VMs (1)", "EC2 instances (1)", "Compute Engine instances (2)"], run.stdout
    assert "orders-db" in run.stdout and "web-2" in run.stdout
    assert sorted(found) == ["azure", "ec2", "gce"] and [i["name"] for i in found["gce"]] == ["web-1", "web-2"]


def test_gce_maintain_says_when_an_instance_will_get_no_notice(tmp_path):
    """An instance gets its maintenance-event notice only if it read the key since its last maintenance, and only if
    it migrates or has GPUs; `gce maintain` said nothing of it, and the key just stayed NONE."""
    fleet = MIXED_FLEET.replace(
        "host: host-02}]",
        "host: host-02}, {name: db-1, host: host-02, scheduling: {on_host_maintenance: TERMINATE}}]",
    )
    with Server(tmp_path, fleet_text=fleet) as server:
        run = forewarn(server, "gce", "maintain", "web-1", "db-1")
        as_json = forewarn(server, "gce", "maintain", "web-2", "--json")
    assert "note: web-1 has not read maintenance-event since its last maintenance" in run.stdout, run.stdout
    assert "note: db-1 terminates without GPUs: maintenance-event stays NONE" in run.stdout
    assert "note:" not in as_json.stdout and json.loads(as_json.stdout)[0]["instance"] == "web-2"


def test_no_note_for_an_instance_that_read_the_key_or_for_announced_maintenance():
    from forewarn.gcp.cli.gce import notice_notes

    event = {"instance": "web-1", "announced": False, "notice_at": None, "state": "pending"}
    instance = {"name": "web-1", "on_host_maintenance": "MIGRATE", "gpus": 0, "watched": True}
    assert notice_notes([event], [instance]) == []
    assert notice_notes([{**event, "announced": True}], [{**instance, "watched": False}]) == []
    assert len(notice_notes([event], [{**instance, "watched": False}])) == 1


def test_ec2_instances_are_named_by_id_or_name_tag_with_suggestions(tmp_path):
    """The sandbox and the banner name EC2 instances by their Name tag; `schedule --instance orders-db` said
    `Invalid id`, and a misspelt id got no suggestion."""
    with Server(tmp_path, fleet_text=MIXED_FLEET) as server:
        by_name = forewarn(server, "schedule", "--code", "system-reboot", "--instance", "orders-db", "--json")
        typo = forewarn(server, "schedule", "--code", "system-reboot", "--instance", "orders-dbb", check=False)
        id_typo = forewarn(
            server, "schedule", "--code", "system-reboot", "--instance", "i-0a1b2c3d4e5f60719", check=False
        )
    assert json.loads(by_name.stdout)[0]["instance_id"] == "i-0a1b2c3d4e5f60718"
    assert typo.returncode != 0 and "did you mean 'orders-db'?" in typo.stderr, typo.stderr
    assert "did you mean 'i-0a1b2c3d4e5f60718'?" in id_typo.stderr, id_typo.stderr


def test_hardware_failure_says_which_host_failed_and_where_its_vms_went(small_server):
    """The VMs' table shows each VM on the host it moved to: without a line above it, the failed host's VMs read as
    another host's."""
    run = forewarn(small_server, "platform", "hardware-failure", "host-01")
    first = run.stdout.splitlines()[0]
    assert first.startswith("host-01 failed: 2 VMs impacted (WestNO_0, WestNO_1), now on host-"), run.stdout
    assert "host-01" not in first.split("now on", 1)[1]
