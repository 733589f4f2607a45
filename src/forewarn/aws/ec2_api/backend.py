"""The EC2 API's one door into the engine: what the actions read of it (instances, their states and events, event
windows, notification attributes) and the commands they run. Reads take the engine as it is after ``catch_up``;
every command goes through :meth:`Maintenance.perform`, so it is committed before the answer leaves. The engine's
own errors come through unchanged; each action says them in EC2's codes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from forewarn.app.runtime import Maintenance
from forewarn.aws.changes import Ec2EventChanged, Ec2NotificationAttributesChanged, Ec2WindowChanged
from forewarn.aws.component import Ec2Component
from forewarn.aws.ec2_api.status import InstanceView, summaries
from forewarn.aws.model import (
    EVENT_HISTORY,
    Ec2Event,
    Ec2EventState,
    Ec2Instance,
    Ec2State,
    InstanceState,
    NotificationAttributes,
    availability_zone_id,
)
from forewarn.aws.windows import EventWindow, TimeRange
from forewarn.core.changes import Change
from forewarn.engine.engine import Engine

TERMINATED_VISIBLE = timedelta(hours=1)  # DescribeInstances: "usually less than one hour"

Tags = tuple[tuple[str, str], ...]


class Ec2Backend:
    def __init__(self, service: Maintenance):
        self.service = service
        self._order_key: tuple[int, int] | None = None
        self._order: list[str] = []
        # instance ID -> (what its item was rendered from, the item's XML): see status_item
        self._items: dict[str, tuple[Ec2Instance, Ec2State, Ec2Event | None, tuple[Ec2Event, ...], str]] = {}

    @property
    def _engine(self) -> Engine:
        return self.service.settled_engine()  # a property: the service rebuilds its engine (a restored snapshot, say)

    # ------------------------------------------------------------------------------------------------ clock
    def catch_up(self) -> None:
        self.service.catch_up()

    def now(self) -> datetime:
        return self.service.now()

    def wall(self) -> float:
        return self.service.wall()

    @property
    def secret(self) -> str:
        """What signs paging tokens: the fleet's seed, so tokens survive a restart of the same fleet."""
        return self._engine.seed

    # ---------------------------------------------------------------------------------------------- instances
    @property
    def instances(self) -> Mapping[str, Ec2Instance]:
        return self._engine.component(Ec2Component).ec2_instances

    def running(self, instance_id: str) -> bool:
        return self._engine.component(Ec2Component).ec2_states[instance_id].state is InstanceState.RUNNING

    def ordered_ids(self) -> list[str]:
        """Every instance ID, sorted; rebuilt only when an instance is added or the engine is rebuilt."""
        instances = self._engine.component(Ec2Component).ec2_instances
        key = (id(self._engine), len(instances))
        if key != self._order_key:
            self._order = sorted(instances)
            self._order_key = key
        return self._order

    def visible(self, instance_id: str, region: str | None, now: datetime) -> bool:
        """Whether the API shows the instance: in the request's region (when it is signed for one), and not
        terminated for longer than EC2 keeps showing terminated instances."""
        instance = self._engine.component(Ec2Component).ec2_instances.get(instance_id)
        if instance is None:
            return False
        return _shown(instance, self._engine.component(Ec2Component).ec2_states[instance_id], region, now)

    def shown_events(self, instance_id: str, now: datetime) -> list[Ec2Event]:
        """Active events, and completed or canceled ones for a week after they ended."""
        return _recent(self._engine.component(Ec2Component).ec2_events_of(instance_id), now)

    def status_item(
        self,
        instance_id: str,
        now: datetime,
        region: str | None,
        include_all: bool,
        keep: Callable[[InstanceView], bool] | None = None,
    ) -> str | None:
        """The instance's DescribeInstanceStatus item as ``view(...).xml()`` renders it, or None when the listing
        leaves it out (not running without ``include_all``, not visible in ``region``, or not kept by ``keep``).

        The XML is rendered again only when what it is made of changed. The engine replaces (never mutates) an
        instance, its state and its events when they change, so those objects, compared by identity, say whether
        the stored XML is still true (a week-old event leaving the shown list changes the list). Rendering every
        item of a 1,000-instance listing on every request was about 10 µs an instance, most of the server's work."""
        engine = self._engine
        instance = engine.component(Ec2Component).ec2_instances.get(instance_id)
        if instance is None:
            return None
        state = engine.component(Ec2Component).ec2_states[instance_id]
        if not include_all and state.state is not InstanceState.RUNNING:
            return None
        if not _shown(instance, state, region, now):
            return None
        if keep is not None and not keep(self.view(instance_id, now)):
            return None
        impacting = engine.component(Ec2Component).find_ec2_event(state.impacted_by) if state.impacted_by else None
        events = engine.component(Ec2Component).ec2_events_of(instance_id)
        shown = tuple(_recent(events, now)) if events else ()
        cached = self._items.get(instance_id)
        if (
            cached is not None
            and cached[0] is instance
            and cached[1] is state
            and cached[2] is impacting
            and len(cached[3]) == len(shown)
            and all(old is new for old, new in zip(cached[3], shown))
        ):
            return cached[4]
        system, status, ebs = summaries(instance, state, impacting)
        xml = InstanceView(
            instance, state, availability_zone_id(instance.availability_zone), system, status, ebs, list(shown)
        ).xml()
        self._items[instance_id] = (instance, state, impacting, shown, xml)
        return xml

    def view(self, instance_id: str, now: datetime) -> InstanceView:
        instance = self._engine.component(Ec2Component).ec2_instances[instance_id]
        state = self._engine.component(Ec2Component).ec2_states[instance_id]
        impacting = (
            self._engine.component(Ec2Component).find_ec2_event(state.impacted_by) if state.impacted_by else None
        )
        system, status, ebs = summaries(instance, state, impacting)
        return InstanceView(
            instance,
            state,
            availability_zone_id(instance.availability_zone),
            system,
            status,
            ebs,
            self.shown_events(instance_id, now),
        )

    async def reschedule_event(self, instance_id: str, event_id: str, not_before: datetime) -> Ec2Event:
        changes = await self._perform(
            lambda engine: engine.component(Ec2Component).reschedule_ec2(instance_id, event_id, not_before)
        )
        return next(change.event for change in changes if isinstance(change, Ec2EventChanged))

    # ------------------------------------------------------------------------------------------ event windows
    @property
    def windows(self) -> Mapping[str, EventWindow]:
        return self._engine.component(Ec2Component).ec2_windows

    async def create_window(
        self, name: str, ranges: tuple[TimeRange, ...], cron: str | None, tags: Tags
    ) -> EventWindow:
        return await self._window_command(
            lambda engine: engine.component(Ec2Component).create_window(name, ranges, cron, tags)
        )

    async def modify_window(
        self, window_id: str, name: str | None, ranges: tuple[TimeRange, ...] | None, cron: str | None
    ) -> EventWindow:
        return await self._window_command(
            lambda engine: engine.component(Ec2Component).modify_window(
                window_id, name=name, time_ranges=ranges, cron=cron
            )
        )

    async def delete_window(self, window_id: str, force: bool) -> EventWindow:
        return await self._window_command(lambda engine: engine.component(Ec2Component).delete_window(window_id, force))

    async def associate_window(
        self, window_id: str, instance_ids: tuple[str, ...], tags: Tags, hosts: tuple[str, ...]
    ) -> EventWindow:
        return await self._window_command(
            lambda engine: engine.component(Ec2Component).associate_window(window_id, instance_ids, tags, hosts)
        )

    async def disassociate_window(
        self, window_id: str, instance_ids: tuple[str, ...], tags: Tags, hosts: tuple[str, ...]
    ) -> EventWindow:
        return await self._window_command(
            lambda engine: engine.component(Ec2Component).disassociate_window(window_id, instance_ids, tags, hosts)
        )

    async def _window_command(self, command: Callable[[Engine], list[Change]]) -> EventWindow:
        changes = await self._perform(command)
        return next(change.window for change in changes if isinstance(change, Ec2WindowChanged))

    # --------------------------------------------------------------------------- event notification attributes
    @property
    def notification_attributes(self) -> NotificationAttributes:
        return self._engine.component(Ec2Component).notification_attributes

    async def register_attributes(self, include_all: bool, keys: tuple[str, ...]) -> NotificationAttributes:
        return await self._attributes_command(
            lambda engine: engine.component(Ec2Component).register_notification_attributes(
                include_all=include_all, keys=keys
            )
        )

    async def deregister_attributes(self, include_all: bool, keys: tuple[str, ...]) -> NotificationAttributes:
        return await self._attributes_command(
            lambda engine: engine.component(Ec2Component).deregister_notification_attributes(
                include_all=include_all, keys=keys
            )
        )

    async def _attributes_command(self, command: Callable[[Engine], list[Change]]) -> NotificationAttributes:
        changes = await self._perform(command)
        return next(change.attributes for change in changes if isinstance(change, Ec2NotificationAttributesChanged))

    async def _perform(self, command: Callable[[Engine], list[Change]]) -> list[Change]:
        # Through the group commit, as every command a surface hands in: durable before the answer, off the loop.
        return await self.service.perform_soon(command)


def _recent(events: list[Ec2Event], now: datetime) -> list[Ec2Event]:
    """Active events, and completed or canceled ones for a week after they ended."""
    return [
        event
        for event in events
        if event.state is Ec2EventState.ACTIVE or (event.ended_at is not None and now - event.ended_at <= EVENT_HISTORY)
    ]


def _shown(instance: Ec2Instance, state: Ec2State, region: str | None, now: datetime) -> bool:
    """In the request's region (when it is signed for one), and not terminated for longer than EC2 shows that."""
    if region is not None and instance.region != region:
        return False
    if state.state is InstanceState.TERMINATED:
        ended = state.terminated_at
        return ended is None or now - ended <= TERMINATED_VISIBLE
    return True
