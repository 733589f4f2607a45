"""The YAML files forewarn reads (fleet files, scenario files, ``--event-grid`` and ``--access`` files): one reader,
with bounds, and the line of every value for error messages.

A YAML file is data from whoever wrote it, so reading one is bounded in what it can cost:

- its size (``MAX_FILE_BYTES``; smaller for the hand-written ``--event-grid`` and ``--access`` files);
- what aliases can repeat: an alias (``*name``) stands for the whole node its anchor (``&name``) names, so ten
  anchors of ten aliases each describe ten billion nodes in a few hundred bytes ("billion laughs"). The nodes that
  aliases repeat are counted as the file is read, each alias at the full size of what it repeats, and a file whose
  aliases repeat more than ``MAX_ALIAS_NODES`` in all is refused at once, before anything is expanded; an alias
  inside its own anchor (a structure that contains itself) is refused too. Anchors, aliases and merge keys
  (``<<: *base``) within the bound work as YAML says;
- its nesting depth (``MAX_DEPTH``, aliases included), so nothing that walks the data recursively can run out of
  stack;
- its encoding: UTF-8 (a byte order mark is allowed), and anything else is refused with the line and byte offset of
  the first byte that is not.

Every refusal is one line, ``FILE:LINE: PROBLEM``.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, NoReturn

import yaml
from yaml.composer import ComposerError
from yaml.constructor import SafeConstructor

from forewarn.core.times import format_time

MAX_FILE_BYTES = 128 * 1024 * 1024  # a generated 1,000,000-VM fleet is about 90 MB
MAX_SMALL_FILE_BYTES = 4 * 1024 * 1024  # --event-grid and --access files: lists of topics and principals
MAX_ALIAS_NODES = 1_000_000
MAX_DEPTH = 64  # a fleet or scenario file nests about 8 levels deep

# libyaml's parser when PyYAML has it (10x faster on large fleets); line marks are the same.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Scalars are built by the safe constructors, called directly: the constructor's own construct_object would keep
# every node it ever built in its cache.
_SCALARS = yaml.SafeLoader("")
_SCALAR_CONSTRUCTORS: dict[str | None, Callable[[SafeConstructor, yaml.Node], Any]] = SafeConstructor.yaml_constructors
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"


class YamlFileError(Exception):
    """A YAML file was refused: ``FILE:LINE: PROBLEM`` (``FILE: PROBLEM`` when no line applies)."""

    def __init__(self, filename: str, line: int | None, problem: str):
        super().__init__(f"{filename}:{line}: {problem}" if line is not None else f"{filename}: {problem}")
        self.filename = filename
        self.line = line
        self.problem = problem


@dataclass
class YamlDocument:
    data: Any  # None for an empty file (nothing but comments and blank lines)
    lines: dict[tuple, int] = field(default_factory=dict)  # path of keys and indexes -> line (1-based)
    # Top-level values: (start, end) marks, so a section can be cut out of the text as it is written.
    marks: dict[tuple, tuple[yaml.Mark, yaml.Mark]] = field(default_factory=dict)

    def line_of(self, path: tuple) -> int:
        return line_of(path, self.lines)


def line_of(path: tuple, lines: dict[tuple, int]) -> int:
    """The line of ``path``, or of the nearest enclosing value that has one."""
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)


def where(path: tuple) -> str:
    """``vms[3].host`` for ("vms", 3, "host")."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


