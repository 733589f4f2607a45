"""The maintenance engine: commands in, changes out.

The engine never does I/O and never reads the wall clock; every command carries the simulated time it happens at.
Each command returns the list of changes it caused, which the service commits to the store before anyone is told.

The engine is a facade over its components, each with its own state: Azure (``azure/component.py``), EC2
(``aws/component.py``), Compute Engine (``gcp/component.py``) and waves (``waves/component.py``). They share one
simulated ``now``, one deadline heap and one numbering (``core/scheduler.py``); the engine builds them, wires the
waves to the ends of Azure's and Compute Engine's events, moves time, and offers their commands and queries under
the names the surfaces, the runtime and the store use.
"""

from __future__ import annotations

from datetime import datetime

from forewarn.aws.component import Ec2Component, Ec2Rows, StoredEc2
from forewarn.aws.model import Ec2Event, Ec2Instance, Ec2State, NotificationAttributes
from forewarn.aws.windows import EventWindow
from forewarn.azure.component import (
    INITIAL_INCARNATION,
    MAX_EXTRA_IMPACTS,
    MIN_EVENT_ID_PREFIX,
    AzureComponent,
    AzureRows,
    StoredAzure,
)
from forewarn.azure.model import Event, ScheduleRequest
from forewarn.azure.vms import Policies, VmStates
from forewarn.core.bounds import check_time, clamped_time
from forewarn.core.changes import Change, TimeMoved
from forewarn.core.errors import Conflict
from forewarn.core.scheduler import Scheduler, Sequence
from forewarn.engine.rules import Rules, check_rules
from forewarn.fleet.model import Fleet
from forewarn.gcp.component import GcpComponent, GcpRows, StoredGcp
from forewarn.gcp.model import GceMaintenance, GceState
from forewarn.waves.component import StoredWaves, Wave, WaveRows, WaveRunner

# Names other modules import from here.
__all__ = [
    "INITIAL_INCARNATION",
    "MAX_EXTRA_IMPACTS",
    "MIN_EVENT_ID_PREFIX",
    "Change",
    "Engine",
    "ScheduleRequest",
    "StoredAzure",
    "StoredEc2",
    "StoredGcp",
    "StoredWaves",
]


