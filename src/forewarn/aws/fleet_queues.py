"""The queue path in the fleet file: ``sqs_queues``, ``eventbridge_rules`` and ``lifecycle_hooks`` (with the Auto
Scaling groups its ``ec2_instances`` name), so that a server starts with the queues, rules and hooks a queue-mode
handler reads, as a new account's setup would make them (docs/aws-queues.md, "The queue path in the fleet file").

They are the EC2 part's start state, as its instances are: the component starts from them and its stored rows go
over them (a queue deleted or a rule changed at run time stays so over a restart), and a reset comes back to them.
Each value is checked as the API action that would make it checks it (CreateQueue, PutRule and PutTargets,
PutLifecycleHook), at its line of the file."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from forewarn.aws.eventbus import MAX_TARGETS, RULE_NAME, Rule, Target, check_pattern
from forewarn.aws.lifecycle import HOOK_NAME, LAUNCHING, TERMINATING, LifecycleHook
from forewarn.aws.queues import FIFO_NAME, QUEUE_NAME, Queue, QueueSettings, Redrive
from forewarn.core.errors import CoreError, did_you_mean
from forewarn.fleet.file import Strict
from forewarn.fleet.section import BuildContext

TRANSITIONS = {"terminating": TERMINATING, "launching": LAUNCHING, TERMINATING: TERMINATING, LAUNCHING: LAUNCHING}


class RedriveSpec(Strict):
    dead_letter_queue: str  # a queue of the file
    max_receive_count: int = Field(ge=1, le=1000)


class QueueSpec(Strict):
    name: str
    visibility_timeout: int = 30
    message_retention_period: int = 345600
    delay_seconds: int = 0
    receive_message_wait_time_seconds: int = 0
    maximum_message_size: int = 262144
    redrive_policy: RedriveSpec | None = None
    fifo_queue: bool = False  # its name then ends in .fifo
    content_based_deduplication: bool = False


class TargetSpec(Strict):
    id: str = Field(min_length=1, max_length=64)
    queue: str  # a queue of the file


class RuleSpec(Strict):
    name: str
    event_pattern: dict[str, Any]
    state: Literal["ENABLED", "DISABLED"] = "ENABLED"
    description: str = ""
    targets: list[TargetSpec] = Field(default_factory=list)


class HookSpec(Strict):
    auto_scaling_group: str
    name: str
    transition: Literal[
        "terminating", "launching", "autoscaling:EC2_INSTANCE_TERMINATING", "autoscaling:EC2_INSTANCE_LAUNCHING"
    ] = "terminating"
    heartbeat_timeout: int = Field(default=3600, ge=30, le=7200)
    default_result: Literal["CONTINUE", "ABANDON"] = "ABANDON"
    notification_target: str | None = None  # a queue of the file
    role_arn: str | None = None
    notification_metadata: str | None = Field(default=None, max_length=1023)


def queue_path_fields() -> dict[str, tuple[Any, Any]]:
    return {
        "sqs_queues": (list[QueueSpec], Field(default_factory=list)),
        "eventbridge_rules": (list[RuleSpec], Field(default_factory=list)),
        "lifecycle_hooks": (list[HookSpec], Field(default_factory=list)),
    }


@dataclass(frozen=True)
class DeclaredQueue:
    name: str
    settings: QueueSettings


@dataclass(frozen=True)
class DeclaredRule:
    name: str
    pattern_text: str
    state: str
    description: str
    targets: tuple[tuple[str, str], ...]  # (id, queue ARN)


@dataclass(frozen=True)
class QueuePath:
    """What the fleet file declares of the queue path, in the file's order."""

    region: str = "us-east-1"
    account_id: str = "123456789012"
    queues: tuple[DeclaredQueue, ...] = ()
    rules: tuple[DeclaredRule, ...] = ()
    hooks: tuple[LifecycleHook, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.queues or self.rules or self.hooks)

    def queue_arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account_id}:{name}"

    def start_queues(self, created_at: datetime) -> list[Queue]:
        return [Queue(q.name, self.region, self.account_id, q.settings, created_at, created_at) for q in self.queues]

    def start_rules(self, created_at: datetime) -> list[Rule]:
        return [
            Rule(
                name=rule.name,
                pattern=json.loads(rule.pattern_text),
                pattern_text=rule.pattern_text,
                region=self.region,
                account_id=self.account_id,
                created_at=created_at,
                state=rule.state,
                description=rule.description,
                targets=tuple(Target(target_id, arn) for target_id, arn in rule.targets),
            )
            for rule in self.rules
        ]

    def summary(self) -> dict[str, int]:
        return {
            "sqs_queues": len(self.queues),
            "eventbridge_rules": len(self.rules),
            "lifecycle_hooks": len(self.hooks),
        }

    def to_records(self) -> dict[str, Any]:
        return {"ec2_queue_path": asdict(self)} if self else {}

    @classmethod
    def from_records(cls, records: Mapping[str, Any]) -> QueuePath:
        data = records.get("ec2_queue_path")
        if not data:
            return cls()
        return cls(
            region=data["region"],
            account_id=data["account_id"],
            queues=tuple(_queue_of(queue) for queue in data["queues"]),
            rules=tuple(
                DeclaredRule(**{**rule, "targets": tuple(tuple(target) for target in rule["targets"])})
                for rule in data["rules"]
            ),
            hooks=tuple(LifecycleHook(**hook) for hook in data["hooks"]),
        )


