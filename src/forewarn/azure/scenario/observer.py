"""What a scenario run records of Azure's VMs: each observed VM's Scheduled Events document at every incarnation,
its power, host and boot, and at the end the run's events with their histories and approvals.

A client of the server, as Azure's steps are: it reads the control API through the runner's client. What changed is
read from the server's journal: after a move, only the documents of the scopes and the states of the VMs its
entries name are read again, so a step costs the same on a fleet of 5,000 VMs as on one of five.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from forewarn.azure.scenario.steps import document_text
from forewarn.core.times import format_optional_time, format_time, parse_optional_time, parse_time
from forewarn.scenario_steps import RunRecord, StepApi
from forewarn.scenarios.api import parse_document

MANY_VMS = 20  # more changed observed VMs than this: one read of /v1/vms instead of one per VM


class AzureObserver:
    event_keys = ("events",)

    def __init__(self) -> None:
        self.watched: list[str] = []
        self.scope_of: dict[str, str] = {}
        self.documents: dict[str, list[dict]] = {}
        self.vm_states: dict[str, list[dict]] = {}
        self.events: list[dict] = []
        self.approvals: list[dict] = []
        self._scopes: set[str] = set()  # noted since the last observation
        self._vms: set[str] = set()
        self._last_text: dict[str, str] = {}
        self._last_document: dict[str, dict] = {}
        self._last_row: dict[str, dict] = {}
        self._last_state: dict[str, tuple] = {}
        self._quiet: tuple[bool, datetime | None] | None = None  # quiet_until(), dropped on any change

    def begin(self, api: StepApi, machines: Sequence[str], observe: Sequence[str], every: bool) -> None:
        self.scope_of = {vm["name"]: vm["scope"] for vm in api.get("/v1/fleet")["vms"]}
        mine = set(machines)
        self.watched = [name for name in observe if name in mine]
        self.documents = {name: [] for name in self.watched}
        self.vm_states = {name: [] for name in self.watched}

    def note(self, entry: Mapping[str, Any]) -> None:
        if "scope" in entry:
            self._scopes.add(entry["scope"])
        if "vm" in entry:
            self._vms.add(entry["vm"])

    def observe(self, api: StepApi, run: RunRecord, everything: bool) -> None:
        if everything:
            documents, states = list(self.watched), list(self.watched)
        else:
            documents = [name for name in self.watched if self.scope_of.get(name) in self._scopes]
            states = [name for name in self.watched if name in self._vms]
        self._scopes, self._vms = set(), set()
        self._observe_documents(api, run, documents)
        self._observe_states(api, run, states)

    def _observe_documents(self, api: StepApi, run: RunRecord, names: list[str]) -> None:
        """Each VM's document, recorded when it changed."""
        by_scope: dict[str, str] = {}  # the VMs of a scope share one document: read it once
        texts = {}
        for name in names:
            scope = self.scope_of.get(name, name)
            if scope not in by_scope:
                by_scope[scope] = document_text(api, name)
            texts[name] = by_scope[scope]
        for name, text in texts.items():
            if self._last_text.get(name) == text:
                continue
            self._last_text[name] = text
            document = parse_document(text)
            self._last_document[name] = document
            self._quiet = None
            self.documents[name].append(
                {**run.stamp(), "incarnation": document.get("DocumentIncarnation"), "document": document}
            )
            run.line(name, f"#{document.get('DocumentIncarnation')}", document_summary(document))

    def _observe_states(self, api: StepApi, run: RunRecord, names: list[str]) -> None:
        """Each VM's power, host and boot, recorded when one of them changed."""
        rows = _vm_rows(api, names)
        for name in names:
            vm = rows.get(name)
            if vm is None:
                continue
            self._last_row[name] = vm
            self._quiet = None
            key = (vm["power"], vm["host"], vm["booted_at"])
            if self._last_state.get(name) == key:
                continue
            first = name not in self._last_state
            self._last_state[name] = key
            self.vm_states[name].append(
                {
                    **run.stamp(),
                    "power": vm["power"],
                    "host": vm["host"],
                    "booted_at": vm["booted_at"],
                    "impacted_by": vm["impacted_by"],
                }
            )
            if not first:
                run.line(name, "", f"{vm['power']} on {vm['host']}")

    def quiet_until(self) -> tuple[bool, datetime | None]:
        """The earliest NotBefore of a Scheduled event in an observed document, or end of an impact; unknown while
        an observed event is Started (it may have extra impacts)."""
        if self._quiet is None:
            self._quiet = self._work_out_quiet()
        return self._quiet

    def _work_out_quiet(self) -> tuple[bool, datetime | None]:
        times: list[datetime] = []
        for name in self.watched:
            for event in (self._last_document.get(name) or {}).get("Events") or []:
                if event.get("EventStatus") != "Scheduled" or not event.get("NotBefore"):
                    return False, None
                try:  # whole seconds, so no later than the deadline itself
                    times.append(parsedate_to_datetime(event["NotBefore"]).astimezone(UTC))
                except (TypeError, ValueError):
                    return False, None
            until = parse_optional_time((self._last_row.get(name) or {}).get("impact_until"))
            if until is not None:
                times.append(until)
        return True, min(times) if times else None

    def finish(self, api: StepApi, start: datetime, journal: Mapping[str, list[dict]] | None) -> None:
        self.events = [e for e in api.get("/v1/events", all="true") if parse_time(e["created_at"]) >= start]
        approvals: list[dict] = []
        for event in self.events:
            history = journal.get(event["event_id"], []) if journal is not None else None
            approvals += _with_history(api, event, start, history)
        self.approvals = sorted(approvals, key=lambda approval: approval["offset"])

    def timeline(self) -> dict[str, Any]:
        return {
            "vms": self.documents,
            "vm_states": self.vm_states,
            "approvals": self.approvals,
            "events": self.events,
        }