class Engine:
    def __init__(
        self,
        fleet: Fleet,
        seed: str,
        now: datetime,
        rules: Rules | None = None,
        *,
        created_at: datetime | None = None,
        azure: StoredAzure | None = None,
        ec2: StoredEc2 | None = None,
        gcp: StoredGcp | None = None,
        waves: StoredWaves | None = None,
        next_seq: int = 1,
    ) -> None:
        """``azure``, ``ec2`` and ``waves``: each component's stored state (none: a fleet just deployed);
        ``created_at``: when the fleet was deployed (its VMs' and instances' boot time); ``next_seq``: the stored
        numbering, which also names things that are not events (windows, replacement instances, waves)."""
        self.fleet = fleet
        self.seed = seed
        self.rules = check_rules(rules or Rules())
        self.scheduler = Scheduler(clamped_time(now))
        sequence = Sequence()
        self._sequence = sequence
        deployed_at = clamped_time(created_at or now)
        # Built in this order, as their deadlines at one instant fire in the order they were set.
        self.azure = AzureComponent(
            fleet, seed, self.rules, self.scheduler, sequence, azure or StoredAzure(), deployed_at
        )
        self.ec2 = Ec2Component(fleet, seed, self.rules.ec2, self.scheduler, sequence, ec2 or StoredEc2(), deployed_at)
        self.gcp = GcpComponent(fleet, seed, self.rules.gce, self.scheduler, sequence, gcp or StoredGcp(), deployed_at)
        self.wave_runner = WaveRunner(self.azure, self.gcp, self.scheduler, sequence, waves or StoredWaves())
        self.azure.on_event_ended(self.wave_runner.event_ended)
        self.gcp.on_event_ended(self.wave_runner.gce_event_ended)
        sequence.past(next_seq - 1)
        # What was brought inside the bounds (bounds.py) on loading a database written before them: the service
        # logs these changes and writes them back before it serves.
        self.repaired: list[Change] = self.azure.repaired + self.ec2.repaired

        # The commands and queries, under the names the rest of the code uses. Azure:
        self.incarnation = self.azure.incarnation
        self.live_events = self.azure.live_events
        self.event = self.azure.event
        self.resolve_event_id = self.azure.resolve_event_id
        self.event_by_seq = self.azure.event_by_seq
        self.operation_events = self.azure.operation_events
        self.vms_on_host = self.azure.vms_on_host
        self.names_on_host = self.azure.names_on_host
        self.impact_of = self.azure.impact_of
        self.schedule = self.azure.schedule
        self.check_schedule = self.azure.check_schedule
        self.approve = self.azure.approve
        self.check_approve = self.azure.check_approve
        self.cancel = self.azure.cancel
        self.check_cancel = self.azure.check_cancel
        self.is_enabled = self.azure.is_enabled
        self.request_seen = self.azure.request_seen
        self.restart = self.azure.restart
        self.redeploy = self.azure.redeploy
        self.reimage = self.azure.reimage
        self.delete = self.azure.delete
        self.scale_in = self.azure.scale_in
        self.policy = self.azure.policy
        self.update_policy = self.azure.update_policy
        self.update_instances = self.azure.update_instances
        self.hardware_failure = self.azure.hardware_failure
        self.predicted_failure = self.azure.predicted_failure
        self.evict = self.azure.evict
        # EC2:
        self.ec2_instance = self.ec2.ec2_instance
        self.ec2_events_of = self.ec2.ec2_events_of
        self.ec2_event = self.ec2.ec2_event
        self.ec2_window = self.ec2.ec2_window
        self.schedule_ec2 = self.ec2.schedule_ec2
        self.cancel_ec2 = self.ec2.cancel_ec2
        self.reschedule_ec2 = self.ec2.reschedule_ec2
        self.start_instance = self.ec2.start_instance
        self.interrupt_spot = self.ec2.interrupt_spot
        self.recommend_rebalance = self.ec2.recommend_rebalance
        self.create_window = self.ec2.create_window
        self.modify_window = self.ec2.modify_window
        self.delete_window = self.ec2.delete_window
        self.associate_window = self.ec2.associate_window
        self.disassociate_window = self.ec2.disassociate_window
        self.register_notification_attributes = self.ec2.register_notification_attributes
        self.deregister_notification_attributes = self.ec2.deregister_notification_attributes
        # Compute Engine:
        self.gce_instance = self.gcp.gce_instance
        self.gce_event = self.gcp.gce_event
        self.gce_events_of = self.gcp.gce_events_of
        self.maintenance_event = self.gcp.maintenance_event
        self.gce_notice = self.gcp.notice_of
        self.upcoming_maintenance = self.gcp.upcoming
        self.schedule_gce = self.gcp.schedule_gce
        self.simulate_gce = self.gcp.simulate_gce
        self.perform_maintenance = self.gcp.perform_maintenance
        self.reschedule_gce = self.gcp.reschedule_gce
        self.cancel_gce = self.gcp.cancel_gce
        self.watch_gce = self.gcp.watch
        self.set_scheduling = self.gcp.set_scheduling
        self.preempt_gce = self.gcp.preempt
        self.host_error_gce = self.gcp.host_error
        self.start_gce = self.gcp.start_gce
        # Waves:
        self.wave = self.wave_runner.wave
        self.start_wave = self.wave_runner.start_wave
        self.cancel_wave = self.wave_runner.cancel_wave

    # ------------------------------------------------------------------------------------------------- time
    @property
    def now(self) -> datetime:
        return self.scheduler.now

    @property
    def next_seq(self) -> int:
        return self._sequence.next_number

    def next_deadline(self) -> datetime | None:
        return self.scheduler.next_deadline()

    # ------------------------------------------------------------------------------------------ replication
    def replicate(
        self,
        now: datetime,
        next_seq: int,
        created_at: datetime,
        *,
        azure: AzureRows | None = None,
        ec2: Ec2Rows | None = None,
        gcp: GcpRows | None = None,
        waves: WaveRows | None = None,
    ) -> list[Change]:
        """A replica takes the rows the leader's commits touched, read back at the leader's ``now`` and numbering
        (which the replica's own projection may have passed: it goes back to them). Each component updates its
        state, indexes and deadlines; the changes returned tell the read models what moved (a Rebuilt among them:
        drop what was derived)."""
        self.scheduler.now = clamped_time(now)
        self._sequence.next_number = next_seq
        changes: list[Change] = []
        if azure is not None:
            changes += self.azure.replicate(azure, clamped_time(created_at))
        if ec2 is not None:
            changes += self.ec2.replicate(ec2, clamped_time(created_at))
        if gcp is not None:
            changes += self.gcp.replicate(gcp, clamped_time(created_at))
        if azure is not None or waves is not None:
            changes += self.wave_runner.replicate(waves)
        changes.append(TimeMoved(self.now))
        return changes

    def reschedule(self) -> None:
        """Every deadline again from the state, as loading it sets them: a replica taking over drops what its
        projections left in the scheduler."""
        self.scheduler.clear()
        self.azure.reschedule()
        self.ec2.reschedule()
        self.gcp.reschedule()

    def check_advance(self, to: datetime) -> None:
        """Refuse a move of time as :meth:`advance` would, changing nothing."""
        check_time(to, "the new time")
        if to < self.now:
            raise Conflict(f"time cannot go backwards: now is {self.now.isoformat()}, asked {to.isoformat()}")

    def advance(self, to: datetime) -> list[Change]:
        """Move simulated time to ``to``, applying every deadline due on the way, in order, one step per instant."""
        self.check_advance(to)
        changes = self.scheduler.run_until(to)
        changes.append(TimeMoved(to))
        return changes

    # ------------------------------------------------------------------------------------ the components' state
    @property
    def events(self) -> dict[str, Event]:
        return self.azure.events

    @property
    def operations(self) -> dict[str, list[str]]:
        return self.azure.operations

    @property
    def incarnations(self) -> dict[str, int]:
        return self.azure.incarnations

    @property
    def vm_states(self) -> VmStates:
        return self.azure.vm_states

    @property
    def policies(self) -> Policies:
        return self.azure.policies

    @property
    def last_seen(self) -> dict[str, datetime]:
        return self.azure.last_seen

    @property
    def ec2_instances(self) -> dict[str, Ec2Instance]:
        return self.ec2.ec2_instances

    @property
    def ec2_states(self) -> dict[str, Ec2State]:
        return self.ec2.ec2_states

    @property
    def ec2_events(self) -> dict[str, Ec2Event]:
        return self.ec2.ec2_events

    @property
    def ec2_windows(self) -> dict[str, EventWindow]:
        return self.ec2.ec2_windows

    @property
    def notification_attributes(self) -> NotificationAttributes:
        return self.ec2.notification_attributes

    @property
    def gce_states(self) -> dict[str, GceState]:
        return self.gcp.gce_states

    @property
    def gce_events(self) -> dict[str, GceMaintenance]:
        return self.gcp.gce_events

    @property
    def waves(self) -> dict[str, Wave]:
        return self.wave_runner.waves