def _queue_of(data: Mapping[str, Any]) -> DeclaredQueue:
    settings = dict(data["settings"])
    redrive = settings.pop("redrive")
    return DeclaredQueue(
        data["name"], QueueSettings(**settings, redrive=None if redrive is None else Redrive(**redrive))
    )


def merged(declared: Iterable[Any], stored: Iterable[Any], key: str) -> list[Any]:
    """The declared items with the stored ones over them, by ``key`` (a stored row marked deleted hides a declared
    item: the component leaves deleted ones out)."""
    found = {getattr(item, key): item for item in declared}
    found.update((getattr(item, key), item) for item in stored)
    return list(found.values())


def build_queue_path(spec: Any, context: BuildContext, groups: set[str]) -> QueuePath:
    """The file's queue path, checked; ``groups``: the Auto Scaling groups its instances name."""
    region = spec.defaults.aws_region or "us-east-1"
    account = spec.defaults.aws_account_id or "123456789012"
    queues = _queues(spec.sqs_queues, context, QueuePath(region, account))
    path = QueuePath(region, account, queues)
    return QueuePath(
        region,
        account,
        queues,
        _rules(spec.eventbridge_rules, context, path),
        _hooks(spec.lifecycle_hooks, context, path, groups),
    )


def _queues(specs: list[QueueSpec], context: BuildContext, path: QueuePath) -> tuple[DeclaredQueue, ...]:
    names = [spec.name for spec in specs]
    found: list[DeclaredQueue] = []
    for index, spec in enumerate(specs):
        where = ("sqs_queues", index)
        if not (FIFO_NAME if spec.fifo_queue else QUEUE_NAME).match(spec.name):
            fifo = ", ending in .fifo for a FIFO queue (fifo_queue: true) and only then"
            context.fail(where + ("name",), f"a queue name is 1 to 80 letters, digits, hyphens or underscores{fifo}")
        if spec.name in names[:index]:
            context.fail(where + ("name",), f"duplicate queue {spec.name!r}")
        redrive = None
        if spec.redrive_policy is not None:
            target = spec.redrive_policy.dead_letter_queue
            _known(context, where + ("redrive_policy", "dead_letter_queue"), target, names)
            redrive = Redrive(path.queue_arn(target), spec.redrive_policy.max_receive_count)
            if any(other.name == target and other.fifo_queue != spec.fifo_queue for other in specs):
                kind = "a FIFO queue's is a FIFO queue" if spec.fifo_queue else "a standard queue's is a standard queue"
                context.fail(where + ("redrive_policy", "dead_letter_queue"), f"the dead-letter queue of {kind}")
        settings = QueueSettings(
            spec.visibility_timeout,
            spec.message_retention_period,
            spec.delay_seconds,
            spec.receive_message_wait_time_seconds,
            spec.maximum_message_size,
            redrive,
            spec.fifo_queue,
            spec.content_based_deduplication,
        )
        try:
            settings.check()
        except CoreError as error:
            context.fail(where, str(error))
        found.append(DeclaredQueue(spec.name, settings))
    return tuple(found)


