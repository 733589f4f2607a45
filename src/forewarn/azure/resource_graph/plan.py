"""Rewrites of a translated query that make it cheap over a million rows without changing its answer.

Two costs dominated the documented queries (bench/resource_graph_query.py): parsing the ``properties`` JSON of every
row to filter or sort on one value (about 1 µs a row and a path), and the second pass that counts the result, which
sorted the whole table again only to count it. So:

1. **Shredded values.** The table keeps, beside ``properties``, a few of its values as typed columns (table.py
   ``SHREDDED_COLUMNS``), each computed at write time by DuckDB from the very SQL expression duckdb-kql renders for
   a KQL expression (``tostring(properties.EventStatus)``, ``todatetime(properties.NotBefore)``). In the steps of
   the query that read the table's own rows (``where`` and ``sort`` straight after the table, before anything
   reshapes a row), each occurrence of that expression becomes a reference to its column: the same value by
   construction, read instead of parsed. Those steps read a CTE with the extra columns; every other reader of them
   sees a view with the ARG columns only, so the extra columns never reach a result, a ``pack_all()`` or a join.
2. **Counting without sorting.** When the query has no row limit (take, top, sample), no window function and no
   aggregate anywhere, the number of rows it returns does not depend on the order of any step, so the count drops
   every ORDER BY.

Both work on DuckDB's own parse tree (``json_serialize_sql``), never on the SQL text. Whatever does not fit the
patterns is left as it was: a rewrite that cannot apply costs speed, never correctness.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from dataclasses import dataclass
from typing import Any

import duckdb

from .table import COLUMN_NAMES, SHREDDED_COLUMNS, SHREDDED_NAMES, one_row

#: The CTE the rewritten steps read instead of ``maintenanceresources``: the same rows, with the shredded columns.
SHREDDED_SOURCE = "forewarn_shredded_rows"

#: Names the rewrite introduces; a query mentioning any of them is left alone rather than risk a clash (or have one
#: of its unknown columns resolve to a shredded one).
_MEMBER_PREFIX = "forewarn_shredded_"
_RESERVED = (_MEMBER_PREFIX, *SHREDDED_NAMES)


@dataclass(frozen=True)
class Plan:
    page_sql: str  # the query's rows; reads SHREDDED_SOURCE if rewritten
    count_sql: str  # the same rows in any order, to count them
    shredded: bool  # page_sql and count_sql read SHREDDED_SOURCE (else maintenanceresources only)


_PARSER = duckdb.connect(":memory:", config={"enable_external_access": False})
_LOCK = threading.Lock()


def plan(sql: str, table_name: str) -> Plan:
    """The rewritten forms of ``sql`` (one checked SELECT over ``table_name``), or ``sql`` itself where none apply."""
    folded = sql.lower()
    if any(name in folded for name in _RESERVED):
        return Plan(sql, sql, False)
    tree = _serialize(sql)
    if tree is None:
        return Plan(sql, sql, False)
    root = tree["statements"][0]["node"]
    shredded = _shred(root, table_name.casefold())
    unordered = copy.deepcopy(tree)
    stripped = _order_free(unordered["statements"][0]["node"]) and _strip_orders(unordered)
    page_sql = _deserialize(tree) if shredded else sql
    count_sql = _deserialize(unordered) if stripped or shredded else sql
    if page_sql is None or count_sql is None:
        return Plan(sql, sql, False)
    return Plan(page_sql, count_sql, shredded)


# --- 1. shredded values -----------------------------------------------------------------------------------------


def _shred(root: dict[str, Any], table_name: str) -> bool:
    """Rewrite the steps of the top-level WITH that read the table's rows in place; True if any expression was
    replaced."""
    entries = (root.get("cte_map") or {}).get("map") or []
    members: set[str] = set()  # CTE names (folded) whose rows are the table's own, columns and all
    readers: list[dict[str, Any]] = []  # steps whose names resolve against a member's (or the table's) columns
    for entry in entries:
        node = entry["value"]["query_node"]
        source = _plain_source(node)
        if source is not None and (source == table_name or source in members):
            members.add(entry["key"].casefold())
            readers.append(node)
        elif _direct_reader(node, members | {table_name}):
            readers.append(node)
    if not members:
        return False
    templates = _templates()
    replaced = False
    for node in readers:
        for key in ("where_clause", "having", "select_list", "group_expressions"):
            if node.get(key) is not None:
                node[key], hit = _substitute(node[key], templates)
                replaced |= hit
        for modifier in node.get("modifiers") or ():
            for order in modifier.get("orders") or ():
                order["expression"], hit = _substitute(order["expression"], templates)
                replaced |= hit
    if not replaced:
        return False
    # Readers read members under their new names; anything else reads the old name, now a view of the ARG columns.
    redirected = {id(node["from_table"]) for node in readers}
    outside = _outside_references(root, members, redirected)
    reader_ids = {id(node) for node in readers}
    renamed: list[dict[str, Any]] = []
    for entry in entries:
        node = entry["value"]["query_node"]
        if id(node) in reader_ids:
            source_ref = node["from_table"]
            source = source_ref["table_name"].casefold()
            new_source = SHREDDED_SOURCE if source == table_name else _member_name(source)
            # Under its old name, so a column qualified by it (``_s1.id``) still resolves.
            source_ref["alias"] = source_ref.get("alias") or source_ref["table_name"]
            source_ref["table_name"] = new_source
            source_ref["qualified_name"] = {"path": [new_source]}
        folded = entry["key"].casefold()
        if folded not in members:
            renamed.append(entry)
            continue
        renamed.append({"key": _member_name(folded), "value": entry["value"]})
        if folded in outside:
            renamed.append(_view(entry["key"], _member_name(folded)))
    root["cte_map"]["map"] = renamed
    return True


def _direct_reader(node: dict[str, Any], sources: set[str]) -> bool:
    """A step reading one member by name whose output names every column it keeps (no ``*`` anywhere in it, so no
    shredded column can pass through): its expressions may use the shredded columns too."""
    if node.get("type") != "SELECT_NODE" or (node.get("cte_map") or {}).get("map"):
        return False
    source = node.get("from_table") or {}
    if source.get("type") != "BASE_TABLE" or source.get("schema_name") or source.get("catalog_name"):
        return False
    if str(source.get("table_name", "")).casefold() not in sources or source.get("column_name_alias"):
        return False
    return not _contains(node, lambda item: item.get("class") in ("STAR", "SUBQUERY"))


def _contains(node: Any, predicate: Any) -> bool:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if predicate(item):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _plain_source(node: dict[str, Any]) -> str | None:
    """The table a step reads if it keeps that table's rows whole (``SELECT *`` with at most WHERE, ORDER BY and
    LIMIT); None otherwise."""
    if node.get("type") != "SELECT_NODE" or (node.get("cte_map") or {}).get("map"):
        return None
    if node.get("group_expressions") or node.get("group_sets") or node.get("having") or node.get("qualify"):
        return None
    if node.get("sample") or node.get("aggregate_handling") != "STANDARD_HANDLING":
        return None
    if any(modifier.get("type") not in ("ORDER_MODIFIER", "LIMIT_MODIFIER") for modifier in node.get("modifiers", ())):
        return None
    select = node.get("select_list") or []
    if len(select) != 1 or select[0].get("class") != "STAR":
        return None
    star = select[0]
    if star.get("relation_name") or star.get("columns") or star.get("expr") is not None:
        return None
    if any(star.get(key) for key in ("exclude_list", "replace_list", "qualified_exclude_list", "rename_list")):
        return None
    source = node.get("from_table") or {}
    if source.get("type") != "BASE_TABLE" or source.get("schema_name") or source.get("catalog_name"):
        return None
    if source.get("alias") or source.get("sample") or source.get("column_name_alias") or source.get("at_clause"):
        return None
    return str(source["table_name"]).casefold()


def _member_name(folded: str) -> str:
    return f"{_MEMBER_PREFIX}{folded}"


def _outside_references(root: dict[str, Any], members: set[str], redirected: set[int]) -> set[str]:
    """Members read by name from anywhere but a redirected reader's FROM (the final SELECT, subqueries, joins)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and id(node) not in redirected:
                name = str(node.get("table_name", "")).casefold()
                if name in members:
                    found.add(name)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(root)
    return found


