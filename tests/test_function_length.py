"""No function of the source tree is longer than 80 lines (its ``def`` line to its last, decorators aside): a longer
one does several jobs, and is split into functions named for each."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "forewarn"
LONGEST = 80


def long_functions(source: str, filename: str) -> Iterator[tuple[str, int, int]]:
    """Each function (nested ones too) longer than ``LONGEST`` lines: its name, first line and length."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > LONGEST:
                yield node.name, node.lineno, length


def test_no_function_in_the_source_is_longer_than_80_lines():
    found = [
        f"{path.relative_to(PACKAGE.parent.parent)}:{line} {name}: {length} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, line, length in long_functions(path.read_text(), str(path))
    ]
    assert not found, "\n".join(found)


def test_the_count_finds_a_long_function_nested_or_not():
    statements = [f"x{i} = {i}" for i in range(LONGEST - 1)]
    at_limit = "def fits():\n" + "".join(f"    {line}\n" for line in statements)  # 80 lines
    over = "def outer():\n    async def inner():\n" + "".join(f"        {line}\n" for line in [*statements, "pass"])
    assert list(long_functions(at_limit, "fits.py")) == []
    assert [(name, length) for name, _, length in long_functions(over, "over.py")] == [
        ("outer", LONGEST + 2),
        ("inner", LONGEST + 1),
    ]