def _known(context: BuildContext, where: tuple, name: str, names: list[str]) -> None:
    if name not in names:
        context.fail(where, f"queue {name!r} is not declared under sqs_queues{did_you_mean(name, names)}")


def _rules(specs: list[RuleSpec], context: BuildContext, path: QueuePath) -> tuple[DeclaredRule, ...]:
    queues = [queue.name for queue in path.queues]
    seen: set[str] = set()
    found: list[DeclaredRule] = []
    for index, spec in enumerate(specs):
        where = ("eventbridge_rules", index)
        if not RULE_NAME.match(spec.name):
            context.fail(where + ("name",), "a rule name is 1 to 64 letters, digits, periods, hyphens or underscores")
        if spec.name in seen:
            context.fail(where + ("name",), f"duplicate rule {spec.name!r}")
        seen.add(spec.name)
        try:
            check_pattern(spec.event_pattern)
        except CoreError as error:
            context.fail(where + ("event_pattern",), str(error))
        if len(spec.targets) > MAX_TARGETS:
            context.fail(where + ("targets",), f"a rule has at most {MAX_TARGETS} targets")
        targets: dict[str, str] = {}
        for number, target in enumerate(spec.targets):
            if target.id in targets:
                context.fail(where + ("targets", number, "id"), f"duplicate target id {target.id!r}")
            _known(context, where + ("targets", number, "queue"), target.queue, queues)
            targets[target.id] = path.queue_arn(target.queue)
        text = json.dumps(spec.event_pattern, separators=(",", ":"))
        found.append(DeclaredRule(spec.name, text, spec.state, spec.description, tuple(targets.items())))
    return tuple(found)


def _hooks(specs: list[HookSpec], context: BuildContext, path: QueuePath, groups: set[str]) -> tuple:
    queues = [queue.name for queue in path.queues]
    found: dict[str, LifecycleHook] = {}
    for index, spec in enumerate(specs):
        where = ("lifecycle_hooks", index)
        if spec.auto_scaling_group not in groups:
            known = did_you_mean(spec.auto_scaling_group, sorted(groups))
            context.fail(
                where + ("auto_scaling_group",),
                f"no instance of ec2_instances is in Auto Scaling group {spec.auto_scaling_group!r}{known}",
            )
        if not HOOK_NAME.match(spec.name):
            context.fail(where + ("name",), "a hook name is 1 to 255 letters, digits, hyphens, underscores or slashes")
        target = None
        if spec.notification_target is not None:
            _known(context, where + ("notification_target",), spec.notification_target, queues)
            target = path.queue_arn(spec.notification_target)
        hook = LifecycleHook(
            group=spec.auto_scaling_group,
            name=spec.name,
            transition=TRANSITIONS[spec.transition],
            heartbeat_timeout=spec.heartbeat_timeout,
            default_result=spec.default_result,
            notification_target_arn=target,
            role_arn=spec.role_arn,
            notification_metadata=spec.notification_metadata,
        )
        if hook.key in found:
            context.fail(where + ("name",), f"duplicate hook {spec.name!r} of group {spec.auto_scaling_group!r}")
        found[hook.key] = hook
    return tuple(found.values())
