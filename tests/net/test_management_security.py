"""The management ports against the attacks a probe found, on a real ``forewarn serve`` with real clients.

- EC2 Query API: the region is read only from the signed credential scope; malformed SigV4 headers are refused.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import httpx
import pytest

from helpers import Server

EAST, WEST = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"
EC2_FLEET = f"""
hosts: [{{name: h1}}, {{name: h2}}]
vms:
  - {{name: solo, host: h1}}
ec2_instances:
  - {{id: {EAST}, host: h1}}
  - {{id: {WEST}, host: h2, availability_zone: us-west-2c}}
"""
KEY, SECRET = "AKIAFOREWARNSECURITY", "security-secret"
DESCRIBE = "Action=DescribeInstanceStatus&Version=2016-11-15"


def ec2_error(response: httpx.Response) -> tuple[int, str]:
    root = ET.fromstring(response.content)
    assert root.tag == "Response", response.text
    return response.status_code, root.findtext("Errors/Error/Code")


def instance_ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return sorted(
        element.text for element in ET.fromstring(response.content).iter() if element.tag.endswith("}instanceId")
    )


def signed_describe(server: Server, region: str = "us-east-1") -> dict[str, str]:
    """The headers botocore signs a DescribeInstanceStatus with, for ``region``."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(
        "POST",
        server.ec2 + "/",
        data=DESCRIBE,
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    SigV4Auth(Credentials(KEY, SECRET), "ec2", region).add_auth(request)
    return dict(request.headers.items())


@pytest.fixture
def signed_server(tmp_path):
    server = Server(tmp_path, EC2_FLEET, extra=["--ec2-credential", f"{KEY}:{SECRET}"]).start()
    yield server
    server.stop()


def test_ec2_region_comes_from_the_signed_credential_scope_only(signed_server):
    server = signed_server
    headers = signed_describe(server)
    assert instance_ids(httpx.post(server.ec2 + "/", content=DESCRIBE, headers=headers)) == [EAST]
    # The attack: an unsigned component that ends in "Credential=" ahead of the signed one, naming another region.
    # The signature still verifies (it covers the real Credential=); the region must not come from the prefix.
    algorithm, _, rest = headers["Authorization"].partition(" ")
    for forged in (
        f"{algorithm} XCredential={KEY}/20260420/us-west-2/ec2/aws4_request, {rest}",
        f"{algorithm} {rest}, Credential={KEY}/20260420/us-west-2/ec2/aws4_request",
        f"{algorithm} {rest}, XCredential={KEY}/20260420/us-west-2/ec2/aws4_request",
    ):
        response = httpx.post(server.ec2 + "/", content=DESCRIBE, headers={**headers, "Authorization": forged})
        assert ec2_error(response) == (400, "IncompleteSignature"), forged
        assert WEST not in response.text
    # boto3 signed for us-west-2 sees us-west-2, as a regional endpoint does.
    import boto3
    from botocore.config import Config

    def client(region):
        return boto3.client(
            "ec2",
            endpoint_url=server.ec2,
            region_name=region,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            config=Config(retries={"max_attempts": 1}),
        )

    assert [s["InstanceId"] for s in client("us-west-2").describe_instance_status()["InstanceStatuses"]] == [WEST]
    assert [s["InstanceId"] for s in client("us-east-1").describe_instance_status()["InstanceStatuses"]] == [EAST]


