"""Recordings of a scheduled-events endpoint (``forewarn record``) and their replay (``forewarn replay``).

``model``: the file format; ``recorder``: the polling loop (a fetch and a sleep function in, a recording out);
``replay``: which entry is current at an offset, and the IMDS handler that serves it. See docs/recordings.md.
"""

from forewarn.recording.model import (
    FORMAT,
    Entry,
    Recording,
    RecordingError,
    load_recording,
    save_recording,
)
from forewarn.recording.recorder import http_fetch, record
from forewarn.recording.replay import Replay, ReplayHandler, serve_replay

__all__ = [
    "FORMAT",
    "Entry",
    "Recording",
    "RecordingError",
    "Replay",
    "ReplayHandler",
    "http_fetch",
    "load_recording",
    "record",
    "save_recording",
    "serve_replay",
]
