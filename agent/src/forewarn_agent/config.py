"""The agent's settings: a JSON file, then the environment (``FOREWARN_AGENT_*``), then the command line; the later
wins. Each setting has one name in all three (``approve_margin``, ``FOREWARN_AGENT_APPROVE_MARGIN``,
``--approve-margin``)."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Tuple

from forewarn_agent.hooks import Hook

DEFAULT_LISTEN = "127.0.0.1:8181"


class ConfigError(Exception):
    pass


@dataclass
class Config:
    cloud: str = ""  # azure, aws or gcp; empty: found by probing the metadata services
    endpoint: str = ""  # the metadata service's base URL; empty: the cloud's own (169.254.169.254)
    interval: float = 1.0  # seconds between polls (Azure, EC2); Compute Engine holds wait_for_change GETs
    state: str = "/var/lib/forewarn-agent/state.json"
    listen: Optional[str] = None  # the status port (peers, /metrics); empty: none; unset: listen_address()
    margin: float = 10.0  # seconds kept free before NotBefore: hooks are stopped that much before it
    hook_timeout: float = 600.0  # the longest a phase's hooks may take, whatever the notice
    approve: bool = True  # Azure: approve an event of this VM once drained (and its peers, for a shared event)
    approve_margin: float = 0.0  # Azure: approve anyway this many seconds before NotBefore, once drained (0: never)
    peers: Dict[str, str] = field(default_factory=dict)  # VM name -> its agent's status URL
    peer_url: str = ""  # or a rule: http://{name}:8181
    dry_run: bool = False  # log what would be done; run no hook, approve nothing
    webhook: str = ""  # POST of each phase's outcome, as JSON
    log_format: str = "json"  # or text
    hooks: List[Hook] = field(default_factory=list)

    def listen_address(self, machine: str) -> str:
        """Where the status port listens: ``listen`` when it is set, else the HOST:PORT of this VM's own entry of the
        peers list (one list, the same on every VM, names each agent where the others ask it), else loopback."""
        if self.listen is not None:
            return self.listen
        own = self.peers.get(machine)
        if own:
            parts = urllib.parse.urlsplit(own)
            if parts.hostname and parts.port:
                return f"{parts.hostname}:{parts.port}"
        return DEFAULT_LISTEN

    def peer_address(self, name: str) -> Optional[str]:
        if name in self.peers:
            return self.peers[name].rstrip("/")
        return self.peer_url.format(name=name).rstrip("/") if self.peer_url else None


NUMBERS = {"interval", "margin", "hook_timeout", "approve_margin"}
FLAGS = {"approve", "dry_run"}


def _typed(name: str, value: Any, source: str) -> Any:
    try:
        if name in NUMBERS:
            number = float(value)
            if number < 0:
                raise ValueError("negative")
            return number
        if name in FLAGS:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError("not true or false")
            return text in ("1", "true", "yes")
        if name == "peers":
            return dict(value) if isinstance(value, dict) else _pairs(str(value))
        if name == "cloud" and value not in ("", "azure", "aws", "gcp"):
            raise ValueError("not azure, aws or gcp")
        if name == "log_format" and value not in ("json", "text"):
            raise ValueError("not json or text")
        return str(value)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{source}: {name} = {value!r}: {error}") from None


def _pairs(text: str) -> Dict[str, str]:
    pairs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, url = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r} is not NAME=URL")
        pairs[name] = url
    return pairs


def hooks_from(data: Any, source: str) -> List[Hook]:
    """``{"drain": [{"command": "...", "kinds": ["Freeze"]}, "..."], "restore": [...]}``: a string is a command for
    every kind."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: hooks must be an object of phases (drain, restore)")
    found = []
    for phase, items in data.items():
        if phase not in ("drain", "restore"):
            raise ConfigError(f"{source}: hooks: unknown phase {phase!r} (drain or restore)")
        for item in items if isinstance(items, list) else [items]:
            if isinstance(item, str):
                found.append(Hook(phase, item))
            elif isinstance(item, dict) and isinstance(item.get("command"), str):
                found.append(Hook(phase, item["command"], tuple(item.get("kinds", ()))))
            else:
                raise ConfigError(f"{source}: hooks.{phase}: {item!r} is not a command or {{command, kinds}}")
    return found


def load(path: Optional[str], environ: Mapping[str, str], given: Mapping[str, Any]) -> Config:
    config = Config()
    names = {f.name for f in fields(Config)} - {"hooks"}
    layers: List[Tuple[str, Mapping[str, Any]]] = []
    if path:
        try:
            with open(path, encoding="utf-8") as file:
                data = json.load(file)
        except (OSError, ValueError) as error:
            raise ConfigError(f"{path}: {error}") from None
        unknown = set(data) - names - {"hooks"}
        if unknown:
            raise ConfigError(f"{path}: unknown settings {', '.join(sorted(unknown))}")
        if "hooks" in data:
            config.hooks = hooks_from(data["hooks"], path)
        layers.append((path, data))
    prefix = "FOREWARN_AGENT_"
    layers.append(("environment", {k[len(prefix) :].lower(): v for k, v in environ.items() if k.startswith(prefix)}))
    layers.append(("command line", {k: v for k, v in given.items() if v is not None}))
    for source, layer in layers:
        for name, value in layer.items():
            if name in names:
                setattr(config, name, _typed(name, value, source))
    return config
