"""A new user's first hour with the CLI and the control API: what it says, and what it accepts."""

from __future__ import annotations

import json

import requests

from helpers import Server, forewarn


def _without(args: list[str], option: str) -> list[str]:
    """``args`` less ``option`` and its value."""
    at = args.index(option)
    return args[:at] + args[at + 2:]


def test_restart_without_clock_keeps_the_stored_manual_clock(tmp_path):
    with Server(tmp_path) as first:
        first.advance("1h")
        before = first.get("/v1/clock")
    assert before["mode"] == "manual"
    again = Server(tmp_path, fleet_text=None, db=first.db)
    again.args = _without(again.args, "--clock")
    with again:
        clock = again.get("/v1/clock")
        assert clock["mode"] == "manual"
        assert clock["now"] == before["now"]
    log = again.log_path.read_text()
    assert "clock: manual, as stored in the database" in log


def test_restart_with_clock_given_changes_it_and_says_so(tmp_path):
    with Server(tmp_path) as first:
        pass
    again = Server(tmp_path, fleet_text=None, db=first.db, clock="real")
    with again:
        assert again.get("/v1/clock")["mode"] == "real"
    assert "clock: real, as given (--clock/--speed); the database had manual" in again.log_path.read_text()


def test_document_prints_the_exact_bytes_imds_serves(tmp_path):
    with Server(tmp_path) as server:
        server.schedule(type="Freeze", vms=["solo"])
        served = server.scheduled_events()  # the shared metadata endpoint answers as the default VM, solo
        run = forewarn(server, "document", "solo")
        pretty = forewarn(server, "document", "solo", "--pretty")
    assert served.status_code == 200
    assert run.stdout.encode() == served.content
    assert json.loads(pretty.stdout) == json.loads(served.content)
    assert "\n  " in pretty.stdout
