"""The VM sandbox, end to end: unmodified programs (the Azure documentation's Python sample, botocore's IMDS fetcher,
curl) talk to http://169.254.169.254 from a namespace and reach a real forewarn as their VM or instance; nothing
else is reachable; namespaces go away with their program, and a later sandbox removes what a killed one left.

Needs root and iproute2 (CI runs as root); skipped with the sandbox's own reason otherwise."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from forewarn.sandbox import Sandbox, unavailable_reason
from forewarn.sandbox.namespaces import NETNS_DIR, namespace_name
from helpers import ROOT, Server

SAMPLE = ROOT / "tests" / "samples" / "azure_scheduled_events_sample.py"
GCE_SAMPLE = ROOT / "tests" / "samples" / "gce_maintenance_event_sample.py"
INSTANCE = "i-0c0ffee0c0ffee001"
TWINS = {
    "sbx rel x": "i-0c0ffee0c0ffee0a1",
    "sbx-rel-x": "i-0c0ffee0c0ffee0a2",
    "sbx-relé": "i-0c0ffee0c0ffee0a3",
    "sbx-relá": "i-0c0ffee0c0ffee0a4",
}
LONG_ID = "i-0c0ffee0c0ffee0a5"
LONG_NAME = "sbx-long-" + "x" * 247
# Names of their own, so that a sandbox of the docs' demo fleet (WestNO_0...) running beside these tests never
# meets them.
FLEET = f"""
hosts: [{{name: host-01}}, {{name: host-02}}]
vms:
  - {{name: sbx_0, host: host-01, availability_set: sbxset}}
  - {{name: sbx_1, host: host-02, availability_set: sbxset}}
  - {{name: sbx-solo, host: host-02}}
ec2_instances:
  - {{id: {INSTANCE}, name: sbx-web, instance_type: m5.large, availability_zone: eu-west-3b, host: host-01}}
  # Name tags that the sandbox once mapped to one namespace: each pair read alike once unsafe characters were
  # replaced, and a 256-character one (the most a tag value has) made a namespace name longer than a file name.
  - {{id: {TWINS["sbx rel x"]}, name: sbx rel x, host: host-01}}
  - {{id: {TWINS["sbx-rel-x"]}, name: sbx-rel-x, host: host-01}}
  - {{id: {TWINS["sbx-relé"]}, name: sbx-relé, host: host-01}}
  - {{id: {TWINS["sbx-relá"]}, name: sbx-relá, host: host-01}}
  - {{id: {LONG_ID}, name: {LONG_NAME}, host: host-01}}
gce_instances:
  - {{name: sbx-gce, zone: europe-west1-b, host: host-01}}
"""
AZURE_DOC = "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"
AZURE_NAME = "http://169.254.169.254/metadata/instance/compute/name?api-version=2021-02-01&format=text"


def _namespaces_work() -> str | None:
    reason = unavailable_reason()
    if reason is not None:
        return reason
    probe = f"fwprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"network namespaces unavailable here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


pytestmark = pytest.mark.skipif(bool(_namespaces_work()), reason=str(_namespaces_work()))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # IMDSv2 only: every EC2 client below must fetch a token, as on an instance with HttpTokens=required.
    with Server(tmp_path_factory.mktemp("sandbox"), FLEET, extra=["--ec2-imds-tokens", "required"]) as running:
        yield running


@pytest.fixture
def fresh(server):
    return server.reset()


@pytest.fixture(scope="module")
def sandbox(server):
    with Sandbox(server.control, tag=f"t{os.getpid()}") as box:
        yield box


def cli(server: Server, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forewarn", "--server", server.control, "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        **kwargs,
    )


def test_the_documentation_sample_runs_unmodified_and_approves(fresh):
    """Microsoft's sample, byte for byte, URL and all, run with `forewarn sandbox exec`."""
    assert SAMPLE.read_text().count('metadata_url = "http://169.254.169.254/metadata/scheduledevents"') == 1
    [reboot] = fresh.schedule(type="Reboot", vms=["sbx-solo"], source="User")
    [redeploy] = fresh.schedule(type="Redeploy", vms=["sbx-solo"])
    run = cli(fresh, "exec", "sbx-solo", "--", sys.executable, str(SAMPLE), input="1\n1\n2\n")
    assert run.returncode == 0, run.stderr
    assert "Processed events from document: 3" in run.stdout  # both events scheduled: incarnation 3
    assert "Processed events from document: 4" in run.stdout  # the approval started the Reboot
    status = {e["event_id"]: (e["status"], e["approvals"]) for e in fresh.get("/v1/events")}
    assert status[reboot["event_id"]] == ("Started", ["sbx-solo"])
    assert status[redeploy["event_id"]] == ("Scheduled", [])
    assert not (NETNS_DIR / namespace_name("sbx-solo")).exists()  # gone with its program


