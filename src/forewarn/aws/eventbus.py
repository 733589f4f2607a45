"""Amazon EventBridge rules on the default event bus: each rule an event pattern and its targets (SQS queues, by
ARN), and the pattern language's matching ("Amazon EventBridge event patterns", "Content filtering in Amazon
EventBridge event patterns" in the EventBridge User Guide): exact values (strings, numbers, booleans, null), ``prefix``,
``suffix``, ``equals-ignore-case``, ``anything-but`` (a value, a list, or a prefix), ``numeric`` comparisons and
``exists``; a field's list of matchers matches when any matches (any element, for an array in the event), and every
field of the pattern must match.

Pure: a pattern is given parsed (the wire, aws/eventbridge/, reads its JSON text), an event is a mapping."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from forewarn.core.changes import Change
from forewarn.core.errors import Invalid, NotFound

RULE_NAME = re.compile(r"^[.\-_A-Za-z0-9]{1,64}$")
MAX_TARGETS = 5  # "You can add up to five targets to a rule" (PutTargets)
OPERATORS = ("prefix", "suffix", "equals-ignore-case", "anything-but", "numeric", "exists")
COMPARISONS = ("<", "<=", "=", ">", ">=")


class PatternInvalid(Invalid):
    """InvalidEventPatternException on the wire."""


class RuleMissing(NotFound):
    """ResourceNotFoundException."""


@dataclass(frozen=True)
class Target:
    target_id: str
    arn: str


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: Mapping[str, Any]
    pattern_text: str  # as the client gave it (DescribeRule and ListRules show it back)
    region: str
    account_id: str
    created_at: datetime
    state: str = "ENABLED"
    description: str = ""
    targets: tuple[Target, ...] = ()
    deleted: bool = False

    @property
    def arn(self) -> str:
        return f"arn:aws:events:{self.region}:{self.account_id}:rule/{self.name}"


@dataclass(frozen=True)
class RuleChanged(Change):
    """``what``: put, targets, deleted (then ``rule.deleted``)."""

    rule: Rule
    what: str

    def describe(self) -> str:
        return f"rule {self.rule.name} {self.what}"


class EventBus:
    """The default event bus's rules. Each command returns its changes."""

    def __init__(self, rules: Iterable[Rule] = ()):
        self.rules: dict[str, Rule] = {rule.name: rule for rule in rules if not rule.deleted}

    def rule(self, name: str) -> Rule:
        found = self.rules.get(name)
        if found is None:
            raise RuleMissing(f"Rule {name} does not exist on EventBus default.", name=name, known=self.rules.keys())
        return found

    def put_rule(self, rule: Rule) -> list[Change]:
        """A new rule, or a rule of that name replaced (its targets kept), as PutRule does."""
        if not RULE_NAME.match(rule.name):
            raise Invalid(f"1 validation error detected: Value '{rule.name}' at 'name' failed to satisfy constraint")
        if rule.state not in ("ENABLED", "DISABLED"):
            raise Invalid(f"Value '{rule.state}' at 'state' must be ENABLED or DISABLED")
        check_pattern(rule.pattern)
        known = self.rules.get(rule.name)
        if known is not None:
            rule = replace(rule, targets=known.targets, created_at=known.created_at)
        self.rules[rule.name] = rule
        return [RuleChanged(rule, "put")]

    def put_targets(self, name: str, targets: Iterable[Target]) -> list[Change]:
        rule = self.rule(name)
        by_id = {target.target_id: target for target in rule.targets}
        by_id.update((target.target_id, target) for target in targets)
        if len(by_id) > MAX_TARGETS:
            raise TargetsExceeded(f"The requested resource exceeds the maximum number allowed ({MAX_TARGETS}).")
        rule = replace(rule, targets=tuple(by_id.values()))
        self.rules[name] = rule
        return [RuleChanged(rule, "targets")]

    def remove_targets(self, name: str, ids: Iterable[str]) -> list[Change]:
        rule = self.rule(name)
        gone = set(ids)
        rule = replace(rule, targets=tuple(t for t in rule.targets if t.target_id not in gone))
        self.rules[name] = rule
        return [RuleChanged(rule, "targets")]

    def delete_rule(self, name: str) -> list[Change]:
        """DeleteRule: a rule that still has targets is refused ("Rule can't be deleted since it has targets");
        deleting a rule that does not exist succeeds and changes nothing."""
        rule = self.rules.get(name)
        if rule is None:
            return []
        if rule.targets:
            raise Invalid("Rule can't be deleted since it has targets.")
        del self.rules[name]
        return [RuleChanged(replace(rule, deleted=True), "deleted")]

    def targets_of(self, event: Mapping[str, Any]) -> list[tuple[Rule, Target]]:
        """Each enabled rule's targets, for the rules whose pattern ``event`` matches."""
        return [
            (rule, target)
            for rule in self.rules.values()
            if rule.state == "ENABLED" and matches(rule.pattern, event)
            for target in rule.targets
        ]

    def replicate(self, rules: Mapping[str, Rule | None]) -> None:
        for name, rule in rules.items():
            if rule is None or rule.deleted:
                self.rules.pop(name, None)
            else:
                self.rules[name] = rule


class TargetsExceeded(Invalid):
    """LimitExceededException."""


