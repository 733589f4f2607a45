"""The example cloud's part of the store: one row per machine's latest reboot, in a table its records create (no
numbered migration of forewarn's knows a cloud kept outside it)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from example_cloud.component import StoredExample
from example_cloud.model import Reboot, RebootChanged
from forewarn.store.records import Reader, Records, Rows, Touched, Writer

TABLE = "forewarn_example_reboots"
CREATE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (machine TEXT PRIMARY KEY, event_id TEXT NOT NULL, at TEXT NOT NULL, "
    "created_at TEXT NOT NULL, state TEXT NOT NULL)"
)
PUT = (
    f"INSERT INTO {TABLE} (machine, event_id, at, created_at, state) VALUES (?, ?, ?, ?, ?) ON CONFLICT (machine) "
    "DO UPDATE SET event_id = excluded.event_id, at = excluded.at, created_at = excluded.created_at, "
    "state = excluded.state"
)
SELECT = f"SELECT machine, event_id, at, created_at, state FROM {TABLE}"


def _write(change: RebootChanged, rows: Rows) -> None:
    reboot = change.reboot
    at, created_at = reboot.at.isoformat(), reboot.created_at.isoformat()
    rows.write(PUT, (reboot.machine, reboot.event_id, at, created_at, reboot.state))
    rows.touch(TABLE, reboot.machine)
    rows.journal(f"example reboot {reboot.state}", reboot.event_id, {"machine": reboot.machine, "at": at})


def _decode(row: tuple[Any, ...]) -> Reboot:
    machine, event_id, at, created_at, state = row
    return Reboot(event_id, machine, datetime.fromisoformat(at), datetime.fromisoformat(created_at), state)


def _load(reader: Reader) -> dict[str, Any]:
    return {"example": StoredExample({row[0]: _decode(row) for row in reader.rows(SELECT)})}


def _reload(reader: Reader, touched: Touched) -> dict[str, Any]:
    keys = touched.get(TABLE)
    return {"example": reader.current(SELECT, "machine", keys, _decode)} if keys else {}


EXAMPLE_RECORDS = Records(
    "example", [Writer(RebootChanged, _write)], _load, tables=(TABLE,), reload=_reload, schema=(CREATE,)
)
