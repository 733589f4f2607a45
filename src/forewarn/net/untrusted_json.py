"""JSON from outside the process: request bodies, other servers' answers, files a user hands us.

``json.loads`` recurses once per nesting level, so 2,000 nested brackets exhaust the interpreter's recursion limit
and raise RecursionError, which callers catching ValueError let through as a 500 (or a traceback). ``parse_json``
checks size and nesting depth before the parser runs, refuses what JSON cannot carry faithfully (NaN, Infinity,
numbers that overflow to infinity, lone UTF-16 surrogates, text that is not UTF-8), and raises one error type,
``JsonInputError`` (a ValueError), which each surface maps to its own error shape.

The bounds are ours: Azure does not document a nesting limit for IMDS, ARM or Resource Graph bodies. 64 levels is
far beyond any body these APIs define (an ARM VM PATCH nests about six deep) and well inside the recursion limit;
docs/architecture.md lists the bounds.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Iterable
from itertools import accumulate
from typing import Any

#: Deepest nesting of arrays and objects accepted.
MAX_DEPTH = 64
#: Largest request body parsed (IMDS, ARM, Resource Graph, the control API).
MAX_BODY_BYTES = 1024 * 1024
#: Largest document read from a file or from another server's answer (recordings, the CLI's answers).
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_STEP = tuple(1 if byte in b"[{" else -1 if byte in b"]}" else 0 for byte in range(256))
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JsonInputError(ValueError):
    """JSON refused: too large, nested too deeply, not JSON, or carrying a value JSON cannot represent.

    ``message`` is the problem; ``line`` and ``column`` (1-based) say where a syntax error is, when there is one, and
    ``str()`` gives both."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message if line is None else f"{message} at line {line} column {column}")
        self.message = message
        self.line = line
        self.column = column


# Looked up now, with this module: the first body parsed would import the codec's module on the event loop.
codecs.lookup("utf-8-sig")


def parse_json(data: bytes | str, *, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BODY_BYTES) -> Any:
    """The value of a JSON text (UTF-8 bytes, or text), or JsonInputError."""
    if isinstance(data, bytes):
        raw = data
    else:
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError as error:
            raise JsonInputError(f"the JSON holds a lone UTF-16 surrogate at character {error.start}") from None
    if len(raw) > max_bytes:
        raise JsonInputError(f"the JSON is larger than {max_bytes} bytes")
    if _deeper_than(raw, max_depth):
        raise JsonInputError(f"the JSON nests deeper than {max_depth} levels")
    if isinstance(data, bytes):
        try:
            # Strict UTF-8 (RFC 8259 8.1): json.loads on bytes would also take UTF-16/32 and decode encoded
            # surrogates with surrogatepass.
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise JsonInputError(f"the JSON is not UTF-8 text (byte {error.start})") from None
    else:
        text = data
    if text.startswith("\ufeff"):  # as json.loads refuses it (JSONDecoder.decode, below, does not check)
        raise JsonInputError("Unexpected UTF-8 BOM (decode using utf-8-sig)", 1, 1)
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as error:
        raise JsonInputError(error.msg, error.lineno, error.colno) from None
    except RecursionError:  # unreachable within the depth bound; kept so no caller ever sees one
        raise JsonInputError(f"the JSON nests deeper than {max_depth} levels") from None
    except ValueError as error:  # an integer of more digits than int() converts, a refused constant
        raise JsonInputError(str(error)) from None
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
        raise JsonInputError("the JSON holds a lone UTF-16 surrogate (\\uD800-\\uDFFF), which is not text")
    return value


def _deeper_than(raw: bytes, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep, found without parsing (brackets inside strings are
    text). Ordinary bodies cost two counts: nesting cannot exceed the number of opening brackets."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


# One decoder for every call: json.loads with these hooks builds a new decoder (and its scanner) each time, which
# was a quarter of parsing a metadata POST's small body.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def _has_lone_surrogate(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        strings: Iterable[str]
        if isinstance(item, str):
            strings = (item,)
        elif isinstance(item, dict):
            strings = item.keys()
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
            continue
        else:
            continue
        for text in strings:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return True
    return False
