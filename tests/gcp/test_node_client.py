"""Google's Node client for the metadata server, ``gcp-metadata`` from npm, unmodified, pointed at an instance's
endpoint by its own environment variable (GCE_METADATA_HOST): it reads ``maintenance-event`` with
``wait_for_change``, and the hanging GET answers when forewarn gives the notice."""

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import Server

# npm installs the client here once (package registries are reachable); FOREWARN_NODE_HOME names another place.
NODE_HOME = Path(os.environ.get("FOREWARN_NODE_HOME", Path.home() / ".cache" / "forewarn-node"))
VERSION = "6"

FLEET = """
gce_instances:
  - {name: web-1, host: host-a, imds: {address: 127.0.0.40}}
"""

WATCHER = """
const gcpMetadata = require('gcp-metadata');
(async () => {
  console.log('first ' + await gcpMetadata.instance('maintenance-event'));
  console.log('waiting');
  const value = await gcpMetadata.instance({property: 'maintenance-event', params: {wait_for_change: true}});
  console.log('changed ' + value);
})().catch(error => { console.error(error); process.exit(1); });
"""


@pytest.fixture(scope="module")
def node_modules():
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    modules = NODE_HOME / "node_modules"
    if not (modules / "gcp-metadata").exists():
        NODE_HOME.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(NODE_HOME), f"gcp-metadata@{VERSION}"],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return modules


def test_gcp_metadata_waits_for_the_maintenance_notice(node_modules, tmp_path):
    script = tmp_path / "watch.js"
    script.write_text(WATCHER)
    with Server(tmp_path, fleet_text=FLEET) as server:
        env = {**os.environ, "NODE_PATH": str(node_modules), "GCE_METADATA_HOST": f"127.0.0.40:{server.imds_port}"}
        watcher = subprocess.Popen(
            ["node", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(watcher.stdout.readline, "")), daemon=True)
        reader.start()
        deadline = time.monotonic() + 20
        while "waiting\n" not in lines and time.monotonic() < deadline and watcher.poll() is None:
            time.sleep(0.02)
        assert "first NONE\n" in lines, watcher.stderr.read() if watcher.poll() is not None else lines
        # The client sends its hanging GET right after printing; outside Google Cloud it gives up after 3 s (its
        # own timeout), so the notice is given well within that.
        time.sleep(0.5)
        server.post("/v1/gce/maintenance", {"instances": ["web-1"]}, expect=201)
        assert watcher.wait(15) == 0, watcher.stderr.read()
        reader.join(5)
    assert lines[-1] == "changed MIGRATE_ON_HOST_MAINTENANCE\n"
