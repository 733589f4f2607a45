"""Recordings of a scheduled-events endpoint (``forewarn record``) and their replay (``forewarn replay``).

``model``: the file format; ``recorder``: the polling loop (a fetch and a sleep function in, a recording out);
``replay``: which entry is current at an offset, and the server of a recording (each cloud serves its own:
``Cloud.replay_handler``). See docs/recordings.md.

The recorder and the replay server are loaded on first use: ``forewarn`` imports this package for its commands,
and the replay server brings a cloud's metadata surface and an HTTP server with it.
"""

from typing import Any

from forewarn.recording.model import (
    FORMAT,
    Entry,
    Recording,
    RecordingError,
    load_recording,
    save_recording,
)

__all__ = [
    "FORMAT",
    "Entry",
    "Recording",
    "RecordingError",
    "Replay",
    "http_fetch",
    "load_recording",
    "record",
    "replay_handler",
    "save_recording",
    "serve_replay",
]

_LAZY = {
    "http_fetch": "forewarn.recording.recorder",
    "record": "forewarn.recording.recorder",
    "Replay": "forewarn.recording.replay",
    "replay_handler": "forewarn.recording.replay",
    "serve_replay": "forewarn.recording.replay",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