# ------------------------------------------------------------------------------------------------- patterns
def check_pattern(pattern: Any, where: str = "") -> None:
    """Refuse what the pattern language does not allow: a pattern is an object whose leaves are non-empty arrays of
    values or operator objects."""
    if not isinstance(pattern, Mapping) or not pattern:
        raise PatternInvalid(f"Event pattern{' at ' + where if where else ''} must be a non-empty JSON object.")
    for key, value in pattern.items():
        path = f"{where}.{key}" if where else str(key)
        if isinstance(value, Mapping):
            check_pattern(value, path)
        elif isinstance(value, list) and value:
            for matcher in value:
                _check_matcher(matcher, path)
        else:
            raise PatternInvalid(f"Match value at {path} must be an object or a non-empty array.")


def _check_matcher(matcher: Any, path: str) -> None:
    if matcher is None or isinstance(matcher, str | int | float | bool):
        return
    if not isinstance(matcher, Mapping) or len(matcher) != 1:
        raise PatternInvalid(f"Match value at {path} must be a string, number, boolean, null or one operator object.")
    [(operator, operand)] = matcher.items()
    if operator not in OPERATORS:
        raise PatternInvalid(f"Unrecognized match type {operator} at {path}.")
    if operator in ("prefix", "suffix", "equals-ignore-case") and not isinstance(operand, str):
        raise PatternInvalid(f"{operator} match pattern must be a string at {path}.")
    if operator == "exists" and not isinstance(operand, bool):
        raise PatternInvalid(f"exists match pattern must be either true or false at {path}.")
    if operator == "numeric":
        _check_numeric(operand, path)
    if operator == "anything-but":
        inner = operand if isinstance(operand, list) else [operand]
        for value in inner:
            ok = (
                value is None
                or isinstance(value, str | int | float)
                or (isinstance(value, Mapping) and set(value) <= {"prefix", "suffix"})
            )
            if not ok:
                raise PatternInvalid(
                    f"Value of anything-but must be a value, an array of values or a prefix at {path}."
                )


def _check_numeric(operand: Any, path: str) -> None:
    if not isinstance(operand, list) or len(operand) not in (2, 4):
        raise PatternInvalid(f"Value of numeric must be an array of one or two comparisons at {path}.")
    for index in range(0, len(operand), 2):
        comparison, bound = operand[index], operand[index + 1]
        if comparison not in COMPARISONS or isinstance(bound, bool) or not isinstance(bound, int | float):
            raise PatternInvalid(f"Bad numeric range operator at {path}: {comparison!r} {bound!r}.")


def matches(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    for key, wanted in pattern.items():
        present = key in event
        value = event.get(key)
        if isinstance(wanted, Mapping):
            if not isinstance(value, Mapping):
                value = {}
                if not _absent_allowed(wanted):
                    return False
            if not matches(wanted, value):
                return False
            continue
        values = value if isinstance(value, list) else [value]
        if not any(_leaf(matcher, present, values) for matcher in wanted):
            return False
    return True


def _absent_allowed(pattern: Mapping[str, Any]) -> bool:
    """Whether a pattern for an object the event lacks can still match (every leaf asks that a field not exist)."""
    for wanted in pattern.values():
        if isinstance(wanted, Mapping):
            if not _absent_allowed(wanted):
                return False
        elif not any(isinstance(m, Mapping) and m.get("exists") is False for m in wanted):
            return False
    return True


def _leaf(matcher: Any, present: bool, values: list[Any]) -> bool:
    if isinstance(matcher, Mapping):
        [(operator, operand)] = matcher.items()
        if operator == "exists":
            return present == operand
        if not present:
            return False
        return any(_operator(operator, operand, value) for value in values)
    if not present:
        return False
    return any(_equal(matcher, value) for value in values)


def _equal(wanted: Any, value: Any) -> bool:
    if isinstance(wanted, bool) or isinstance(value, bool):
        return wanted is value
    if isinstance(wanted, int | float) and isinstance(value, int | float):
        return float(wanted) == float(value)
    return type(wanted) is type(value) and wanted == value


def _operator(operator: str, operand: Any, value: Any) -> bool:
    if operator == "prefix":
        return isinstance(value, str) and value.startswith(operand)
    if operator == "suffix":
        return isinstance(value, str) and value.endswith(operand)
    if operator == "equals-ignore-case":
        return isinstance(value, str) and value.lower() == operand.lower()
    if operator == "numeric":
        return _numeric(operand, value)
    return _anything_but(operand, value)


def _numeric(operand: list[Any], value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    checks = {
        "<": lambda bound: value < bound,
        "<=": lambda bound: value <= bound,
        "=": lambda bound: value == bound,
        ">": lambda bound: value > bound,
        ">=": lambda bound: value >= bound,
    }
    return all(checks[operand[index]](operand[index + 1]) for index in range(0, len(operand), 2))


def _anything_but(operand: Any, value: Any) -> bool:
    if isinstance(operand, Mapping):
        if "prefix" in operand:
            return not (isinstance(value, str) and value.startswith(operand["prefix"]))
        return not (isinstance(value, str) and value.endswith(operand["suffix"]))
    excluded = operand if isinstance(operand, list) else [operand]
    return not any(_equal(item, value) for item in excluded)
