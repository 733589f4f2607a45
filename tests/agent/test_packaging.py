"""How forewarn-agent is installed: with pip (on the setuptools an older Python's venv brings), as one executable file
(a zipapp, run with --version and one --once poll against a real forewarn), and as a systemd service."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from agent_helpers import AGENT_SOURCE, ROOT, WAIT
from forewarn.scenarios.testnet import loopback_address
from helpers import Server, forewarn

AGENT = ROOT / "agent"
UNIT = AGENT / "forewarn-agent.service"
SOLO = loopback_address(41, 12)
FLEET = f"""
hosts: [{{name: host-01}}]
vms:
  - {{name: solo, host: host-01, imds: {{address: {SOLO}}}}}
"""


@pytest.fixture(scope="module")
def single_file(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("dist") / "forewarn-agent.pyz"
    built = subprocess.run(
        [sys.executable, str(AGENT / "build.py"), "--output", str(output)], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    return output


def test_its_metadata_builds_with_the_setuptools_of_an_older_python(tmp_path):
    """pip builds the package with the newest setuptools the machine's Python takes: 75 on Python 3.8, which reads
    the license only as a table. A fresh venv's own setuptools (65 here) reads the project's metadata as they do."""
    source = shutil.copytree(AGENT, tmp_path / "agent", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    environment = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(environment)], check=True, timeout=120)
    python = str(environment / "bin" / "python")
    version = subprocess.run([python, "-c", "import setuptools; print(setuptools.__version__)"], capture_output=True)
    assert int(version.stdout.split(b".")[0]) < 77, "this venv's setuptools reads the license string: no test"
    built = subprocess.run(
        [python, "-c", "from setuptools import setup; setup()", "egg_info", "--egg-base", str(tmp_path)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    info = tmp_path / "forewarn_agent.egg-info"
    metadata = (info / "PKG-INFO").read_text()
    assert "Name: forewarn-agent" in metadata and "Requires-Python: >=3.8" in metadata
    assert "forewarn-agent = forewarn_agent.cli:main" in (info / "entry_points.txt").read_text()


def oldest_python() -> str | None:
    """A Python 3.8, the oldest the agent supports (agent/pyproject.toml), among pyenv's versions or on PATH (where
    pyenv's shim may answer for a version it does not select: each candidate is asked its version)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [str(path) for path in sorted(pyenv.glob("versions/3.8*/bin/python3.8"))]
    candidates += [found] if (found := shutil.which("python3.8")) else []
    for candidate in candidates:
        asked = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True)
        if asked.returncode == 0 and asked.stdout.strip() == b"(3, 8)":
            return candidate
    return None


OLDEST = oldest_python()


@pytest.mark.parametrize(
    "interpreter",
    [
        pytest.param([], id="its-shebang"),
        pytest.param(
            [OLDEST or "python3.8"],
            id="python3.8",
            marks=pytest.mark.skipif(OLDEST is None, reason="no Python 3.8 on this machine (PATH, pyenv)"),
        ),
    ],
)
def test_the_single_file_runs_by_itself_and_handles_an_event_in_one_poll(single_file, tmp_path, interpreter):
    """Run as an executable (the python3 its shebang finds) and by the oldest Python the agent supports."""
    assert os.stat(single_file).st_mode & stat.S_IXOTH and single_file.read_bytes().startswith(
        b"#!/usr/bin/env python3\n"
    )
    clean = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # nothing from the checkout
    agent = [*interpreter, str(single_file)]
    version = subprocess.run([*agent, "--version"], capture_output=True, text=True, env=clean, timeout=30)
    assert version.stdout.strip() == "forewarn-agent 0.1.0", version.stderr
    hook = tmp_path / "hook.log"
    with Server(tmp_path, fleet_text=FLEET, start=datetime.now(UTC).replace(microsecond=0)) as server:
        [event] = json.loads(forewarn(server, "schedule", "--type", "Reboot", "--vm", "solo", "--json").stdout)
        command = [*agent, "--once", "--cloud", "azure", "--endpoint", f"http://{SOLO}:{server.imds_port}"]
        command += ["--state", str(tmp_path / "state.json"), "--listen", ""]
        command += [
            "--on-drain",
            f"echo $FOREWARN_PHASE $FOREWARN_EVENT_KIND $FOREWARN_MACHINE >> {shlex.quote(str(hook))}",
        ]
        run = subprocess.run(command, capture_output=True, text=True, env=clean, timeout=WAIT)
        assert run.returncode == 0, run.stderr
        assert hook.read_text() == "drain Reboot solo\n"
        status = requests.get(f"{server.control}/v1/events/{event['event_id']}", timeout=5).json()["status"]
        assert status == "Started", run.stderr  # drained, so approved in the same poll


def unit_sections(text: str) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections and settings (a key may be given more than once); systemd's syntax, minus what this
    unit does not use (continuation lines, quoting)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert current is not None and sep, f"not a setting inside a section: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_the_systemd_unit_restarts_keeps_its_state_and_passes_the_agent_settings_it_knows():
    unit = unit_sections(UNIT.read_text())
    service = unit["Service"]
    assert service["Restart"] == ["always"] and service["StateDirectory"] == ["forewarn-agent"]
    [command] = service["ExecStart"]
    program, *args = shlex.split(command)
    assert program == "/usr/local/bin/forewarn-agent"
    sys.path.insert(0, str(AGENT_SOURCE))
    try:
        from forewarn_agent.cli import parser
    finally:
        sys.path.remove(str(AGENT_SOURCE))
    given = parser().parse_args(args)  # an option the agent does not know fails here
    assert given.config == "/etc/forewarn-agent.json"
    assert Path(given.state).parent == Path("/var/lib") / service["StateDirectory"][0]
    # Hooks run systemctl and kubectl as root: no other user, the home directory and D-Bus's socket reachable.
    assert "User" not in service and "ProtectHome" not in service and "PrivateUsers" not in service
    assert "AF_UNIX" in service["RestrictAddressFamilies"][0].split()
    assert service["NoNewPrivileges"] == ["yes"] and unit["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_verifies_the_unit_without_a_warning(single_file, tmp_path):
    """systemd's own parser: an unknown key or a bad value is only a warning to it, so any output fails the test.
    ExecStart must name an existing program: the single file stands in for the installed one."""
    unit = tmp_path / "forewarn-agent.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/forewarn-agent", str(single_file)))
    verified = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and not verified.stdout.strip() and not verified.stderr.strip(), verified.stderr
