"""The recording file: ``{"format": "forewarn-recording/1", "url", "api_version", "started_at",
"interval_seconds", "entries": [{"offset_seconds", "at", "status", "body"}]}`` (docs/recordings.md).

A recording of a Compute Engine metadata server's ``maintenance-event`` adds ``"source": "gce-maintenance-event"``
and each entry's ``etag`` (the value's ETag, which a ``wait_for_change`` client sends back); a file without
``source`` is an Azure scheduled-events recording, as every file was before."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from forewarn.net.untrusted_json import MAX_DOCUMENT_BYTES, JsonInputError, parse_json

FORMAT = "forewarn-recording/1"
AZURE = "azure-scheduled-events"
GCE = "gce-maintenance-event"
SOURCES = (AZURE, GCE)


class RecordingError(Exception):
    """A recording file that cannot be read."""


@dataclass(frozen=True)
class Entry:
    """One distinct answer: ``offset_seconds`` after the recording started, at wall time ``at`` (ISO, UTC).
    ``status`` is the HTTP status (0: no answer, the connection failed); ``body`` the exact bytes, as text."""

    offset_seconds: float
    at: str
    status: int
    body: str
    etag: str | None = None  # Compute Engine's ETag header of the answer

    def to_json(self) -> dict:
        data = asdict(self)
        if self.etag is None:
            del data["etag"]
        return data

    def busy(self, source: str) -> bool | None:
        """Whether the answer shows maintenance (events, or a maintenance-event other than NONE); None when it is
        no such answer (an error, no answer)."""
        if source == GCE:
            return None if self.status != 200 else self.body.strip() != "NONE"
        events = self.events()
        return None if events is None else bool(events)

    def events(self) -> list | None:
        """The document's Events when it is a 200 scheduled-events document, else None."""
        if self.status != 200:
            return None
        try:
            data = parse_json(self.body, max_bytes=MAX_DOCUMENT_BYTES)
        except JsonInputError:
            return None
        events = data.get("Events") if isinstance(data, dict) else None
        return events if isinstance(events, list) else None


@dataclass
class Recording:
    url: str
    api_version: str
    started_at: str
    interval_seconds: float
    entries: list[Entry] = field(default_factory=list)
    source: str = AZURE

    def to_json(self) -> dict:
        data = {
            "format": FORMAT,
            "url": self.url,
            "api_version": self.api_version,
            "started_at": self.started_at,
            "interval_seconds": self.interval_seconds,
            "entries": [entry.to_json() for entry in self.entries],
        }
        if self.source != AZURE:
            data = {"format": FORMAT, "source": self.source, **data}
        return data

    @classmethod
    def from_json(cls, data) -> Recording:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RecordingError(
                f"not a {FORMAT} file (its format is {data.get('format') if isinstance(data, dict) else None!r})"
            )
        try:
            entries = [
                Entry(
                    float(e["offset_seconds"]),
                    str(e["at"]),
                    int(e["status"]),
                    str(e["body"]),
                    None if e.get("etag") is None else str(e["etag"]),
                )
                for e in data["entries"]
            ]
            recording = cls(
                str(data["url"]),
                str(data["api_version"]),
                str(data["started_at"]),
                float(data["interval_seconds"]),
                entries,
                str(data.get("source", AZURE)),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise RecordingError(f"malformed recording: {error!r}") from None
        if recording.source not in SOURCES:
            raise RecordingError(f"unknown source {recording.source!r}: forewarn replays {' and '.join(SOURCES)}")
        if not entries:
            raise RecordingError("the recording has no entries")
        if not all(
            math.isfinite(e.offset_seconds) and (e.status == 0 or 100 <= e.status <= 599) for e in entries
        ) or not math.isfinite(recording.interval_seconds):
            raise RecordingError(
                "malformed recording: an offset or interval is not a number, or a status is not 0 "
                "or an HTTP status (100-599)"
            )
        if any(b.offset_seconds < a.offset_seconds for a, b in zip(entries, entries[1:])):
            raise RecordingError("entries are not in offset order")
        return recording


def save_recording(recording: Recording, path: str | Path) -> None:
    """Write atomically (a temporary file renamed), so an interrupted recorder leaves a whole file."""
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(recording.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def load_recording(path: str | Path) -> Recording:
    try:
        if os.stat(path).st_size > MAX_DOCUMENT_BYTES:
            raise RecordingError(f"{path} is larger than {MAX_DOCUMENT_BYTES} bytes")
        data = parse_json(Path(path).read_bytes(), max_bytes=MAX_DOCUMENT_BYTES)
    except OSError as error:
        raise RecordingError(f"cannot read {path}: {error.strerror}") from None
    except JsonInputError as error:
        raise RecordingError(f"{path} is not a usable JSON document: {error}") from None
    return Recording.from_json(data)
