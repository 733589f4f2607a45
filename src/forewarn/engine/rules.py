"""Platform rules: notice per event type, impact windows, default descriptions and durations.

Defaults follow the minimum notice of Microsoft's "Azure Metadata Service: Scheduled Events for Windows VMs": Freeze
and Reboot 15 minutes of notice, Redeploy 10 minutes, Preempt 30 seconds, Terminate 5 to 15 minutes (default 10 here
until scale-set profiles set it). Impact windows follow the median timings of Microsoft's mock server
(Azure-Samples/scheduled-events-mock-server): Freeze 5 minutes, the others 10 minutes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from forewarn.aws.model import Ec2Rules
from forewarn.azure.model import EventSource, EventType, Impact

DEFAULT_NOTICE = {
    EventType.FREEZE: timedelta(minutes=15),
    EventType.REBOOT: timedelta(minutes=15),
    EventType.REDEPLOY: timedelta(minutes=10),
    EventType.PREEMPT: timedelta(seconds=30),
    EventType.TERMINATE: timedelta(minutes=10),
}

DEFAULT_IMPACT_WINDOW = {
    EventType.FREEZE: timedelta(minutes=5),
    EventType.REBOOT: timedelta(minutes=10),
    EventType.REDEPLOY: timedelta(minutes=10),
    EventType.PREEMPT: timedelta(minutes=5),
    EventType.TERMINATE: timedelta(minutes=10),
}

# How long a VM is down when an event's DurationInSeconds does not say (it is -1, unknown): our choices, shorter
# than the impact windows so that the VM runs again before the event completes.
DEFAULT_IMPACT_DURATION = {
    Impact.FREEZE: timedelta(seconds=5),
    Impact.REBOOT: timedelta(seconds=90),
    Impact.REDEPLOY: timedelta(minutes=3),
    Impact.REIMAGE: timedelta(minutes=2),
    Impact.DELETE: timedelta(0),
}

# DurationInSeconds: -1 means unknown; the live-migration Freeze of the example flow in Microsoft's "Scheduled Events
# for Azure Virtual Machines" lasts 5 seconds.
DEFAULT_DURATION_SECONDS = {
    EventType.FREEZE: 5,
    EventType.REBOOT: -1,
    EventType.REDEPLOY: -1,
    EventType.PREEMPT: -1,
    EventType.TERMINATE: -1,
}

# Descriptions seen on real VMs and in Microsoft's Scheduled Events pages; user Reboot and Preempt events were seen
# with "".
DEFAULT_DESCRIPTIONS = {
    (EventType.FREEZE, EventSource.PLATFORM): (
        "Virtual machine is being paused because of a memory-preserving Live Migration operation."
    ),
    (EventType.REBOOT, EventSource.PLATFORM): "Host server is undergoing maintenance.",
    (EventType.REDEPLOY, EventSource.PLATFORM): "Host server is undergoing maintenance.",
    (EventType.REBOOT, EventSource.USER): "Virtual machine is going to be restarted as requested by authorized user.",
    (EventType.REDEPLOY, EventSource.USER): (
        "Virtual machine is going to be redeployed as requested by authorized user."
    ),
}


@dataclass(frozen=True)
class Rules:
    notice: dict[EventType, timedelta] = field(default_factory=lambda: dict(DEFAULT_NOTICE))
    impact_window: dict[EventType, timedelta] = field(default_factory=lambda: dict(DEFAULT_IMPACT_WINDOW))
    duration_seconds: dict[EventType, int] = field(default_factory=lambda: dict(DEFAULT_DURATION_SECONDS))
    impact_duration: dict[Impact, timedelta] = field(default_factory=lambda: dict(DEFAULT_IMPACT_DURATION))
    # "Scheduled Events for Azure Virtual Machines" says Redeploy; the IMDS pages say Reboot
    hardware_failure_type: EventType = EventType.REDEPLOY
    # the IMDS pages: "Azure tries to give 7 days' advance notice"
    predicted_failure_notice: timedelta = timedelta(days=7)
    # Seed 001: Scheduled Events are enabled for a VM by its first request and disabled after 24 hours without
    # one. While a scope is not enabled its VMs get no notice: their events start at once. Off by default, so
    # that a test need not poll before it schedules; the realistic IMDS profile turns it on.
    enabling_required: bool = False
    disable_after: timedelta = timedelta(hours=24)
    ec2: Ec2Rules = field(default_factory=Ec2Rules)

    def description(self, event_type: EventType, source: EventSource) -> str:
        return DEFAULT_DESCRIPTIONS.get((event_type, source), "")

    def with_overrides(
        self,
        notice: dict[EventType, timedelta] | None = None,
        impact_window: dict[EventType, timedelta] | None = None,
        **fields,
    ) -> Rules:
        return replace(
            self,
            notice={**self.notice, **(notice or {})},
            impact_window={**self.impact_window, **(impact_window or {})},
            **fields,
        )


def whole_second_ceiling(moment: datetime) -> datetime:
    """NotBefore is shown to the second; rounding up keeps the promise that nothing starts before the shown time."""
    if moment.microsecond == 0:
        return moment
    return moment.replace(microsecond=0) + timedelta(seconds=1)