def _view(key: str, member: str) -> dict[str, Any]:
    columns = ", ".join(f'"{name}"' for name in COLUMN_NAMES)
    tree = _serialize(f'WITH "{key}" AS (SELECT {columns} FROM "{member}") SELECT 1')
    if tree is None:
        raise RuntimeError("DuckDB could not parse the rewrite's own view")
    entry: dict[str, Any] = tree["statements"][0]["node"]["cte_map"]["map"][0]
    return entry


def _substitute(node: Any, templates: dict[str, dict[str, Any]]) -> tuple[Any, bool]:
    """``node`` with every subtree equal to a template's expression replaced by that template's column."""
    if isinstance(node, dict):
        if node.get("class") in ("SUBQUERY", "LAMBDA"):
            return node, False  # names inside may refer to another scope
        column = templates.get(_shape(node))
        if column is not None:
            return dict(column, alias=node.get("alias", "")), True
        hit = False
        result = {}
        for key, value in node.items():
            result[key], changed = _substitute(value, templates)
            hit |= changed
        return result, hit
    if isinstance(node, list):
        hit = False
        items = []
        for value in node:
            item, changed = _substitute(value, templates)
            items.append(item)
            hit |= changed
        return items, hit
    return node, False


def _shape(node: Any) -> str:
    """An expression's tree without what does not change its value: where it was written, the name given to it."""
    shape = _without_locations(node)
    if isinstance(shape, dict):
        shape.pop("alias", None)
    return json.dumps(shape, sort_keys=True)