def test_ec2_malformed_authorization_is_refused_even_unverified(tmp_path):
    """Without --ec2-credential nothing is verified, but the header is still read strictly for its region."""
    server = Server(tmp_path, EC2_FLEET).start()
    try:
        good = "AWS4-HMAC-SHA256 Credential=x/20260420/us-west-2/ec2/aws4_request, SignedHeaders=host, Signature=abc"
        assert instance_ids(httpx.post(server.ec2 + "/", content=DESCRIBE, headers={"Authorization": good})) == [WEST]
        for malformed in (
            "AWS4-HMAC-SHA256 XCredential=x/20260420/us-west-2/ec2/aws4_request, "
            "Credential=x/20260420/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=abc",
            "AWS4-HMAC-SHA256 Credential=x/20260420/us-west-2/ec2/aws4_request, SignedHeaders=host",
            "AWS4-HMAC-SHA256 Credential=x/us-west-2/ec2/aws4_request, SignedHeaders=host, Signature=a",
            "AWS4-HMAC-SHA256 Credential=x/20260420/us-west-2/ec2/aws4_request SignedHeaders=host",
            "Bearer token",
        ):
            response = httpx.post(server.ec2 + "/", content=DESCRIBE, headers={"Authorization": malformed})
            assert ec2_error(response) == (400, "IncompleteSignature"), malformed
        presigned = httpx.post(
            server.ec2 + "/", params={"X-Amz-Credential": "x/20260420/us-west-2/ec2"}, content=DESCRIBE
        )
        assert ec2_error(presigned) == (400, "IncompleteSignature")
        assert instance_ids(httpx.post(server.ec2 + "/", content=DESCRIBE)) == [EAST, WEST]  # unsigned: every region
    finally:
        server.stop()


# ============================================================================ browsers and DNS rebinding
SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
CENTRAL = "{scheduled_events_additional_publishing_targets: {event_grid_and_resource_graph: {enable: true}}}"
FLEET = f"""
defaults: {{subscription: {SUB}, resource_group: contoso-rg, location: westeurope}}
hosts: [{{name: h1}}, {{name: h2}}]
vms:
  - {{name: central-vm, host: h1, scheduled_events_policy: {CENTRAL}}}
  - {{name: plain-vm, host: h2}}
ec2_instances:
  - {{id: {EAST}, host: h1}}
"""
START = "2026-04-20T22:11:58Z"
RESTART = (
    f"/subscriptions/{SUB}/resourceGroups/contoso-rg/providers/Microsoft.Compute/virtualMachines/central-vm/"
    "restart?api-version=2024-07-01"
)
WINDOW = {
    "Action": "CreateInstanceEventWindow",
    "Version": "2016-11-15",
    "Name": "x",
    "CronExpression": "* 0-4 * * 1,2",
}
ATTACKER = "http://attacker.example"


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("security"), FLEET) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


@pytest.fixture
def own_server(tmp_path):
    """For the tests that create Event Grid topics: the registry is configuration, which a reset keeps."""
    with Server(tmp_path, FLEET) as running:
        yield running


