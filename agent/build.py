"""Build forewarn-agent as one executable file: a zipapp of the package, run by whatever ``python3`` the machine has
(3.8 or later). ``python3 agent/build.py`` writes dist/forewarn-agent.pyz in the current directory; ``--output`` puts it elsewhere.

The standard library's zipapp does the work; only the package's sources go in (no bytecode: it would be for this
machine's Python, and the target's may differ)."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import zipapp
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "src" / "forewarn_agent"
DEFAULT_OUTPUT = Path("dist") / "forewarn-agent.pyz"  # in the current directory (make agent: the checkout's)
INTERPRETER = "/usr/bin/env python3"


def build(output: Path) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging:
        shutil.copytree(PACKAGE, Path(staging) / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        zipapp.create_archive(staging, output, interpreter=INTERPRETER, main="forewarn_agent.cli:main", compressed=True)
    os.chmod(output, 0o755)  # zipapp makes it executable by its owner only
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description="Build forewarn-agent as one executable file (a zipapp).")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"default {DEFAULT_OUTPUT}")
    print(build(parser.parse_args().output))


if __name__ == "__main__":
    main()
