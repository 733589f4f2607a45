"""Azure platform rules: notice per event type, impact windows, default descriptions and durations.

Defaults follow the minimum notice of Microsoft's "Azure Metadata Service: Scheduled Events for Windows VMs": Freeze
and Reboot 15 minutes of notice, Redeploy 10 minutes, Preempt 30 seconds, Terminate 5 to 15 minutes (default 10 here
until scale-set profiles set it). Impact windows follow the median timings of Microsoft's mock server
(Azure-Samples/scheduled-events-mock-server): Freeze 5 minutes, the others 10 minutes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Self

from forewarn.azure.model import EventSource, EventType, Impact
from forewarn.core.bounds import MAX_DURATION_SECONDS, MAX_EVENT_LENGTH, MAX_NOTICE, check_duration, check_whole_number

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
class AzureRules:
    notice: dict[EventType, timedelta] = field(default_factory=lambda: dict(DEFAULT_NOTICE))
    impact_window: dict[EventType, timedelta] = field(default_factory=lambda: dict(DEFAULT_IMPACT_WINDOW))
    duration_seconds: dict[EventType, int] = field(default_factory=lambda: dict(DEFAULT_DURATION_SECONDS))
    impact_duration: dict[Impact, timedelta] = field(default_factory=lambda: dict(DEFAULT_IMPACT_DURATION))
    # "Scheduled Events for Azure Virtual Machines" says Redeploy; the IMDS pages say Reboot
    hardware_failure_type: EventType = EventType.REDEPLOY
    # the IMDS pages: "Azure tries to give 7 days' advance notice"
    predicted_failure_notice: timedelta = timedelta(days=7)
    # "Azure Metadata Service: Scheduled Events for Windows VMs": Scheduled Events are enabled for a VM by its first request and disabled after 24 hours without
    # one. While a scope is not enabled its VMs get no notice: their events start at once. Off by default, so
    # that a test need not poll before it schedules; the realistic IMDS profile turns it on.
    enabling_required: bool = False
    disable_after: timedelta = timedelta(hours=24)

    def description(self, event_type: EventType, source: EventSource) -> str:
        return DEFAULT_DESCRIPTIONS.get((event_type, source), "")

    def with_overrides(
        self,
        notice: dict[EventType, timedelta] | None = None,
        impact_window: dict[EventType, timedelta] | None = None,
        **fields: Any,
    ) -> Self:
        return replace(
            self,
            notice={**self.notice, **(notice or {})},
            impact_window={**self.impact_window, **(impact_window or {})},
            **fields,
        )

    def check(self) -> None:
        """Refuse (``Invalid``) a rule outside the bounds every event is held to."""
        check_azure_rules(self)


def check_azure_rules(rules: AzureRules) -> None:
    """The server's Azure rules (``serve --notice``, ``--impact-window``...) within the bounds every event is held to."""
    for event_type, notice in rules.notice.items():
        check_duration(notice, f"the {event_type.value} notice", MAX_NOTICE)
    for event_type, window in rules.impact_window.items():
        check_duration(window, f"the {event_type.value} impact window", MAX_EVENT_LENGTH)
    for impact, length in rules.impact_duration.items():
        check_duration(length, f"the {impact.value} impact duration", MAX_EVENT_LENGTH)
    for event_type, seconds in rules.duration_seconds.items():
        check_whole_number(seconds, f"the {event_type.value} DurationInSeconds", -1, MAX_DURATION_SECONDS)
    check_duration(rules.predicted_failure_notice, "the predicted failure notice", MAX_NOTICE)
    check_duration(rules.disable_after, "the time after which Scheduled Events are disabled", MAX_NOTICE)