def _without_locations(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _without_locations(value) for key, value in node.items() if not key.startswith("query_location")}
    if isinstance(node, list):
        return [_without_locations(value) for value in node]
    return node


@functools.cache
def _templates() -> dict[str, dict[str, Any]]:
    """The parse tree's shape of each shredded column's expression, mapped to a reference to that column."""
    templates: dict[str, dict[str, Any]] = {}
    for name, _, expression in SHREDDED_COLUMNS:
        tree = _serialize(f'SELECT {expression}, "{name}" FROM t')
        if tree is None:
            raise RuntimeError(f"DuckDB could not parse the expression of {name}")
        defined, reference = tree["statements"][0]["node"]["select_list"]
        templates[_shape(defined)] = reference
    return templates


# --- 2. counting without sorting --------------------------------------------------------------------------------


def _order_free(root: dict[str, Any]) -> bool:
    """True if the number of rows cannot depend on any step's order: no limit, sample, window or aggregate."""
    aggregates = _aggregate_names()
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if kind in ("LIMIT_MODIFIER", "LIMIT_PERCENT_MODIFIER") or node.get("class") == "WINDOW":
                return False
            if node.get("sample") or (node.get("group_expressions") or node.get("group_sets")):
                return False
            if node.get("class") == "FUNCTION" and str(node.get("function_name", "")).lower() in aggregates:
                return False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return True


def _strip_orders(tree: Any) -> bool:
    """Remove every ORDER BY of every query node in place; True if there was one."""
    stripped = False
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            modifiers = node.get("modifiers")
            if isinstance(modifiers, list) and any(m.get("type") == "ORDER_MODIFIER" for m in modifiers):
                node["modifiers"] = [m for m in modifiers if m.get("type") != "ORDER_MODIFIER"]
                stripped = True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return stripped


@functools.cache
def _aggregate_names() -> frozenset[str]:
    with _LOCK:
        rows = _PARSER.execute(
            "SELECT DISTINCT lower(function_name) FROM duckdb_functions() WHERE function_type = 'aggregate'"
        ).fetchall()
    return frozenset(name for (name,) in rows)


# --- DuckDB's parse tree ----------------------------------------------------------------------------------------


def _serialize(sql: str) -> Any:
    try:
        with _LOCK:
            (text,) = one_row(_PARSER.execute("SELECT json_serialize_sql(?)", [sql]))
        tree = json.loads(text)
    except (duckdb.Error, RecursionError, ValueError):
        return None
    if tree.get("error") or len(tree.get("statements") or ()) != 1:
        return None
    return tree


def _deserialize(tree: Any) -> str | None:
    try:
        with _LOCK:
            (sql,) = one_row(_PARSER.execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(tree)]))
    except (duckdb.Error, RecursionError):
        return None
    return str(sql)
