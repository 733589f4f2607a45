"""``Filter.N.Name`` / ``Filter.N.Value.M``: EC2's filters, with their wildcards, over any resource an action
describes (each action says which filter names it takes and what strings of a resource each compares with)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from forewarn.aws.ec2_api.params import N, Params, parse_time
from forewarn.aws.ec2_api.protocol import Ec2Error, missing, timestamp

FILTER_NAME = re.compile(rf"^Filter\.{N}\.Name$")
FILTER_VALUE = re.compile(rf"^Filter\.{N}\.Value\.{N}$")

Resource = TypeVar("Resource")


class Wildcard:
    """A ``?`` (one character) or ``*`` (any characters) of a filter value."""


ONE, ANY = Wildcard(), Wildcard()
Pattern = list[str | Wildcard]


class Filter(Generic[Resource]):
    """One ``Filter.N``: its values are OR-ed. A value may use ``*`` (any characters) and ``?`` (one character);
    a backslash makes the next character literal. A timestamp filter's value without wildcards is compared as an
    instant, so ``2026-05-04T22:12:00Z`` matches ``2026-05-04T22:12:00.000Z``. ``strings`` gives the strings of a
    resource the filter compares with."""

    def __init__(
        self,
        name: str,
        values: list[str],
        strings: Callable[[Resource], Iterable[str]],
        timestamps: bool = False,
    ):
        self.name = name
        self.values = values
        self.strings = strings
        self.literals: set[str] = set()
        self.patterns: list[Pattern] = []
        for value in values:
            pattern, wild = compile_value(value)
            if wild:
                self.patterns.append(pattern)
                continue
            literal = "".join(part for part in pattern if isinstance(part, str))
            if timestamps:
                moment = parse_time(literal)
                if moment is not None:
                    literal = timestamp(moment)
            self.literals.add(literal)

    def matches(self, resource: Resource) -> bool:
        return any(self.matches_text(text) for text in self.strings(resource))

    def matches_text(self, text: str) -> bool:
        return text in self.literals or any(wildcard_match(p, text) for p in self.patterns)

    @property
    def wild(self) -> bool:
        return bool(self.patterns)


def compile_value(value: str) -> tuple[Pattern, bool]:
    """The value as a list of characters, ``ONE`` and ``ANY``; and whether it has a wildcard."""
    pattern: Pattern = []
    escaped = wild = False
    for char in value:
        if escaped:
            pattern.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "*":
            if not pattern or pattern[-1] is not ANY:
                pattern.append(ANY)
            wild = True
        elif char == "?":
            pattern.append(ONE)
            wild = True
        else:
            pattern.append(char)
    if escaped:  # a trailing backslash is itself
        pattern.append("\\")
    return pattern, wild


def wildcard_match(pattern: Pattern, text: str) -> bool:
    """Glob matching without backtracking blow-up: O(len(pattern) * len(text)) at worst, whatever the stars."""
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and (pattern[p] is ONE or pattern[p] == text[t]):
            p += 1
            t += 1
        elif p < len(pattern) and pattern[p] is ANY:
            star, mark = p, t
            p += 1
        elif star >= 0:
            p = star + 1
            mark += 1
            t = mark
        else:
            return False
    while p < len(pattern) and pattern[p] is ANY:
        p += 1
    return p == len(pattern)


def read_filters(params: Params, make: Callable[[str, list[str]], Filter[Resource] | None]) -> list[Filter[Resource]]:
    """The request's filters; ``make`` builds one from its name and values (None: not a filter of the action)."""
    names = dict(params.numbered(FILTER_NAME))
    values: dict[int, list[str]] = {}
    for number, _, value in params.doubly_numbered(FILTER_VALUE):
        values.setdefault(number, []).append(value)
    for number in values:
        if number not in names:
            raise missing(f"Filter.{number}.Name")
    filters = []
    for number in sorted(names):
        name = names[number]
        made = make(name, values.get(number, []))
        if made is None:
            raise Ec2Error("InvalidParameterValue", f"The filter '{name}' is invalid")
        filters.append(made)
    return filters


def digest_of(filters: list[Filter[Resource]]) -> list[tuple[str, list[str]]]:
    """The filters as a paging token's query digest sees them: order-free."""
    return sorted((f.name, sorted(f.values)) for f in filters)
