"""Amazon EC2 Auto Scaling lifecycle hooks for instance termination and launch, on forewarn's clock ("Amazon EC2 Auto Scaling
lifecycle hooks", "Complete a lifecycle action", "Retrieve the target lifecycle state through instance metadata" in
the Amazon EC2 Auto Scaling User Guide; the Auto Scaling API Reference's PutLifecycleHook, CompleteLifecycleAction,
RecordLifecycleActionHeartbeat).

An instance a group terminates while the group has a terminating hook waits in ``Terminating:Wait`` (its
``target-lifecycle-state`` is already ``Terminated``) until every hook's action is completed, a heartbeat timeout
passes (the hook's default result applies), or the global timeout (100 heartbeat timeouts, at most 48 hours) passes.
For a terminating instance CONTINUE and ABANDON both let the termination go on. A replacement the group launches
while it has a launching hook waits likewise in ``Pending:Wait``: CONTINUE puts it in service, ABANDON ends it.
Pure: the wire is aws/autoscaling/."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from forewarn.core.changes import Change
from forewarn.core.errors import Invalid, NotFound

TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
HOOK_NAME = re.compile(r"^[A-Za-z0-9\-_/]{1,255}$")
LONGEST_GLOBAL = timedelta(hours=48)  # "the maximum amount of time ... is 48 hours or 100 times the heartbeat timeout"


class LifecycleRefused(Invalid):
    """ValidationError on the wire."""


@dataclass(frozen=True)
class LifecycleHook:
    group: str
    name: str
    transition: str
    heartbeat_timeout: int = 3600  # seconds, 30 to 7200
    default_result: str = "ABANDON"
    notification_target_arn: str | None = None
    role_arn: str | None = None
    notification_metadata: str | None = None
    deleted: bool = False

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}"

    @property
    def global_timeout(self) -> int:
        return int(min(timedelta(seconds=100 * self.heartbeat_timeout), LONGEST_GLOBAL).total_seconds())

    def check(self) -> LifecycleHook:
        if not HOOK_NAME.match(self.name):
            raise LifecycleRefused(f"Lifecycle hook name {self.name!r} is not valid")
        if self.transition not in (TERMINATING, LAUNCHING):
            raise LifecycleRefused(f"Invalid lifecycle transition: {self.transition}")
        if not 30 <= self.heartbeat_timeout <= 7200:
            raise LifecycleRefused("Heartbeat timeout must be between 30 and 7200 seconds")
        if self.default_result not in ("CONTINUE", "ABANDON"):
            raise LifecycleRefused(f"Invalid default result: {self.default_result}")
        return self


@dataclass(frozen=True)
class LifecycleAction:
    """One hook's wait for one instance: identified by its token (or by the instance and the hook)."""

    token: str
    group: str
    hook: str
    instance_id: str
    transition: str
    started_at: datetime
    timeout_at: datetime  # the heartbeat timeout, moved by each heartbeat, never past the global timeout
    global_at: datetime
    result: str | None = None  # CONTINUE or ABANDON once completed (or timed out)
    decrement: bool = True  # the group's desired capacity goes down (no replacement)

    @property
    def key(self) -> str:
        return self.token


@dataclass(frozen=True)
class HookChanged(Change):
    """``what``: put, deleted (then ``hook.deleted``)."""

    hook: LifecycleHook
    what: str

    def describe(self) -> str:
        return f"lifecycle hook {self.hook.key} {self.what}"


@dataclass(frozen=True)
class LifecycleActionChanged(Change):
    """``what``: started (the instance waits), heartbeat, completed, timed-out."""

    action: LifecycleAction
    what: str

    def describe(self) -> str:
        action = self.action
        return f"lifecycle action {action.hook} of {action.instance_id}: {self.what}"


class LifecycleHooks:
    """Every group's hooks and the actions under way."""

    def __init__(self, hooks: Iterable[LifecycleHook] = (), actions: Iterable[LifecycleAction] = ()):
        self.hooks: dict[str, LifecycleHook] = {hook.key: hook for hook in hooks if not hook.deleted}
        self.actions: dict[str, LifecycleAction] = {a.token: a for a in actions if a.result is None}

    def of_group(self, group: str, transition: str | None = None) -> list[LifecycleHook]:
        return [
            hook
            for hook in self.hooks.values()
            if hook.group == group and (transition is None or hook.transition == transition)
        ]

    def put(self, hook: LifecycleHook) -> list[Change]:
        hook = hook.check()
        self.hooks[hook.key] = hook
        return [HookChanged(hook, "put")]

    def delete(self, group: str, name: str) -> list[Change]:
        hook = self.hooks.pop(f"{group}/{name}", None)
        if hook is None:
            raise NotFound(f"No Lifecycle Hook found with name {name} for group {group}")
        return [HookChanged(replace(hook, deleted=True), "deleted")]

    def waiting(self, instance_id: str) -> list[LifecycleAction]:
        return [a for a in self.actions.values() if a.instance_id == instance_id]

    def find(self, group: str, hook: str, token: str | None, instance_id: str | None) -> LifecycleAction:
        """The action a CompleteLifecycleAction or a heartbeat names: by token, or by instance."""
        for action in self.actions.values():
            if action.group != group or action.hook != hook:
                continue
            if (token is not None and action.token == token) or (token is None and action.instance_id == instance_id):
                return action
        raise LifecycleRefused("No active Lifecycle Action found with token or instance ID given")

    def start(self, action: LifecycleAction) -> list[Change]:
        self.actions[action.token] = action
        return [LifecycleActionChanged(action, "started")]

    def heartbeat(self, action: LifecycleAction, now: datetime) -> list[Change]:
        hook = self.hooks.get(f"{action.group}/{action.hook}")
        seconds = hook.heartbeat_timeout if hook is not None else 3600
        action = replace(action, timeout_at=min(now + timedelta(seconds=seconds), action.global_at))
        self.actions[action.token] = action
        return [LifecycleActionChanged(action, "heartbeat")]

    def finish(self, action: LifecycleAction, result: str, what: str) -> list[Change]:
        if result not in ("CONTINUE", "ABANDON"):
            raise LifecycleRefused(f"Invalid lifecycle action result: {result}")
        action = replace(action, result=result)
        del self.actions[action.token]
        return [LifecycleActionChanged(action, what)]

    def replicate(
        self, hooks: Mapping[str, LifecycleHook | None], actions: Mapping[str, LifecycleAction | None]
    ) -> None:
        for key, hook in hooks.items():
            if hook is None or hook.deleted:
                self.hooks.pop(key, None)
            else:
                self.hooks[key] = hook
        for token, action in actions.items():
            if action is None or action.result is not None:
                self.actions.pop(token, None)
            else:
                self.actions[token] = action