def _vm_rows(api: StepApi, names: list[str]) -> dict[str, dict]:
    if not names:
        return {}
    if len(names) > MANY_VMS:
        wanted = set(names)
        return {vm["name"]: vm for vm in api.get("/v1/vms") if vm["name"] in wanted}
    return {name: api.get(f"/v1/vms/{name}") for name in names}


def _with_history(api: StepApi, event: dict, start: datetime, history: list[dict] | None) -> list[dict]:
    """Give the event its history (``journal``; None: read it from the server); the approvals in it."""
    if history is None:
        history = api.get(f"/v1/events/{event['event_id']}/journal")
    event["journal"] = [{**entry, "at": format_optional_time(_entry_time(entry, event))} for entry in history]
    approvals = []
    for entry in event["journal"]:
        if entry["what"] == "approved":
            at = parse_time(entry["at"])
            approvals.append(
                {
                    "time": format_time(at),
                    "offset": (at - start).total_seconds(),
                    "event_id": event["event_id"],
                    "by": entry.get("reason", "").removeprefix("by "),
                }
            )
    return approvals


def _entry_time(entry: dict, event: dict) -> datetime | None:
    """When a journal entry happened. The journal stamps an entry with the time of the command that committed it;
    a clock move that passed several deadlines commits them together, so a start or a completion takes its time
    from the event itself."""
    exact = {"started": event.get("started_at"), "completed": event.get("ended_at")}.get(entry["what"])
    return parse_optional_time(exact or entry["at"])


def document_summary(document: dict) -> str:
    """A document in one line of the run's output: each event's status, type, source, id and NotBefore."""
    events = document.get("Events") or []
    if not events:
        return "no events"
    parts = []
    for event in events:
        text = (
            f"{event.get('EventStatus')} {event.get('EventType')} ({event.get('EventSource', '?')}) "
            f"{event.get('EventId')}"
        )
        if event.get("NotBefore"):
            text += f" NotBefore {event['NotBefore']}"
        resources = event.get("Resources") or []
        if len(resources) > 1:
            text += f" [{','.join(resources)}]"
        parts.append(text)
    return "; ".join(parts)
