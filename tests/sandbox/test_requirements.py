"""Without what the sandbox needs, one sentence says what is missing and how to get it, and nothing is made. These
run anywhere: as root, the test drops to an unprivileged user (util-linux's setpriv) to be refused."""

import os
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT

COMMANDS = [
    ["exec", "WestNO_0", "--", "true"],
    ["up", "WestNO_0"],
    ["shell", "WestNO_0"],
    ["down", "--all"],
    ["list"],
]


def forewarn_sandbox(args: list[str], path: str, prefix: list[str] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "forewarn", "--server", "http://127.0.0.1:9", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": path},
    )


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0])
def test_without_iproute2_the_message_says_to_install_it(args, tmp_path):
    run = forewarn_sandbox(args, path=str(tmp_path))  # a PATH with no `ip` on it
    assert run.returncode == 1
    assert run.stderr == (
        "forewarn: the sandbox needs iproute2's `ip` command, which is not on PATH: install iproute2 "
        "(apt-get install iproute2, dnf install iproute)\n"
    )


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0])
def test_without_root_the_message_says_to_use_sudo(args):
    path = os.environ.get("PATH", "/usr/bin:/bin")
    if shutil.which("ip", path=path) is None:
        pytest.skip("iproute2 is not installed here: the message is about it instead (test above)")
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without util-linux's setpriv to drop privileges")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    run = forewarn_sandbox(args, path=path, prefix=prefix)
    assert run.returncode == 1
    assert run.stderr == (
        "forewarn: the sandbox needs root (the CAP_SYS_ADMIN and CAP_NET_ADMIN capabilities) to make network "
        "namespaces: run it with sudo, or as root in CI\n"
    )
