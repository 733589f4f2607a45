"""The example cloud's machines, its rules, its one kind of maintenance and the change it makes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from forewarn.core.bounds import MAX_NOTICE
from forewarn.core.changes import Change
from forewarn.core.errors import Invalid

ANNOUNCED = "announced"  # the machine's metadata key says REBOOT until ``at``
REBOOTED = "rebooted"


@dataclass(frozen=True)
class ExampleMachine:
    """A machine of the fleet (``fleet.model.Machine``): its name is its fleet name."""

    name: str
    host: str
    imds_address: str | None = None
    imds_port: int | None = None
    interruptible: bool = False

    @property
    def fleet_name(self) -> str:
        return self.name


@dataclass(frozen=True)
class ExampleRules:
    """How far ahead a reboot is announced unless the request says."""

    notice: timedelta = timedelta(minutes=15)

    def check(self) -> None:
        if not timedelta(0) < self.notice <= MAX_NOTICE:
            raise Invalid(f"an example reboot's notice is more than 0 and at most {MAX_NOTICE}, not {self.notice}")


@dataclass(frozen=True)
class Reboot:
    """A machine's reboot: an event, as a scenario run tells what it created (by its id and creation time)."""

    event_id: str
    machine: str
    at: datetime
    created_at: datetime
    state: str  # ANNOUNCED, then REBOOTED

    @property
    def value(self) -> str:
        """The machine's maintenance key while this is its latest reboot."""
        return "REBOOT" if self.state == ANNOUNCED else "NONE"


@dataclass(frozen=True)
class RebootChanged(Change):
    reboot: Reboot

    def subject(self) -> str:
        return f"example machine {self.reboot.machine}"

    def describe(self) -> str:
        return f"example machine {self.reboot.machine}: reboot {self.reboot.state} (at {self.reboot.at.isoformat()})"