def control_error(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def clock_now(server: Server) -> str:
    return server.get("/v1/clock")["now"]


def test_web_pages_cannot_drive_the_control_api(server):
    control = server.control
    rebound = {"Host": f"attacker.example:{server.port}"}  # DNS rebinding: the page's own name, now at 127.0.0.1
    attacks = [
        # a page's fetch(..., {method: "POST", body: "x"}) is text/plain and needs no preflight
        (
            lambda: httpx.post(f"{control}/v1/clock/next", content=b"x", headers={"Content-Type": "text/plain"}),
            (415, "UnsupportedMediaType"),
        ),
        (
            lambda: httpx.post(
                f"{control}/v1/clock/advance",
                content=b"by=1h",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            ),
            (415, "UnsupportedMediaType"),
        ),
        (lambda: httpx.post(f"{control}/v1/clock/next", headers={"Origin": ATTACKER}), (403, "CrossOriginRequest")),
        (lambda: httpx.post(f"{control}/v1/clock/next", headers={"Origin": "null"}), (403, "CrossOriginRequest")),
        (
            lambda: httpx.post(f"{control}/v1/clock/next", json={}, headers={"Sec-Fetch-Site": "cross-site"}),
            (403, "CrossOriginRequest"),
        ),
        (
            lambda: httpx.post(
                f"{control}/v1/clock/next",
                json={},
                headers={"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},
            ),
            (403, "CrossOriginRequest"),
        ),
        (lambda: httpx.post(f"{control}/v1/clock/next", json={}, headers=rebound), (400, "InvalidHost")),
        (
            lambda: httpx.post(f"{control}/v1/events", json={"type": "Reboot", "vms": ["plain-vm"]}, headers=rebound),
            (400, "InvalidHost"),
        ),
        (lambda: httpx.get(f"{control}/v1/fleet", headers=rebound), (400, "InvalidHost")),  # nothing to read either
    ]
    for attack, expected in attacks:
        assert control_error(attack()) == expected
    assert clock_now(server) == START and server.get("/v1/events", all="true") == []
    assert server.get("/v1/journal") == []
    # The server's own pages (the OpenAPI UI at /docs) are of its own origin, and may.
    same = httpx.post(
        f"{control}/v1/clock/advance", json={"by": "1m"}, headers={"Origin": control, "Sec-Fetch-Site": "same-origin"}
    )
    assert same.status_code == 200 and same.json()["now"] == "2026-04-20T22:12:58Z"
    assert httpx.get(f"http://localhost:{server.port}/v1/clock").status_code == 200  # a loopback name


def test_web_pages_cannot_drive_the_arm_port(server):
    arm = server.arm
    attacks = [
        (lambda: httpx.post(arm + RESTART, data={"a": "b"}), (415, "UnsupportedMediaType")),  # an HTML form
        (
            lambda: httpx.post(arm + RESTART, content=b"", headers={"Content-Type": "text/plain"}),
            (415, "UnsupportedMediaType"),
        ),
        (lambda: httpx.post(arm + RESTART, headers={"Origin": ATTACKER}), (403, "CrossOriginRequest")),
        (lambda: httpx.post(arm + RESTART, headers={"Sec-Fetch-Site": "cross-site"}), (403, "CrossOriginRequest")),
        (lambda: httpx.post(arm + RESTART, headers={"Host": "attacker.example"}), (400, "InvalidHost")),
    ]
    for attack, expected in attacks:
        response = attack()
        assert control_error(response) == expected, response.text  # ARM's {"error": {"code", "message"}}
        assert response.headers["x-ms-request-id"]
    assert server.get("/v1/events", all="true") == []  # no VM restarted
    # The same request from a client (no body, as curl and the SDKs send it) restarts the VM.
    assert httpx.post(arm + RESTART).status_code == 202
    assert [event["type"] for event in server.get("/v1/events")] == ["Reboot"]


def test_web_pages_cannot_drive_the_ec2_api(server):
    ec2 = server.ec2
    attacks = [
        (lambda: httpx.post(ec2 + "/", data=WINDOW, headers={"Origin": ATTACKER}), (403, "UnauthorizedOperation")),
        # <img src="http://127.0.0.1:PORT/?Action=CreateInstanceEventWindow&..."> sends no Origin
        (
            lambda: httpx.get(ec2 + "/", params=WINDOW, headers={"Sec-Fetch-Site": "cross-site"}),
            (403, "UnauthorizedOperation"),
        ),
        (
            lambda: httpx.post(ec2 + "/", data=WINDOW, headers={"Host": f"attacker.example:{server.ec2_port}"}),
            (400, "InvalidRequest"),
        ),
    ]
    for attack, expected in attacks:
        assert ec2_error(attack()) == expected
    import boto3

    client = boto3.client(
        "ec2", endpoint_url=ec2, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    assert client.describe_instance_event_windows()["InstanceEventWindows"] == []  # nothing was created
    created = client.create_instance_event_window(Name="ops", CronExpression="* 0-4 * * 1,2")
    assert created["InstanceEventWindow"]["Name"] == "ops"


def test_real_clients_still_work(server, tmp_path):
    import os
    import subprocess
    import sys

    from helpers import ROOT

    # The forewarn CLI, curl, and the aws CLI (Host: 127.0.0.1:PORT, form body, SigV4 header).
    env = {"PYTHONPATH": str(ROOT / "src")}
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "forewarn",
            "--server",
            server.control,
            "schedule",
            "--type",
            "Freeze",
            "--vm",
            "plain-vm",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert cli.returncode == 0, cli.stderr
    curl = subprocess.run(
        ["curl", "-sf", "-X", "POST", f"{server.control}/v1/clock/next"], capture_output=True, text=True, timeout=30
    )
    assert curl.returncode == 0 and json_now(curl.stdout) == "2026-04-20T22:26:58Z"
    curl = subprocess.run(
        [
            "curl",
            "-sf",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            '{"by": "1m"}',
            f"http://localhost:{server.port}/v1/clock/advance",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert curl.returncode == 0 and json_now(curl.stdout) == "2026-04-20T22:27:58Z"
    aws_env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    aws_env.update(
        AWS_ACCESS_KEY_ID="x",
        AWS_SECRET_ACCESS_KEY="y",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_PAGER="",
    )
    aws = subprocess.run(
        [
            sys.executable,
            "-m",
            "awscli",
            "ec2",
            "create-instance-event-window",
            "--name",
            "cli",
            "--cron-expression",
            "* 0-4 * * 1,2",
            "--endpoint-url",
            server.ec2,
            "--output",
            "json",
        ],
        env=aws_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert aws.returncode == 0, aws.stderr
    # The Azure SDK: Resource Graph through azure-core's pipeline (its own User-Agent, JSON body, bearer token).
    from azure.core.credentials import AccessToken
    from azure.mgmt.resourcegraph import ResourceGraphClient
    from azure.mgmt.resourcegraph.models import QueryRequest

    class StaticToken:
        def get_token(self, *scopes, **kwargs):
            return AccessToken("any-token", 4102444800)

    server.schedule(type="Freeze", vms=["central-vm"])
    graph = ResourceGraphClient(StaticToken(), base_url=server.arm)
    result = graph.resources(
        QueryRequest(subscriptions=[SUB], query="maintenanceresources | project name"), enforce_https=False
    )
    assert result.total_records == 1


def json_now(text: str) -> str:
    import json

    return json.loads(text)["now"]


def test_allowed_host_names_are_answered(tmp_path):
    with Server(tmp_path, FLEET, extra=["--allowed-host", "forewarn.test", "--allowed-host", ".lab.test"]) as server:
        for name, status in (("forewarn.test", 200), ("ci.lab.test", 200), ("lab.test", 200), ("other.test", 400)):
            assert httpx.get(f"{server.control}/v1/clock", headers={"Host": name}).status_code == status, name
            arm = httpx.get(
                f"{server.arm}/subscriptions/{SUB}/resourceGroups/contoso-rg/providers/Microsoft.Compute/"
                "virtualMachines?api-version=2024-07-01",
                headers={"Host": name},
            )
            assert arm.status_code == status, name


# ===================================================================================== the control token
def serve_run(tmp_path, *extra: str, env: dict | None = None):
    import subprocess
    import sys

    from helpers import ROOT

    return subprocess.run(
        [sys.executable, "-m", "forewarn", "serve", *Server(tmp_path, FLEET).args, *extra],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src"), **(env or {})},
    )


def test_beyond_loopback_the_control_api_needs_a_token(tmp_path):
    refused = serve_run(tmp_path, "--host", "0.0.0.0")
    assert refused.returncode == 1
    assert "refusing to start" in refused.stderr and "--control-token" in refused.stderr
    assert "--insecure" in refused.stderr
    assert serve_run(tmp_path, "--host", "0.0.0.0", "--control-token", " ").returncode == 2  # a usage error


def test_the_control_token_is_the_control_ports_access_rule(tmp_path):
    import subprocess
    import sys

    from forewarn.scenarios.api import Api, ApiError
    from helpers import ROOT

    token = "s3cret-token"
    server = Server(tmp_path, FLEET, extra=["--host", "0.0.0.0", "--control-token", token]).start()
    try:
        control = server.control  # bound to 0.0.0.0, reached through 127.0.0.1
        assert httpx.get(f"{control}/healthz").status_code == 200  # the liveness probe needs none
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}, {"Authorization": "Basic x"}):
            response = httpx.post(f"{control}/v1/clock/next", headers=headers)
            assert control_error(response) == (401, "Unauthorized"), headers
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert control_error(httpx.get(f"{control}/openapi.json", headers=headers)) == (401, "Unauthorized")
        authorized = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{control}/v1/clock", headers=authorized).json()["now"] == START  # the refusals moved nothing
        # Browser rules still apply with the token.
        assert control_error(httpx.post(f"{control}/v1/clock/next", headers={**authorized, "Origin": ATTACKER})) == (
            403,
            "CrossOriginRequest",
        )
        # The CLI: from the environment, or the option; without it, a readable refusal.
        env = {"PYTHONPATH": str(ROOT / "src")}

        def cli(*args, extra_env=None):
            return subprocess.run(
                [sys.executable, "-m", "forewarn", "--server", control, *args],
                capture_output=True,
                text=True,
                timeout=60,
                env={**env, **(extra_env or {})},
            )

        missing = cli("clock", "next")
        assert missing.returncode == 1 and "needs its token" in missing.stderr and "HTTP 401" in missing.stderr
        assert cli("clock", "advance", "1m", extra_env={"FOREWARN_CONTROL_TOKEN": token}).returncode == 0
        assert cli("--control-token", token, "clock", "advance", "1m").returncode == 0
        # The scenario runner's client.
        assert Api(control, token=token).get("/v1/clock")["now"] == "2026-04-20T22:13:58Z"
        with pytest.raises(ApiError) as refused:
            Api(control).get("/v1/clock")
        assert refused.value.status == 401
        # ARM and EC2 keep their own credentials: the control token is not asked for there.
        assert httpx.post(server.arm + RESTART).status_code == 202
        log = server.log_path.read_text()
        assert "the ARM port listens on 0.0.0.0 without --access" in log
        assert "the EC2 API listens on 0.0.0.0 without --ec2-credential" in log
        assert "INSECURE" not in log
    finally:
        server.stop()


def test_insecure_consent_starts_and_warns_loudly(tmp_path):
    server = Server(tmp_path, FLEET, extra=["--host", "0.0.0.0", "--insecure"]).start()
    try:
        assert httpx.post(f"{server.control}/v1/clock/next").status_code == 200
        log = server.log_path.read_text()
        assert "WARNING" in log and "INSECURE: the control API listens on 0.0.0.0 WITHOUT A TOKEN" in log
    finally:
        server.stop()


# ======================================================================= forewarn never calls itself
EVENTGRID_API = "2025-02-15"


def topic_url(server: Server) -> str:
    return f"{server.arm}/subscriptions/{SUB}/resourceGroups/events-rg/providers/Microsoft.EventGrid/systemTopics/maintenance"


def put_subscription(server: Server, name: str, endpoint: str, skip: bool = False, **properties):
    body = {
        "properties": {
            "destination": {"endpointType": "WebHook", "properties": {"endpointUrl": endpoint}},
            **properties,
        }
    }
    return httpx.put(
        f"{topic_url(server)}/eventSubscriptions/{name}",
        params={"api-version": EVENTGRID_API},
        json=body,
        headers={"x-forewarn-skip-validation": "true"} if skip else {},
        timeout=40,
    )


def test_an_event_grid_subscription_cannot_target_forewarn_itself(own_server):
    server = own_server
    created = httpx.put(
        topic_url(server),
        params={"api-version": EVENTGRID_API},
        json={
            "location": "global",
            "properties": {
                "source": f"/subscriptions/{SUB}",
                "topicType": "Microsoft.ResourceNotifications.MaintenanceResources",
            },
        },
    )
    assert created.status_code == 201, created.text
    # The exact attack: the validation handshake POSTed to the control API's /v1/clock/next moved the clock.
    attack = put_subscription(server, "tick", f"{server.control}/v1/clock/next")
    assert attack.status_code == 400, attack.text
    error = attack.json()["error"]
    assert error["code"] == "InvalidRequest" and error["message"].startswith("Invalid event subscription request: ")
    assert "the control API" in error["message"]
    assert error["target"] == "properties.destination.properties.endpointUrl"
    # Other spellings of the same listeners, every listener, either schema, with or without the handshake.
    for name, endpoint, extra in (
        ("by-name", f"http://localhost:{server.port}/v1/clock/next", {}),
        ("wildcard", f"http://0.0.0.0:{server.port}/v1/clock/next", {}),
        ("alias", f"http://127.0.0.2:{server.port}/v1/clock/next", {}),
        ("skipped", f"{server.control}/v1/clock/next", {"skip": True}),
        ("cloud", f"{server.control}/v1/clock/next", {"eventDeliverySchema": "CloudEventSchemaV1_0"}),
        ("arm", f"{server.arm}{RESTART}", {}),
        ("ec2", f"{server.ec2}/?Action=CreateInstanceEventWindow", {}),
        ("imds", f"{server.imds}/metadata/scheduledevents", {}),
        # The root's dot: the same hosts, which need not resolve where the check runs.
        ("dotted-name", f"http://localhost.:{server.port}/v1/clock/next", {}),
        ("dotted-address", f"http://127.0.0.1.:{server.port}/v1/clock/next", {}),
        ("dotted-twice", f"http://localhost..:{server.port}/v1/clock/next", {}),
    ):
        refused = put_subscription(server, name, endpoint, **extra)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "InvalidRequest", (name, refused.text)
        assert "leads to this forewarn server itself" in refused.json()["error"]["message"], (name, refused.text)
    assert clock_now(server) == START
    assert server.get("/v1/events", all="true") == [] and server.get("/v1/journal") == []
    listed = httpx.get(f"{topic_url(server)}/eventSubscriptions", params={"api-version": EVENTGRID_API})
    assert listed.json()["value"] == []


def test_deliveries_never_reach_forewarn_itself(tmp_path):
    """Subscriptions and webhooks that no request ever checked (declared at start) are refused when sent."""
    import json
    import time

    server = Server(tmp_path, FLEET)
    self_url = f"http://localhost:{server.port}/v1/clock/next"  # a name, resolved when sent
    section = {
        "system_topics": [
            {
                "name": "maintenance",
                "subscription": SUB,
                "resource_group": "events-rg",
                "event_subscriptions": [
                    {
                        "name": "loop",
                        "skip_validation": True,
                        "properties": {
                            "destination": {"endpointType": "WebHook", "properties": {"endpointUrl": self_url}}
                        },
                    }
                ],
            }
        ]
    }
    (tmp_path / "fleet.yaml").write_text(FLEET + "event_grid: " + json.dumps(section) + "\n")
    server.args += ["--health-webhook", self_url, "--health-webhook", f"http://0.0.0.0:{server.port}/v1/clock/next"]
    server.start()
    try:
        server.schedule(type="Reboot", vms=["central-vm"])  # published to Event Grid
        assert (
            httpx.post(
                f"{server.control}/v1/ec2/events", json={"code": "system-reboot", "instances": [EAST]}
            ).status_code
            == 201
        )  # an AWS Health message per webhook
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            sent = server.get("/v1/deliveries")
            if len(sent) == 3 and all(d["attempts"] >= 1 for d in sent):
                break
            time.sleep(0.02)  # waiting for the server's sender task, not for simulated time
        assert sorted(d["kind"] for d in sent) == ["eventgrid", "webhook", "webhook"]
        for delivery in sent:
            assert delivery["attempts"] >= 1 and delivery["status"] != "delivered", delivery
            assert "refused" in delivery["last_error"] and "the control API" in delivery["last_error"], delivery
        assert clock_now(server) == START
        assert "leads to this forewarn server itself" in server.log_path.read_text()
    finally:
        server.stop()


def test_endpoints_named_by_dns_still_receive_handshakes_and_deliveries(own_server, tmp_path):
    """A webhook reached through a name (resolved and checked when sent, then sent to the checked address with the
    original Host) gets the handshake and the events as before."""
    server = own_server
    from eventgrid_helpers import Webhook, wait_for

    hook = Webhook(tmp_path).start()
    try:
        assert (
            httpx.put(
                topic_url(server),
                params={"api-version": EVENTGRID_API},
                json={
                    "location": "global",
                    "properties": {
                        "source": f"/subscriptions/{SUB}",
                        "topicType": "Microsoft.ResourceNotifications.MaintenanceResources",
                    },
                },
            ).status_code
            == 201
        )
        endpoint = f"http://localhost:{hook.port}/named"
        made = put_subscription(server, "named", endpoint)
        assert made.status_code == 201 and made.json()["properties"]["provisioningState"] == "Succeeded", made.text
        [handshake] = hook.requests("/named", kind="SubscriptionValidation")
        assert handshake["headers"]["host"] == f"localhost:{hook.port}"
        server.schedule(type="Freeze", vms=["central-vm"])
        assert wait_for(lambda: len(hook.events("/named")) == 1)
        assert hook.requests("/named")[0]["headers"]["host"] == f"localhost:{hook.port}"
    finally:
        hook.stop()


# ============================================================================================== pure: the guard
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from forewarn.net.browser_guard import BrowserGuard, HostNames  # noqa: E402

HEADER_TEXT = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.sampled_from(
        [
            "127.0.0.1:8170",
            "[::1]:8170",
            "localhost",
            "evil.example",
            "null",
            "http://127.0.0.1:8170",
            "text/plain; charset=x",
            "same-origin",
        ]
    ),
)


@settings(max_examples=300, deadline=200)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "OPTIONS"]),
    host=HEADER_TEXT,
    origin=HEADER_TEXT,
    site=HEADER_TEXT,
    content_type=HEADER_TEXT,
)
def test_property_the_guard_answers_any_headers_without_failing(method, host, origin, site, content_type):
    headers = {
        name: value
        for name, value in (
            ("host", host),
            ("origin", origin),
            ("sec-fetch-site", site),
            ("content-type", content_type),
        )
        if value is not None
    }
    refusal = BrowserGuard(HostNames(), json_api=True).check(method, headers)
    assert refusal is None or refusal.status in (400, 403, 415)
    if origin is not None and refusal is None:  # an Origin passes only when it names the Host it came to
        assert host is not None and origin.startswith(("http://", "https://"))