AGENT = """
import requests, sys, time
h = {"Metadata": "true"}
me = requests.get("http://169.254.169.254/metadata/instance/compute/name",
                  params={"api-version": "2021-02-01", "format": "text"}, headers=h).text
url = "http://169.254.169.254/metadata/scheduledevents"
q = {"api-version": "2020-07-01"}
for _ in range(100):
    mine = [e for e in requests.get(url, params=q, headers=h).json()["Events"]
            if me in e["Resources"] and e["EventStatus"] == "Scheduled"]
    if mine:
        break
    time.sleep(0.05)
for event in mine:
    requests.post(url, params=q, headers=h, json={"StartRequests": [{"EventId": event["EventId"]}]}).raise_for_status()
print(me, [e["EventId"] for e in mine])
"""


def test_two_vms_of_an_availability_set_approve_each_from_its_own_namespace(fresh, sandbox):
    """Both VMs see both events (their scope is the set); each agent approves the one that names it, and the server
    records each approval as the VM in whose namespace the agent ran."""
    [first] = fresh.schedule(type="Freeze", vms=["sbx_0"], duration_seconds=5)
    [second] = fresh.schedule(type="Freeze", vms=["sbx_1"], duration_seconds=5)
    agents = [
        sandbox.up(name).popen([sys.executable, "-c", AGENT], stdout=subprocess.PIPE, text=True)
        for name in ("sbx_0", "sbx_1")
    ]
    outputs = [agent.communicate(timeout=60)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0]
    assert outputs[0].startswith("sbx_0") and first["event_id"] in outputs[0]
    assert outputs[1].startswith("sbx_1") and second["event_id"] in outputs[1]
    status = {e["event_id"]: (e["status"], e["approvals"]) for e in fresh.get("/v1/events")}
    assert status[first["event_id"]] == ("Started", ["sbx_0"])
    assert status[second["event_id"]] == ("Started", ["sbx_1"])


BOTOCORE = """
import json, botocore.session
from botocore.utils import IMDSFetcher, IMDSRegionProvider
session = botocore.session.Session()
fetcher = IMDSFetcher(timeout=5)  # its default endpoint: http://169.254.169.254/
token = fetcher._fetch_metadata_token()
events = fetcher._get_request("/latest/meta-data/events/maintenance/scheduled", None, token).text
session.set_config_variable("ec2_metadata_service_endpoint_mode", "ipv6")  # http://[fd00:ec2::254]/
print(json.dumps({"region": IMDSRegionProvider(session).provide(), "events": json.loads(events), "token": bool(token)}))
"""


