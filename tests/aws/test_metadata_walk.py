"""Real clients walking the metadata endpoints of a real server, as instance-reading libraries do: every key a
listing names must answer, with IMDSv1 and IMDSv2, in every version; botocore's own IMDS fetcher; paths built by
concatenation (``//``); Azure's ``extended=true``."""

from __future__ import annotations

import http.client
import json

import pytest
import requests

from helpers import Server

EBS = "i-0aaaaaaaaaaaaaaa1"
SPOT = "i-0ddddddddddddddd4"
ADDRESS = "127.0.0.61"
FLEET = f"""
default_vm: solo
hosts: [{{name: h1}}, {{name: h2}}]
vms: [{{name: solo, host: h1}}]
ec2_instances:
  - {{id: {EBS}, host: h1, name: db, availability_zone: eu-west-1b, tags: {{Env: dev}}, imds: {{address: {ADDRESS}}}}}
  - {{id: {SPOT}, host: h2, spot: true, auto_scaling_group: workers, root_device: instance-store,
     imds: {{address: 127.0.0.62}}}}
"""
TTL = {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("walk"), FLEET).start()
    yield server
    server.stop()


def walk(session: requests.Session, base: str, path: str, headers: dict) -> dict[str, str]:
    """Every value under ``path`` (a directory, ending in ``/``), by path, reading the tree the way cloud-init's
    and boto's whole-instance readers do: a name ending in ``/`` is a directory to list, any other is a value. Also
    checks that each directory answers the same without its slash, and each value the same with one."""
    values: dict[str, str] = {}
    pending = [path]
    while pending:
        directory = pending.pop()
        listing = session.get(base + directory, headers=headers, timeout=5)
        assert listing.status_code == 200, directory
        assert listing.headers["Content-Type"].startswith("text/plain")
        again = session.get(base + directory.rstrip("/"), headers=headers, timeout=5)
        assert (again.status_code, again.text) == (200, listing.text), directory
        names = listing.text.split("\n") if listing.text else []
        assert len(names) == len(set(names)) and all(names), (directory, names)
        assert not listing.text.endswith("\n")
        for name in names:
            if name.endswith("/"):
                pending.append(directory + name)
                continue
            answer = session.get(base + directory + name, headers=headers, timeout=5)
            assert answer.status_code == 200, directory + name
            with_slash = session.get(base + directory + name + "/", headers=headers, timeout=5)
            assert (with_slash.status_code, with_slash.text) == (200, answer.text), directory + name
            values[directory + name] = answer.text
    return values


@pytest.mark.parametrize("imds_version", ["v1", "v2"])
def test_the_whole_tree_answers_every_key_it_lists(server, imds_version):
    base = f"http://{ADDRESS}:{server.imds_port}"
    with requests.Session() as session:
        headers = {}
        if imds_version == "v2":
            token = session.put(base + "/latest/api/token", headers=TTL, timeout=5)
            assert token.status_code == 200
            headers = {"X-aws-ec2-metadata-token": token.text}
        assert session.get(base + "/latest/", headers=headers, timeout=5).text == "dynamic\nmeta-data"
        meta = walk(session, base, "/latest/meta-data/", headers)
        dynamic = walk(session, base, "/latest/dynamic/", headers)
    mac = meta["/latest/meta-data/mac"]
    interface = f"/latest/meta-data/network/interfaces/macs/{mac}/"
    assert meta[interface + "local-ipv4s"] == meta["/latest/meta-data/local-ipv4"] == "10.0.0.10"
    assert meta[interface + "owner-id"] == "123456789012"
    assert meta[interface + "subnet-ipv4-cidr-block"] == "10.0.0.0/24"
    assert meta["/latest/meta-data/placement/availability-zone"] == "eu-west-1b"
    assert meta["/latest/meta-data/tags/instance/Env"] == "dev"
    assert meta["/latest/meta-data/events/maintenance/scheduled"] == "[ ]"
    document = json.loads(dynamic["/latest/dynamic/instance-identity/document"])
    assert document["instanceId"] == EBS and document["privateIp"] == "10.0.0.10"
    assert document["region"] == meta["/latest/meta-data/placement/region"] == "eu-west-1"
    assert len(meta) >= 35