# ------------------------------------------------------------------------------------------------------ reading
def read_text(path: str | Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> str:
    """The text of a YAML file: at most ``max_bytes``, UTF-8. ``what`` names the file in messages."""
    name = str(path)
    too_large = YamlFileError(name, None, f"the {what} is larger than {_size(max_bytes)}, the most forewarn reads")
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size > max_bytes:
                raise too_large
            raw = handle.read(max_bytes + 1)  # a pipe or a growing file has no size to check first
    except OSError as error:
        raise YamlFileError(name, None, f"cannot read the {what}: {error.strerror or error}") from None
    if len(raw) > max_bytes:
        raise too_large
    return decode(raw, name)


def decode(raw: bytes, filename: str) -> str:
    body = raw[len(codecs.BOM_UTF8) :] if raw.startswith(codecs.BOM_UTF8) else raw
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        offset = len(raw) - len(body) + error.start
        line = raw.count(b"\n", 0, offset) + 1
        column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
        raise YamlFileError(
            filename,
            line,
            f"not UTF-8: byte 0x{raw[offset]:02x} at byte offset {offset} "
            f"(line {line}, column {column}); save the file as UTF-8",
        ) from None


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count >= 1024 * 1024 else f"{count} bytes"


def load(path: str | Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> YamlDocument:
    return parse(read_text(path, what, max_bytes), str(path))


# ------------------------------------------------------------------------------------------------------ parsing
def parse(
    text: str,
    filename: str,
    max_depth: int = MAX_DEPTH,
    max_alias_nodes: int = MAX_ALIAS_NODES,
    lines: bool = True,
) -> YamlDocument:
    """Plain Python data from one YAML document (mappings with plain keys, lists, scalars), with lines.

    Timestamps are kept as the ISO 8601 text the APIs take (``2026-04-20T22:11:58Z``, ``2026-04-20``). Equal strings
    are one object (a large fleet repeats its subscriptions, groups and hosts hundreds of thousands of times).

    ``lines=False`` records no line but those of the top-level values: a million-VM fleet file has millions of
    values, and their lines are only needed to report a problem (a caller that finds one parses again with lines).
    Problems the parser itself finds then name the line of the top-level value they are in."""
    document = YamlDocument(None)
    loader = _LOADER(text)
    try:
        builder = _Builder(loader, filename, document, max_depth, max_alias_nodes, lines)
        document.data = builder.stream()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or str(error)
        if error.context and problem.startswith("but "):  # "expected a single document..., but found another"
            problem = f"{error.context}, {problem}"
        raise YamlFileError(filename, mark.line + 1 if mark else 1, f"not valid YAML: {problem}") from None
    except yaml.reader.ReaderError as error:  # a character YAML does not allow (NUL, other control characters)
        line = text.count("\n", 0, max(0, error.position)) + 1
        raise YamlFileError(
            filename,
            line,
            f"not valid YAML: character #x{error.character:04x} is not allowed"
            if isinstance(error.character, int)
            else f"not valid YAML: {error.reason}",
        ) from None
    except yaml.YAMLError as error:
        raise YamlFileError(filename, 1, f"not valid YAML: {error}") from None
    finally:
        loader.dispose()
    return document


class _Built:
    """A node already built, that an alias repeats: its value, and for a container its size and height."""

    __slots__ = ("value", "size", "height", "marks", "raw")

    def __init__(self, value: Any, size: int, height: int, marks: tuple[Any, Any], raw: str | None = None):
        self.value = value
        self.size = size  # nodes, everything it holds included
        self.height = height  # levels of nesting, itself included
        self.marks = marks  # where the anchored node starts and ends
        self.raw = raw  # a scalar's text (what a key that is an alias to it reads)


_BUILDING = _Built(None, 0, 0, (None, None))  # a container whose items are being built
# The implicit resolvers of the loader (YAML 1.1: bool, int, float, null, timestamp, merge, value), by first character.
_IMPLICIT: dict[str | None, list[tuple[str, re.Pattern[str]]]] = _LOADER.yaml_implicit_resolvers
_WILDCARD = _IMPLICIT.get(None, [])


class _Builder:
    """Builds the data from the parser's events as they come: no tree of nodes is held (a million-VM fleet file
    would make one of millions of nodes, gigabytes, before the first value is built)."""

    def __init__(
        self,
        loader: Any,
        filename: str,
        document: YamlDocument,
        max_depth: int,
        max_alias_nodes: int,
        lines: bool,
    ):
        self.next_event = loader.get_event
        self.filename = filename
        self.lines = document.lines
        self.all_lines = lines
        self.strings: dict[str, str] = {}
        self.marks = document.marks
        self.max_depth = max_depth
        self.max_alias_nodes = max_alias_nodes
        self.repeated = 0  # nodes repeated by aliases so far
        self.anchors: dict[str, _Built] = {}

    def fail(self, event: Any, problem: str) -> NoReturn:
        raise YamlFileError(self.filename, event.start_mark.line + 1, problem)

    def fail_alias(self, path: tuple, problem: str) -> NoReturn:
        """An alias's node is its anchor's, with the anchor's line: say the line of the key the alias is under."""
        while path and not isinstance(path[-1], str):
            path = path[:-1]
        raise YamlFileError(self.filename, line_of(path, self.lines), problem)

    def stream(self) -> Any:
        """The one document's data (None when the stream has none)."""
        self.next_event()  # StreamStartEvent
        start = self.next_event()
        if isinstance(start, yaml.StreamEndEvent):
            return None
        value = self.build(self.next_event(), ())[0]
        self.next_event()  # DocumentEndEvent
        event = self.next_event()
        if not isinstance(event, yaml.StreamEndEvent):
            raise ComposerError(
                "expected a single document in the stream",
                start.start_mark,
                "but found another document",
                event.start_mark,
            )
        return value

    def build(self, event: Any, path: tuple) -> tuple[Any, int, int]:
        """(value, size, height) of the node that ``event`` starts, at ``path``."""
        if self.all_lines or len(path) < 2:
            self.lines.setdefault(path, event.start_mark.line + 1)  # a key's line when the caller recorded it
        kind = type(event)
        if kind is yaml.ScalarEvent:
            value = self.scalar(event)
            marks = (event.start_mark, event.end_mark)
            if event.anchor is not None:
                self.anchor(event, _Built(value, 1, 1, marks, event.value))
            if len(path) == 1:
                self.marks[path] = marks
            return value, 1, 1
        if kind is yaml.AliasEvent:
            known = self.anchors.get(event.anchor)
            if known is None:
                raise ComposerError(None, None, "found undefined alias", event.start_mark)
            if len(path) == 1:
                self.marks[path] = known.marks
            if known is _BUILDING:
                self.fail_alias(path, "an alias is inside the anchor it names (a structure that contains itself)")
            if known.raw is not None:  # a scalar
                return known.value, 1, 1
            # the same value again, at its full size
            self.repeated += known.size
            if self.repeated > self.max_alias_nodes:
                self.fail_alias(
                    path,
                    f"aliases repeat more than {self.max_alias_nodes:,} nodes in all (each alias "
                    "counts the whole node it names); refused",
                )
            if len(path) + known.height > self.max_depth:
                self.fail_alias(path, f"nested more than {self.max_depth} levels deep (aliases included)")
            return known.value, known.size, known.height
        if len(path) >= self.max_depth:
            self.fail(event, f"nested more than {self.max_depth} levels deep")
        if event.anchor is not None:
            self.anchor(event, _BUILDING)
        if kind is yaml.MappingStartEvent:
            value, size, height, end = self.mapping(path)
        elif kind is yaml.SequenceStartEvent:
            items: list = []
            value, size, height = items, 1, 1
            index = 0
            while True:
                item = self.next_event()
                if type(item) is yaml.SequenceEndEvent:
                    end = item
                    break
                item_value, item_size, item_height = self.build(item, path + (index,))
                items.append(item_value)
                size += item_size
                if item_height >= height:
                    height = item_height + 1
                index += 1
        else:  # no other event starts a node
            self.fail(event, f"unexpected YAML event {kind.__name__}")
        marks = (event.start_mark, end.end_mark)
        if event.anchor is not None:
            self.anchors[event.anchor] = _Built(value, size, height, marks)
        if len(path) == 1:
            self.marks[path] = marks
        return value, size, height

    def anchor(self, event: Any, built: _Built) -> None:
        first = self.anchors.get(event.anchor)
        if first is not None and first is not _BUILDING:
            raise ComposerError(
                "found duplicate anchor; first occurrence", first.marks[0], "second occurrence", event.start_mark
            )
        self.anchors[event.anchor] = built

    def mapping(self, path: tuple) -> tuple[dict, int, int, Any]:
        result: dict = {}
        size, height = 1, 1
        merged: list[tuple[Any, Any, int, int]] = []
        while True:
            key_event = self.next_event()
            kind = type(key_event)
            if kind is yaml.MappingEndEvent:
                end = key_event
                break
            if kind is yaml.ScalarEvent:
                raw = key_event.value
                tag = key_event.tag
                if tag is None or tag == "!":
                    tag = _MERGE if key_event.implicit[0] and raw == "<<" else _STR
            elif kind is yaml.AliasEvent and getattr(self.anchors.get(key_event.anchor), "raw", None) is not None:
                raw, tag = self.anchors[key_event.anchor].raw, _STR  # an alias to a scalar: that scalar's text
            elif kind is yaml.AliasEvent and key_event.anchor not in self.anchors:
                raise ComposerError(None, None, "found undefined alias", key_event.start_mark)
            else:
                self.fail(key_event, "keys must be plain words")
            if tag == _MERGE:
                merged.append((key_event, *self.build(self.next_event(), path + ("<<",))))
                continue
            key = self.strings.setdefault(raw, raw)
            if key in result:
                self.fail(key_event, f"duplicate key {key!r}")
            if self.all_lines or not path:
                self.lines[path + (key,)] = key_event.start_mark.line + 1
            result[key], item_size, item_height = self.build(self.next_event(), path + (key,))
            size += item_size
            if item_height >= height:
                height = item_height + 1
        # ``<<: *base`` (or a list of them): the keys the mapping does not set itself, the earlier merge winning.
        for key_event, source, source_size, source_height in merged:
            sources = source if isinstance(source, list) else [source]
            if not all(isinstance(item, dict) for item in sources):
                self.fail(key_event, "a merge key (<<) takes a mapping or a list of mappings")
            for item in sources:
                for key, value in item.items():
                    if key not in result:
                        result[key] = value
                        if self.all_lines or not path:
                            self.lines.setdefault(path + (key,), key_event.start_mark.line + 1)
            size += source_size
            height = max(height, source_height)
        return result, size, height, end

    def scalar(self, event: Any) -> Any:
        value = event.value
        tag = event.tag
        if tag is None or tag == "!":
            tag = _STR
            if event.implicit[0]:  # a plain scalar: YAML 1.1's implicit types (the loader's resolver, no path rules)
                for implicit_tag, pattern in _IMPLICIT.get(value[:1], _NONE) + _WILDCARD:
                    if pattern.match(value):
                        tag = implicit_tag
                        break
        if tag == _STR:
            return self.strings.setdefault(value, value)
        node = yaml.ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
        constructor = _SCALAR_CONSTRUCTORS.get(tag, _SCALAR_CONSTRUCTORS[None])
        try:
            built = constructor(_SCALARS, node)
        except yaml.MarkedYAMLError as error:  # an unknown tag, !!int on a word, ...
            self.fail(event, f"not valid YAML: {error.problem or error.context or error}")
        except (ValueError, OverflowError) as error:  # a timestamp that is no date: 2026-13-45
            self.fail(event, f"not valid YAML: {value!r}: {error}")
        if isinstance(built, datetime):  # the ISO text the APIs take, in UTC
            return format_time(built if built.tzinfo else built.replace(tzinfo=UTC))
        if isinstance(built, date):
            return built.isoformat()
        return built


_NONE: list[tuple[str, re.Pattern[str]]] = []
