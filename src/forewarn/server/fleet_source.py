"""The fleet ``--fleet`` gives, and the digest of the file the database's fleet was read from (a file read once is not
parsed again at every start)."""

from __future__ import annotations

import json
import logging
from typing import Any

from forewarn.fleet.file import FleetFile, FleetFileError, read_fleet_file
from forewarn.fleet.model import Fleet
from forewarn.store import SQLStore

log = logging.getLogger("forewarn.server")


SCENARIO_FLEET = "scenario:"  # --fleet scenario:NAME: the fleet a shipped scenario is written against


def read_served_fleet(source: str) -> FleetFile:
    """The fleet file ``--fleet`` names: a file, ``demo``, or ``scenario:NAME`` (a shipped scenario's own fleet, so that
    a server runs that scenario from its dashboard as ``forewarn scenario run NAME`` runs it on a private server)."""
    if not source.startswith(SCENARIO_FLEET):
        return read_fleet_file(source)
    from forewarn.core.errors import did_you_mean
    from forewarn.scenarios.spec import ScenarioError, load_scenario, shipped_names

    name = source.removeprefix(SCENARIO_FLEET)
    if name not in shipped_names():
        raise FleetFileError(
            f"--fleet {source}: no shipped scenario named {name!r}{did_you_mean(name, shipped_names())} "
            "(`forewarn scenario list` lists them)"
        )
    try:
        return FleetFile(load_scenario(name).server_fleet_text(), f"scenario {name}'s fleet")
    except ScenarioError as error:
        raise FleetFileError(str(error)) from None


def given_fleet(
    fleet_file: FleetFile | None, store: SQLStore
) -> tuple[Fleet | None, dict[str, Any] | None, str | None]:
    """The fleet --fleet gives, the file's event_grid section and the file's digest. The fleet is None when there is
    no --fleet, and when the file is the very one the database's fleet was read from (same digest): the stored fleet
    is served then, and the file is not parsed (20 s at a million VMs, to find the fleet the database holds)."""
    if fleet_file is None:
        return None, None, None
    digest = fleet_file.digest
    known = store.fleet_file()
    if known is not None and known.get("digest") == digest:
        log.info("fleet: %s is the file the database's fleet was read from; not parsed again", fleet_file.filename)
        return None, known.get("event_grid"), digest
    document = fleet_file.parse()
    return document.fleet, document.event_grid, digest


def remember_fleet_file(store: SQLStore, digest: str, section: dict[str, Any] | None) -> None:
    """Store the digest of a fleet file the database's fleet was found equal to (with its event_grid section, which
    a start that does not parse the file still applies), unless it is stored already."""
    record = {"digest": digest, "event_grid": section}
    try:
        if json.loads(json.dumps(record)) != record:
            return  # values JSON does not keep as they are (YAML dates, say): this file is parsed at every start
    except (TypeError, ValueError):
        return
    if store.fleet_file() != record:
        store.put_fleet_file(record)


def fleet_sections(source: str | None, section: dict[str, Any] | None) -> dict[str, tuple[str, Any]]:
    """The fleet file's sections beyond the fleet (its ``event_grid``), by key, with where each was read: what
    each cloud's serving is given (``Serving.opened``)."""
    return {} if section is None else {"event_grid": (f"{source}: event_grid", section)}