@pytest.mark.parametrize("version", ["1.0", "2009-04-04", "2016-06-30", "2021-03-23"])
def test_every_dated_version_is_a_consistent_tree(server, version):
    base = "http://127.0.0.62:" + str(server.imds_port)
    with requests.Session() as session:
        versions = session.get(base + "/", timeout=5).text.split("\n")
        assert version in versions and versions[-1] == "latest"
        listing = session.get(f"{base}/{version}/", timeout=5).text.split("\n")
        assert listing == (["dynamic", "meta-data"] if version >= "2009-04-04" else ["meta-data"])
        for part in listing:
            walk(session, base, f"/{version}/{part}/", {})


def test_botocore_finds_the_region_and_reads_the_tree(server):
    """botocore's region lookup asks ``placement/availability-zone/`` (with the slash), with an IMDSv2 token."""
    from botocore.utils import InstanceMetadataFetcher, InstanceMetadataRegionFetcher

    base = f"http://{ADDRESS}:{server.imds_port}"
    assert InstanceMetadataRegionFetcher(base_url=base, num_attempts=1).retrieve_region() == "eu-west-1"
    # No IAM role: the credential fetcher finds none (a 404 on iam/security-credentials/), and says so quietly.
    assert InstanceMetadataFetcher(base_url=base, num_attempts=1).retrieve_iam_role_credentials() == {}
    # A base URL configured with a slash too many gives it ``//latest/api/token`` and ``//latest/meta-data/...``,
    # which real IMDS serves.
    assert InstanceMetadataRegionFetcher(base_url=base + "//", num_attempts=1).retrieve_region() == "eu-west-1"


def raw_get(host: str, port: int, path: str, headers: dict | None = None) -> tuple[int, bytes, str]:
    connection = http.client.HTTPConnection(host, port, timeout=5)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read(), response.getheader("Content-Type", "")
    finally:
        connection.close()


def test_paths_built_by_concatenation(server):
    """``//latest/...`` is EC2's path too (it used to fall to the Azure handler's JSON 404)."""
    for path in (
        "//latest/meta-data/instance-id",
        "/latest//meta-data/instance-id",
        "//latest//meta-data//instance-id",
    ):
        assert raw_get(ADDRESS, server.imds_port, path) == (200, EBS.encode(), "text/plain"), path
    status, body, content_type = raw_get(ADDRESS, server.imds_port, "//latest/meta-data/nope")
    assert (status, content_type) == (404, "text/html") and b"<title>404 - Not Found</title>" in body
    # Azure's paths are untouched.
    status, body, _ = raw_get(
        "127.0.0.1", server.imds_port, "/metadata/instance?api-version=2021-08-01", {"Metadata": "true"}
    )
    assert status == 200 and json.loads(body)["compute"]["name"] == "solo"


def test_azure_extended_adds_the_extended_object(server):
    """cloud-init asks ``/metadata/instance?api-version=2021-08-01&extended=true`` and reads
    ``extended.compute.ppsType``; without the parameter the document has no ``extended``."""
    url = f"{server.imds}/metadata/instance"
    headers = {"Metadata": "true"}
    plain = requests.get(url, params={"api-version": "2021-08-01"}, headers=headers, timeout=5).json()
    extended = requests.get(
        url, params={"api-version": "2021-08-01", "extended": "true"}, headers=headers, timeout=5
    ).json()
    assert "extended" not in plain
    assert list(extended) == ["compute", "extended", "network"]
    assert extended["extended"] == {"compute": {"ppsType": "None"}}
    assert {key: value for key, value in extended.items() if key != "extended"} == plain
    text = requests.get(
        url, params={"api-version": "2021-08-01", "extended": "true", "format": "text"}, headers=headers, timeout=5
    )
    assert text.text == "compute/\nextended/\nnetwork/"
    leaf = requests.get(
        url + "/extended/compute/ppsType",
        params={"api-version": "2021-08-01", "extended": "true", "format": "text"},
        headers=headers,
        timeout=5,
    )
    assert (leaf.status_code, leaf.text) == (200, "None")
    off = requests.get(url, params={"api-version": "2021-08-01", "extended": "false"}, headers=headers, timeout=5)
    assert "extended" not in off.json()
