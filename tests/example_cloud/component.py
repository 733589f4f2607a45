"""The example cloud's engine component: a reboot announced ahead (the rules' notice, or the request's), a deadline
on the engine's heap at which the machine reboots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from example_cloud.fleet import example_fleet
from example_cloud.model import ANNOUNCED, REBOOTED, ExampleRules, Reboot, RebootChanged
from forewarn.core.bounds import check_time
from forewarn.core.changes import Change
from forewarn.core.component import Footing
from forewarn.core.errors import Conflict, Invalid, NotFound, did_you_mean


@dataclass
class StoredExample:
    """What the records load: each machine's latest reboot."""

    reboots: dict[str, Reboot] = field(default_factory=dict)


class ExampleComponent:
    def __init__(self, footing: Footing, stored: StoredExample):
        self.repaired: list[Change] = []
        self.machines = example_fleet(footing.fleet).machines
        self.rules = footing.rules.of(ExampleRules)
        self.scheduler = footing.scheduler
        self.sequence = footing.sequence
        self.reboots = dict(stored.reboots)
        self._reboot_due = footing.scheduler.kind("example-reboot", self._reboot, self._is_stale)
        self.reschedule()

    def maintain(self, name: str, notice: timedelta | None = None) -> list[Change]:
        """Announce a reboot of ``name``, ``notice`` ahead (the rules' by default)."""
        if name not in self.machines:
            raise NotFound(f"no example machine {name!r}{did_you_mean(name, self.machines)}")
        if notice is not None and notice <= timedelta(0):
            raise Invalid(f"a reboot's notice is more than 0, not {notice}")
        if self.value_of(name) == "REBOOT":
            raise Conflict(f"example machine {name!r} has a reboot announced already")
        now = self.scheduler.now
        reboot = Reboot(f"reboot-{self.sequence.take()}", name, now + (notice or self.rules.notice), now, ANNOUNCED)
        check_time(reboot.at, "the reboot")
        self.reboots[name] = reboot
        self.scheduler.add(reboot.at, self._reboot_due, name)
        return [RebootChanged(reboot)]

    def value_of(self, name: str) -> str:
        """The machine's maintenance key: REBOOT while a reboot is announced, else NONE."""
        reboot = self.reboots.get(name)
        return "NONE" if reboot is None else reboot.value

    def _reboot(self, name: str) -> list[Change]:
        reboot = self.reboots[name] = replace(self.reboots[name], state=REBOOTED)
        return [RebootChanged(reboot)]

    def _is_stale(self, name: str, at: datetime) -> bool:
        reboot = self.reboots.get(name)
        return reboot is None or reboot.state != ANNOUNCED or reboot.at != at

    def replicate(self, rows: Mapping[str, Reboot | None], created_at: datetime) -> list[Change]:
        changes: list[Change] = []
        for name, reboot in rows.items():
            if reboot is None:
                self.reboots.pop(name, None)
            else:
                self.reboots[name] = reboot
                changes.append(RebootChanged(reboot))
        self.reschedule()
        return changes

    def release(self) -> None:
        """Everything is kept in memory: nothing to let go of once committed."""

    def reschedule(self) -> None:
        for reboot in self.reboots.values():
            if reboot.state == ANNOUNCED:
                self.scheduler.add(reboot.at, self._reboot_due, reboot.machine)
