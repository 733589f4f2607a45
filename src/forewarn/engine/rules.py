"""The rules a server runs with: each registered cloud's own (its ``ComponentSource.default_rules()``: Azure's notices
and impact windows, EC2's, Compute Engine's), reached by type: ``rules.of(AzureRules)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from forewarn.registry import clouds

R = TypeVar("R")


def _defaults() -> tuple[Any, ...]:
    return tuple(cloud.default_rules() for cloud in clouds())


@dataclass(frozen=True)
class Rules:
    """One part per registered cloud, in the registry's order; each part has its own type."""

    parts: tuple[Any, ...] = field(default_factory=_defaults)

    def of(self, kind: type[R]) -> R:
        for part in self.parts:
            if isinstance(part, kind):
                return part
        raise LookupError(f"these rules have no {kind.__name__}: its cloud is not registered")

    def with_part(self, part: Any) -> Rules:
        """These rules with ``part`` in place of the part of its type."""
        self.of(type(part))
        return Rules(tuple(part if type(held) is type(part) else held for held in self.parts))


def check_rules(rules: Rules) -> Rules:
    """Every rule within the bounds every event is held to (a refused rule raises ``Invalid``)."""
    for part in rules.parts:
        cast(Any, part).check()
    return rules
