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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, NoReturn

import yaml
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
def parse(text: str, filename: str, max_depth: int = MAX_DEPTH, max_alias_nodes: int = MAX_ALIAS_NODES) -> YamlDocument:
    """Plain Python data from one YAML document (mappings with plain keys, lists, scalars), with lines.

    Timestamps are kept as the ISO 8601 text the APIs take (``2026-04-20T22:11:58Z``, ``2026-04-20``)."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
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
    except RecursionError:  # PyYAML's pure-Python composer, without libyaml and its own depth limit
        raise YamlFileError(filename, 1, f"nested more than {max_depth} levels deep") from None
    document = YamlDocument(None)
    if node is None:
        return document
    builder = _Builder(filename, document, max_depth, max_alias_nodes)
    document.data = builder.value(node, ())
    return document


class _Built:
    """A container already built: what an alias to it repeats."""

    __slots__ = ("value", "size", "height")

    def __init__(self, value: Any, size: int, height: int):
        self.value = value
        self.size = size  # nodes, everything it holds included
        self.height = height  # levels of nesting, itself included


_BUILDING = _Built(None, 0, 0)  # the marker of a container whose own items are being built


class _Builder:
    def __init__(self, filename: str, document: YamlDocument, max_depth: int, max_alias_nodes: int):
        self.filename = filename
        self.lines = document.lines
        self.marks = document.marks
        self.max_depth = max_depth
        self.max_alias_nodes = max_alias_nodes
        self.repeated = 0  # nodes repeated by aliases so far
        self.built: dict[int, _Built] = {}  # id(node) -> the container built from it

    def fail(self, node: yaml.Node, problem: str) -> NoReturn:
        raise YamlFileError(self.filename, node.start_mark.line + 1, problem)

    def fail_alias(self, path: tuple, problem: str) -> NoReturn:
        """An alias's node is its anchor's, with the anchor's line: say the line of the key the alias is under."""
        while path and not isinstance(path[-1], str):
            path = path[:-1]
        raise YamlFileError(self.filename, line_of(path, self.lines), problem)

    def value(self, node: yaml.Node, path: tuple) -> Any:
        return self.build(node, path)[0]

    def build(self, node: yaml.Node, path: tuple) -> tuple[Any, int, int]:
        """(value, size, height) of a node at ``path``."""
        self.lines.setdefault(path, node.start_mark.line + 1)  # a key's line when the caller recorded it
        if len(path) == 1:
            self.marks[path] = (node.start_mark, node.end_mark)
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node), 1, 1
        known = self.built.get(id(node))
        if known is _BUILDING:
            self.fail_alias(path, "an alias is inside the anchor it names (a structure that contains itself)")
        if known is not None:  # an alias: the same value again, at its full size
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
            self.fail(node, f"nested more than {self.max_depth} levels deep")
        self.built[id(node)] = _BUILDING
        value: dict | list
        if isinstance(node, yaml.MappingNode):
            value, size, height = self.mapping(node, path)
        elif isinstance(node, yaml.SequenceNode):
            items: list = []
            value, size, height = items, 1, 1
            for index, item in enumerate(node.value):
                item_value, item_size, item_height = self.build(item, path + (index,))
                items.append(item_value)
                size += item_size
                height = max(height, item_height + 1)
        else:  # no other kind of node exists
            self.fail(node, f"unexpected YAML node {type(node).__name__}")
        self.built[id(node)] = _Built(value, size, height)
        return value, size, height

    def mapping(self, node: yaml.MappingNode, path: tuple) -> tuple[dict, int, int]:
        result: dict = {}
        size, height = 1, 1
        merged: list[tuple[yaml.Node, Any, int, int]] = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self.fail(key_node, "keys must be plain words")
            if key_node.tag == _MERGE:
                merged.append((key_node, *self.build(value_node, path + ("<<",))))
                continue
            key = key_node.value
            if key in result:
                self.fail(key_node, f"duplicate key {key!r}")
            self.lines[path + (key,)] = key_node.start_mark.line + 1
            result[key], item_size, item_height = self.build(value_node, path + (key,))
            size += item_size
            height = max(height, item_height + 1)
        # ``<<: *base`` (or a list of them): the keys the mapping does not set itself, the earlier merge winning.
        for key_node, source, source_size, source_height in merged:
            sources = source if isinstance(source, list) else [source]
            if not all(isinstance(item, dict) for item in sources):
                self.fail(key_node, "a merge key (<<) takes a mapping or a list of mappings")
            for item in sources:
                for key, value in item.items():
                    if key not in result:
                        result[key] = value
                        self.lines.setdefault(path + (key,), key_node.start_mark.line + 1)
            size += source_size
            height = max(height, source_height)
        return result, size, height

    def scalar(self, node: yaml.ScalarNode) -> Any:
        if node.tag == _STR:
            return node.value
        constructor = _SCALAR_CONSTRUCTORS.get(node.tag, _SCALAR_CONSTRUCTORS[None])
        try:
            value = constructor(_SCALARS, node)
        except yaml.MarkedYAMLError as error:  # an unknown tag, !!int on a word, ...
            self.fail(node, f"not valid YAML: {error.problem or error.context or error}")
        except (ValueError, OverflowError) as error:  # a timestamp that is no date: 2026-13-45
            self.fail(node, f"not valid YAML: {node.value!r}: {error}")
        if isinstance(value, datetime):  # the ISO text the APIs take, in UTC
            return format_time(value if value.tzinfo else value.replace(tzinfo=UTC))
        if isinstance(value, date):
            return value.isoformat()
        return value