def test_host_names_by_rule():
    hosts = HostNames(allowed=[".lab.test", "Forewarn.Test."], own=["0.0.0.0"])
    for name in (
        "localhost",
        "LOCALHOST.",
        "api.localhost",
        "127.0.0.1",
        "127.9.9.9",
        "::1",
        "10.1.2.3",
        "fe80::1",
        "forewarn.test",
        "lab.test",
        "a.b.lab.test",
    ):
        assert hosts.allows(name), name
    for name in ("evil.example", "127.0.0.1.nip.io", "0x7f.1", "localhost.evil.example", "xlab.test", ""):
        assert not hosts.allows(name), name
    assert HostNames(allowed=["*"]).allows("anything.example")
    guard = BrowserGuard(hosts, json_api=False)
    assert guard.check("POST", {"host": "127.0.0.1:8172", "content-type": "application/x-www-form-urlencoded"}) is None
    assert guard.check("GET", {"host": "localhost:8170", "origin": "http://localhost:8170"}) is None
    assert guard.check("GET", {"host": "localhost", "origin": "http://localhost:80"}) is None
    assert (
        guard.check("GET", {"host": "localhost:8170", "origin": "http://localhost:8171"}).code == "CrossOriginRequest"
    )
    assert guard.check("GET", {"host": "localhost:8170", "origin": "https://localhost:8170"}) is None
    assert guard.check("GET", {"origin": "http://localhost:8170"}).code == "CrossOriginRequest"  # no Host to match
    assert guard.check("GET", {"host": "a:b:c"}).code == "InvalidHost"
