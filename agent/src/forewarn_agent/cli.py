"""``forewarn-agent``: the command line, the logs, finding the cloud, and the process's life (SIGTERM ends it)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

from forewarn_agent import __version__
from forewarn_agent.agent import Agent
from forewarn_agent.clouds import WATCHERS, GceWatcher, MetadataError, Watcher
from forewarn_agent.config import Config, ConfigError, load
from forewarn_agent.hooks import Hook
from forewarn_agent.http import Unreachable
from forewarn_agent.state import StateFile
from forewarn_agent.status import Metrics, serve_status

EXAMPLES = """\
examples:
  forewarn-agent --on-drain 'systemctl stop myapp' --on-restore 'systemctl start myapp'
  forewarn-agent --config /etc/forewarn-agent.json          # hooks per kind of event, peers: docs/agent.md
  forewarn-agent --cloud azure --endpoint http://127.0.0.1:8169 --state ./state.json --dry-run
"""


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(
        prog="forewarn-agent",
        description="Run your hooks before a VM's maintenance (drain) and after it (restore), on Azure, Amazon EC2 "
        "and Compute Engine; on Azure, approve the event once every VM it names is drained.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parse.add_argument
    add("--config", help="a JSON file of settings (the environment's FOREWARN_AGENT_* and these flags win over it)")
    add("--cloud", choices=sorted(WATCHERS), help="skip probing the metadata services")
    add("--endpoint", help="the metadata service's base URL (default http://169.254.169.254)")
    add("--interval", help="seconds between polls (default 1)")
    add("--state", help="the state file (default /var/lib/forewarn-agent/state.json)")
    add(
        "--listen",
        help="HOST:PORT of the status port for peers and /metrics ('' for none; default: this VM's own entry of the "
        "peers list, else 127.0.0.1:8181)",
    )
    add("--margin", help="seconds kept free before NotBefore: drain hooks stop that much before it (default 10)")
    add("--hook-timeout", help="the longest a phase's hooks may run (default 600)")
    add("--on-drain", action="append", default=[], metavar="CMD", help="a drain hook (repeatable)")
    add("--on-restore", action="append", default=[], metavar="CMD", help="a restore hook (repeatable)")
    add("--no-approve", dest="approve", action="store_const", const=False, help="never approve early (Azure)")
    add("--approve-margin", help="approve anyway this many seconds before NotBefore, once drained (default 0: never)")
    add("--peer", action="append", default=[], metavar="NAME=URL", help="another VM's agent (repeatable)")
    add("--peer-url", help="or a rule for peers' URLs, e.g. http://{name}:8181")
    add("--dry-run", action="store_const", const=True, help="run no hook and approve nothing; log what would be done")
    add("--webhook", help="POST each phase's outcome, as JSON, to this URL")
    add("--log-format", choices=["json", "text"])
    add("--once", action="store_true", help="poll once, act, and exit (for a cron job or a test)")
    add("--version", action="version", version=f"forewarn-agent {__version__}")
    return parse


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + "Z",
            "level": record.levelname.lower(),
            "message": record.getMessage(),
        }
        data.update(getattr(record, "fields", {}))
        return json.dumps(data, default=str)


def configure_logging(form: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if form == "json" else logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("forewarn_agent")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def settings(arguments: argparse.Namespace) -> Config:
    given = {k: v for k, v in vars(arguments).items() if k not in ("config", "on_drain", "on_restore", "once", "peer")}
    if arguments.peer:
        given["peers"] = ",".join(arguments.peer)
    config = load(arguments.config, os.environ, given)
    for phase, commands in (
        ("drain", [os.environ.get("FOREWARN_AGENT_ON_DRAIN", ""), *arguments.on_drain]),
        ("restore", [os.environ.get("FOREWARN_AGENT_ON_RESTORE", ""), *arguments.on_restore]),
    ):
        config.hooks += [Hook(phase, command) for command in commands if command]
    return config


def find_watcher(config: Config, state: StateFile) -> Watcher:
    """The cloud's watcher, identified; ``--cloud`` forces it, otherwise each cloud is probed at once and the one
    that tells this machine's name wins."""
    clouds: Sequence[str] = [config.cloud] if config.cloud else list(WATCHERS)
    found: Dict[str, Watcher] = {}
    errors: Dict[str, str] = {}

    def probe(cloud: str) -> None:
        watcher = make_watcher(cloud, config, state, timeout=2.0 if len(clouds) > 1 else 5.0)
        try:
            if watcher.identify():
                found[cloud] = watcher
        except (Unreachable, MetadataError, ValueError) as error:
            errors[cloud] = str(error)

    threads = [threading.Thread(target=probe, args=(cloud,), daemon=True) for cloud in clouds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for cloud in clouds:
        if cloud in found:
            found[cloud].timeout = 5.0
            return found[cloud]
    raise SystemExit(
        "forewarn-agent: no metadata service answered ("
        + "; ".join(f"{cloud}: {errors.get(cloud, 'no name')}" for cloud in clouds)
        + "); --cloud and --endpoint say where it is"
    )


def make_watcher(cloud: str, config: Config, state: StateFile, timeout: float) -> Watcher:
    endpoint = config.endpoint or None
    if cloud == "gcp":
        return GceWatcher(endpoint, timeout, memory=state.memory.setdefault("gcp", {}))
    return WATCHERS[cloud](endpoint, timeout)


def main(argv: Optional[List[str]] = None) -> None:
    arguments = parser().parse_args(argv)
    try:
        config = settings(arguments)
        state = StateFile(config.state or None)
    except (ConfigError, ValueError, OSError) as error:
        raise SystemExit(f"forewarn-agent: {error}") from None
    configure_logging(config.log_format)
    watcher = find_watcher(config, state)
    metrics = Metrics()
    agent = Agent(config, watcher, state, metrics)
    identity = {"machine": watcher.machine, "cloud": watcher.cloud}
    listen = config.listen_address(watcher.machine)
    server = serve_status(listen, state, metrics, lambda: identity)
    logging.getLogger("forewarn_agent").info(
        "watching %s as %s", watcher.cloud, watcher.machine, extra={"fields": dict(identity, listen=listen)}
    )
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    signal.signal(signal.SIGINT, lambda *_: agent.stop())
    try:
        if arguments.once:
            agent.step()
        else:
            agent.run()
    finally:
        if server is not None:
            server.shutdown()