def test_botocore_reads_the_region_and_a_scheduled_event_at_its_default_endpoints(fresh, sandbox):
    fresh.post("/v1/ec2/events", {"code": "system-reboot", "instances": [INSTANCE]}, expect=201)
    run = sandbox.up(INSTANCE).run([sys.executable, "-c", BOTOCORE], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert answer["region"] == "eu-west-3" and answer["token"]
    [event] = answer["events"]
    assert event["Code"] == "system-reboot" and event["State"] == "active"


def test_curl_gets_an_imdsv2_token_and_reads_with_it(sandbox):
    script = (
        "T=$(curl -sS -X PUT http://169.254.169.254/latest/api/token "
        "-H 'X-aws-ec2-metadata-token-ttl-seconds: 21600') && "
        'curl -sS -H "X-aws-ec2-metadata-token: $T" http://169.254.169.254/latest/meta-data/instance-id && echo && '
        "curl -s -o /dev/null -w '%{http_code}' http://169.254.169.254/latest/meta-data/instance-id && echo && "
        'curl -sS -g -H "X-aws-ec2-metadata-token: $T" http://[fd00:ec2::254]/latest/meta-data/placement/region'
    )
    run = sandbox.up(INSTANCE).run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    # With a token: the instance's id; without one: 401 (IMDSv2 required); the IPv6 endpoint takes the same token.
    assert run.stdout.splitlines() == [INSTANCE, "401", "eu-west-3"]


def test_the_compute_engine_sample_waits_unmodified_at_metadata_google_internal(fresh, sandbox):
    """Google's maintenance-event sample, byte for byte (http://metadata.google.internal, a hanging GET with
    wait_for_change and last_etag), as a Compute Engine instance: it sees the migration notice and its end."""
    assert GCE_SAMPLE.read_text().count("http://metadata.google.internal/computeMetadata/v1/") == 1
    machine = sandbox.up("sbx-gce")
    assert machine.kind == "gce_instance"
    sample = machine.popen([sys.executable, "-u", str(GCE_SAMPLE)], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(sample.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not fresh.get("/v1/gce/instances/sbx-gce")["watched"]:  # its first GET answered NONE; the next hangs
            assert time.monotonic() < deadline and sample.poll() is None, "the sample never asked"
            time.sleep(0.05)
        fresh.post("/v1/gce/maintenance", {"instances": ["sbx-gce"]}, expect=201)
        fresh.post("/v1/clock/next", expect=200)  # the migration starts
        fresh.post("/v1/clock/next", expect=200)  # and ends: NONE again
        while "Finished host maintenance\n" not in lines:
            assert time.monotonic() < deadline and sample.poll() is None, f"the sample printed {lines}"
            time.sleep(0.05)
        assert lines == ["Undergoing host maintenance: MIGRATE_ON_HOST_MAINTENANCE\n", "Finished host maintenance\n"]
    finally:
        sample.kill()
        sample.wait(10)


def test_metadata_google_internal_resolves_to_the_metadata_address(sandbox):
    run = sandbox.up("sbx-solo").run(["getent", "hosts", "metadata.google.internal"], capture_output=True, text=True)
    assert run.stdout.split() == ["169.254.169.254", "metadata.google.internal", "metadata"]


ESCAPE = """
import json, socket, sys
results = {}
for host, port in [(sys.argv[1], int(sys.argv[2])), ("8.8.8.8", 53), ("10.0.0.1", 80), ("127.0.0.1", int(sys.argv[2])),
                   ("169.254.169.254", 22), ("169.254.169.253", 80), ("::1", int(sys.argv[2])), ("2001:4860:4860::8888", 53),
                   ("169.254.169.254", 80)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        results[f"{host}:{port}"] = "connected"
    except OSError as error:
        results[f"{host}:{port}"] = type(error).__name__
print(json.dumps(results))
"""


def test_nothing_but_forewarn_is_reachable_from_a_sandbox(server, sandbox):
    """The host's own addresses (where the server's control API listens), the internet, other link-local addresses:
    all fail, in the namespace itself; only the metadata address answers."""
    host_address = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    target = host_address[0] if host_address else "192.0.2.1"
    vm = sandbox.up("sbx-solo")
    run = vm.run([sys.executable, "-c", ESCAPE, target, str(server.port)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout)
    assert results.pop("169.254.169.254:80") == "connected"
    assert set(results.values()) <= {"OSError", "ConnectionRefusedError"}, results
    assert len(results) == 8
    links = vm.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()
    assert [line.split(":")[1].strip() for line in links] == ["lo"]
    routes = vm.run(["ip", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    assert "default" not in routes and " via " not in routes


def test_exec_returns_the_exit_status_and_passes_sigterm_on(server):
    assert cli(server, "exec", "sbx-solo", "--", "sh", "-c", "exit 7").returncode == 7
    started = subprocess.Popen(
        [sys.executable, "-m", "forewarn", "--server", server.control, "sandbox", "exec", "sbx-solo", "--"]
        + ["sh", "-c", "trap 'echo got TERM; exit 9' TERM; echo ready; while :; do sleep 0.05; done"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert started.stdout.readline() == "ready\n"
    started.send_signal(signal.SIGTERM)
    out, _ = started.communicate(timeout=30)
    assert out == "got TERM\n" and started.returncode == 9
    assert not (NETNS_DIR / namespace_name("sbx-solo")).exists()


def sleepers_in(namespace: str) -> list[str]:
    """The pids of the ``sleep`` processes in ``namespace`` (none while it does not exist)."""
    if not (NETNS_DIR / namespace).exists():
        return []
    pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
    return [pid for pid in pids if _comm(pid) == "sleep"]


def _comm(pid: str) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:  # gone since it was listed
        return None


def test_a_killed_sandbox_is_removed_by_the_next_one(server):
    name = namespace_name("sbx_1")
    started = subprocess.Popen(
        [sys.executable, "-m", "forewarn", "--server", server.control, "sandbox", "exec", "sbx_1", "--", "sleep", "60"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        # The program itself, not any process in the namespace: while the sandbox is made, short-lived helpers pass
        # through it, and a busy run once saw one there, gone by the next look.
        wait_for(lambda: bool(sleepers_in(name)))
        [program] = sleepers_in(name)
    finally:
        started.kill()
        started.wait(10)
    assert (NETNS_DIR / name).exists()  # nothing ran to remove it
    wait_for(
        lambda: not Path(f"/proc/{program}").exists() or "Z" in Path(f"/proc/{program}/stat").read_text().split()[2]
    )
    listed = cli(server, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert name not in [row["namespace"] for row in json.loads(listed.stdout)]
    assert not (NETNS_DIR / name).exists()


def test_up_keeps_sandboxes_that_exec_joins_until_down(server):
    up = cli(server, "up", "sbx_0", "sbx_1", "--json")
    assert up.returncode == 0, up.stderr
    rows = json.loads(up.stdout)
    assert [(row["machine"], row["namespace"]) for row in rows] == [
        ("sbx_0", namespace_name("sbx_0")),
        ("sbx_1", namespace_name("sbx_1")),
    ]
    owner = rows[0]["owner_pid"]
    try:
        for name in ("sbx_0", "sbx_1"):
            joined = cli(server, "exec", name, "--", "curl", "-sS", "-H", "Metadata:true", AZURE_NAME)
            assert (joined.returncode, joined.stdout) == (0, name), joined.stderr
        again = cli(server, "up", "sbx_0")
        assert again.returncode == 1 and "sbx_0 already has a sandbox" in again.stderr
        assert cli(server, "down", "sbx_0").stdout == f"removed {namespace_name('sbx_0')}\n"
        assert Path(f"/proc/{owner}").exists()  # it still serves sbx_1
        assert cli(server, "down", "sbx_1").returncode == 0
        wait_for(lambda: not Path(f"/proc/{owner}").exists())
        missing = cli(server, "down", "sbx_1")
        assert missing.returncode == 1 and "no sandbox for sbx_1" in missing.stderr
    finally:
        cli(server, "down", "sbx_0", "sbx_1")
    assert not (NETNS_DIR / namespace_name("sbx_0")).exists()
    registered = {caller["address"] for caller in server.get("/v1/imds/callers")}
    assert not registered & {row["relay_address"] for row in rows}


def test_an_unknown_machine_is_refused_before_anything_is_made(server):
    run = cli(server, "exec", "sbx_9", "--", "true")
    assert run.returncode == 1
    assert run.stderr.startswith("forewarn: no VM, EC2 instance or Compute Engine instance named 'sbx_9' in the fleet")
    assert not (NETNS_DIR / namespace_name("sbx_9")).exists()


def test_a_server_that_does_not_answer_is_named(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "forewarn", "--server", "http://127.0.0.1:9", "sandbox", "exec", "sbx_0", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert (run.returncode, run.stderr) == (
        1,
        "forewarn: cannot reach forewarn's control API at http://127.0.0.1:9: start `forewarn serve`, or name its "
        "control API with --server (env FOREWARN_SERVER)\n",
    )
    assert not (NETNS_DIR / namespace_name("sbx_0")).exists()


def wait_for(condition, timeout: float = 20.0) -> None:
    """Until ``condition()`` holds: what another process does (a namespace made, a process gone) takes wall time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def test_a_restarted_server_learns_the_sandbox_again(tmp_path):
    """Registrations live in the server's memory; the sandbox gives them again to a server that restarted."""
    with Server(tmp_path, FLEET) as own:
        with Sandbox(own.control, tag=f"r{os.getpid()}") as box:
            vm = box.up("sbx_1")

            def name() -> str:
                return vm.run(["curl", "-s", "-H", "Metadata:true", AZURE_NAME], capture_output=True, text=True).stdout

            assert name() == "sbx_1"
            own.stop()
            own.start()
            assert own.port == int(own.control.rsplit(":", 1)[1])
            wait_for(lambda: name() == "sbx_1", timeout=10)


def test_up_in_the_foreground_holds_until_interrupted(server):
    held = subprocess.Popen(
        [sys.executable, "-m", "forewarn", "--server", server.control, "sandbox", "up", "sbx-web", "--foreground"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        assert held.stdout.readline().split()[0] == "MACHINE"
        assert held.stdout.readline().split()[:3] == ["sbx-web", "ec2_instance", namespace_name(INSTANCE)]
        # an instance's name tag is not its id: the sandbox is named as asked, the server knows the instance
        token = (
            "$(curl -s -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60')"
        )
        script = f'curl -s -H "X-aws-ec2-metadata-token: {token}" http://169.254.169.254/latest/meta-data/instance-id'
        joined = cli(server, "exec", "sbx-web", "--", "sh", "-c", script)
        assert joined.stdout == INSTANCE, joined.stderr
    finally:
        held.send_signal(signal.SIGINT)
        held.wait(30)
    assert held.returncode == 0
    assert not (NETNS_DIR / namespace_name(INSTANCE)).exists()


def test_shell_is_a_shell_as_the_machine(server):
    run = subprocess.run(
        [sys.executable, "-m", "forewarn", "--server", server.control, "sandbox", "shell", "sbx-solo"],
        input='echo "I am $FOREWARN_VM"\ncurl -s -H Metadata:true \'' + AZURE_NAME + "'; echo\nexit 4\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "SHELL": "/bin/sh"},
    )
    assert run.returncode == 4
    assert run.stdout.splitlines() == ["I am sbx-solo", "sbx-solo"]


INSTANCE_ID = (
    "T=$(curl -s -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60') && "
    'curl -s -H "X-aws-ec2-metadata-token: $T" http://169.254.169.254/latest/meta-data/instance-id'
)


def test_names_that_read_alike_get_namespaces_of_their_own(server):
    """`rel x` and `rel-x` (and `relé` and `relá`) each answer as themselves, whichever sandbox was made first."""
    up = cli(server, "up", "sbx rel x", "sbx-relé", "--json")
    assert up.returncode == 0, up.stderr
    try:
        namespaces = [row["namespace"] for row in json.loads(up.stdout)]
        assert namespaces == [namespace_name(TWINS["sbx rel x"]), namespace_name(TWINS["sbx-relé"])]
        for name, instance in TWINS.items():
            run = cli(server, "exec", name, "--", "sh", "-c", INSTANCE_ID)
            assert (run.returncode, run.stdout) == (0, instance), (name, run.stderr)
    finally:
        cli(server, "down", "sbx rel x", "sbx-relé")


def test_a_name_as_long_as_a_tag_can_be_runs_and_a_longer_one_is_refused_in_a_sentence(server):
    run = cli(server, "exec", LONG_NAME, "--", "sh", "-c", INSTANCE_ID)
    assert (run.returncode, run.stdout) == (0, LONG_ID), run.stderr
    assert len(namespace_name(LONG_ID)) < 64
    too_long = "sbx-" + "y" * 299  # 303 characters: no machine has such a name
    refused = cli(server, "exec", too_long, "--", "true")
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"forewarn: no VM, EC2 instance or Compute Engine instance named '{too_long}'")
    assert "Traceback" not in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_exec_refuses_a_sandbox_made_for_another_server(server, tmp_path):
    """Two servers with one fleet: `exec` with the second one's --server does not join the first one's sandbox (its
    program would talk to the first server) and changes nothing."""
    up = cli(server, "up", "sbx-solo", "--json")
    assert up.returncode == 0, up.stderr
    try:
        [row] = json.loads(up.stdout)
        assert (row["identity"], row["server"]) == ("sbx-solo", server.control)
        with Server(tmp_path, FLEET) as other:
            refused = cli(other, "exec", "sbx-solo", "--", "echo", "joined")
            assert refused.returncode == 1 and refused.stdout == ""
            assert refused.stderr == (
                f"forewarn: sbx-solo's sandbox {row['namespace']} (process {row['owner_pid']}) was made for the "
                f"server at {server.control}, not for the one at {other.control} (--server): `forewarn sandbox down "
                "sbx-solo` removes it\n"
            )
            assert other.get("/v1/imds/callers") == []
        joined = cli(server, "exec", "sbx-solo", "--", "curl", "-sS", "-H", "Metadata:true", AZURE_NAME)
        assert (joined.returncode, joined.stdout) == (0, "sbx-solo"), joined.stderr
    finally:
        cli(server, "down", "sbx-solo")
