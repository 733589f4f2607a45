"""Long-running operations of Microsoft.Compute: a command answered ``202 Accepted`` with ``Azure-AsyncOperation`` and
``Location`` URLs, and those URLs' status.

An operation's status is derived from the engine's state: the events the command created are encoded in the
operation id (with a checksum bound to the database's seed), so it survives restarts without a table of its own.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from forewarn.app.runtime import Maintenance
from forewarn.azure.arm.wire import ApiVersion, ArmError, json_response
from forewarn.azure.changes import VmChanged
from forewarn.azure.component import AzureComponent
from forewarn.azure.model import EventStatus
from forewarn.core.changes import Change
from forewarn.engine.engine import Engine

COMPUTE = "Microsoft.Compute"
MAX_OPERATION_EVENTS = 100_000  # an operation id naming more events is not ours (decoded as not found)

#: One step of a command: a call into the engine, returning what it changed.
Step = Callable[[Engine], list[Change]]


@dataclass(frozen=True)
class Operation:
    """A long-running operation: the events it waits for (sequence numbers, so that a batch of a thousand deletes is
    one short range), when it started, and until when it waits for impacts no event announced. Encoded in its id,
    with a checksum bound to the database's seed, so its status is derived from the engine after any restart."""

    seqs: tuple[int, ...]
    start: int  # unix seconds
    wait: int  # unix seconds: not Succeeded before

    def encode(self, seed: str) -> str:
        ranges: list[str] = []
        for first, count in _ranges(self.seqs):
            ranges.append(f"{first}.{count}" if count > 1 else str(first))
        body = f"{'_'.join(ranges) or '0'}-{self.start}-{self.wait - self.start}"
        return f"{body}-{_checksum(seed, body)}"

    @classmethod
    def decode(cls, seed: str, text: str) -> Operation | None:
        parts = text.split("-")
        if len(parts) != 4 or _checksum(seed, "-".join(parts[:3])) != parts[3].lower():
            return None
        try:
            seqs: list[int] = []
            if parts[0] != "0":
                for item in parts[0].split("_"):
                    first, _, count = item.partition(".")
                    seqs.extend(range(int(first), int(first) + (int(count) if count else 1)))
            start, wait = int(parts[1]), int(parts[2])
        except ValueError:
            return None
        if len(seqs) > MAX_OPERATION_EVENTS or wait < 0:
            return None
        return cls(tuple(seqs), start, start + wait)


def _checksum(seed: str, body: str) -> str:
    return hashlib.blake2b(f"{seed}\x1f{body}".encode(), digest_size=5).hexdigest()


def _ranges(seqs: Iterable[int]) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if found and found[-1][0] + found[-1][1] == seq:
            found[-1] = (found[-1][0], found[-1][1] + 1)
        else:
            found.append((seq, 1))
    return found


@dataclass
class Done:
    """A command committed, and the operation that follows it."""

    changes: list[Change]
    operation: Operation


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


class Operations:
    """Runs commands and answers for their operations."""

    def __init__(self, service: Maintenance, retry_after: int = 10):
        self.service = service
        self.retry_after = retry_after

    async def perform(self, steps: list[Step], attach: Iterable[int] = ()) -> Done:
        """Run steps as one command (committed together), and describe it as an operation."""
        box: dict[str, Any] = {}

        # A step refused after an earlier one changed the engine refuses the whole command: the runtime rebuilds the
        # engine from what was committed (a refusal from a command), so nothing of the earlier steps stays.
        def command(engine: Engine) -> list[Change]:
            before = engine.next_seq
            changes: list[Change] = []
            for step in steps:
                changes += step(engine)
            box["seqs"] = range(before, engine.next_seq)
            box["now"] = engine.now
            return changes

        changes = await self.service.perform_soon(command)  # the group commit, as every command
        now: datetime = box["now"]
        wait = now
        for change in changes:
            if isinstance(change, VmChanged) and change.state.impact_until is not None:
                wait = max(wait, change.state.impact_until)
        start = int(math.floor(now.timestamp()))
        operation = Operation(
            tuple(sorted(set(box["seqs"]) | set(attach))), start, max(start, int(math.ceil(wait.timestamp())))
        )
        return Done(changes, operation)

    def accepted(self, request: Request, api: ApiVersion, sub: str, location: str, operation: Operation) -> Response:
        """``202 Accepted`` with the operation's two URLs."""
        url = _operation_url(request, sub, location, operation.encode(self.service.settled_engine().seed))
        version = quote(api.text, safe="")
        return Response(
            status_code=202,
            headers={
                "Azure-AsyncOperation": f"{url}?api-version={version}",
                "Location": f"{url}?monitor=true&api-version={version}",
                "Retry-After": str(self.retry_after),
            },
        )

    def status(self, request: Request, sub: str, location: str, operation_id: str, api: ApiVersion) -> Response:
        """``GET .../locations/{location}/operations/{id}``: the Azure-AsyncOperation body, or with ``monitor=true``
        the Location protocol."""
        self.service.catch_up()
        engine = self.service.settled_engine()
        operation = Operation.decode(engine.seed, operation_id)
        events = []
        if operation is not None:
            for seq in operation.seqs:
                event = engine.component(AzureComponent).event_by_seq(seq)
                if event is None:
                    operation = None
                    break
                events.append(event)
        if operation is None:
            raise ArmError(404, "NotFound", f"The operation '{operation_id}' was not found in location '{location}'.")
        start = datetime.fromtimestamp(operation.start, UTC)
        wait = datetime.fromtimestamp(operation.wait, UTC)
        running = engine.now < wait or any(event.status.live for event in events)
        monitor = request.query_params.get("monitor", "").lower() == "true"
        body: dict[str, Any] = {"startTime": iso(start)}
        if running:
            body["status"] = "InProgress"
        else:
            ended = [event.ended_at for event in events if event.ended_at is not None]
            body["endTime"] = iso(max(ended + [wait]))
            canceled = [event for event in events if event.status is EventStatus.CANCELED]
            body["status"] = "Canceled" if canceled else "Succeeded"
            if canceled:
                body["error"] = {
                    "code": "OperationCanceled",
                    "message": "The operation was canceled: its scheduled event "
                    f"{', '.join(e.event_id for e in canceled)} was canceled before it started.",
                }
        body["name"] = operation_id
        if monitor:  # the Location protocol: 202 while running, then the action's own (empty) result
            if running:
                url = _operation_url(request, sub, location, operation_id)
                return Response(
                    status_code=202,
                    headers={
                        "Location": f"{url}?monitor=true&api-version={quote(api.text, safe='')}",
                        "Retry-After": str(self.retry_after),
                    },
                )
            if "error" in body:
                return json_response(409, {"error": body["error"]})
            return Response(status_code=200)
        return json_response(200, body)


def _operation_url(request: Request, sub: str, location: str, operation_id: str) -> str:
    base = str(request.base_url).rstrip("/")
    return (
        f"{base}/subscriptions/{sub}/providers/{COMPUTE}/locations/{quote(location, safe='')}/operations/{operation_id}"
    )
