"""Azure Resource Graph queries over ``maintenanceresources``: KQL in, the ARG response body out (as a dict).

KQL is translated to DuckDB SQL by duckdb-kql; ARG's own semantics are applied here: the case-insensitive table
name, subscription scoping, ``$top``/``$skip``/``$skipToken`` paging, ``resultTruncated`` as a string, both result
formats and ARG-shaped errors (the REST API reference "Resources - Resources", api-version 2022-10-01;
"Understanding the Azure Resource Graph query language"; "Working with large Azure resource data sets" for when
paging is impossible).

A query reaches nothing but the rows in scope, by four independent guards:

1. control commands (``.show``, ``.create``, ...) and operators ARG does not offer are refused before translation,
   and duckdb-kql translates with writes disabled;
2. the SQL must be one SELECT whose every table reference is ``maintenanceresources`` (any spelling) or one of its
   own CTEs: no qualified names (``database("x").T``, ``information_schema``), no table functions, never the stored
   table's name;
3. ``maintenanceresources`` is a CTE put in front of that SQL, holding the ARG columns of the scoped rows only;
4. the connection cannot read files or URLs, attach databases, load extensions or change settings (table.py).

Runaway queries are interrupted after ``timeout_seconds``. Memory is DuckDB's ``memory_limit`` (table.py): joins,
aggregates, sorts, results and the strings and lists they hold are counted, and a query that needs more is refused
with ``QueryMemoryLimitExceeded``. One value built by a single function call is allocated outside that count, so the
functions whose result a constant of the query can make any size are refused (``_REFUSED_FUNCTIONS``); the others
make values at most a few times the size of their (counted) input. The page sent back is bounded too: at most
``MAX_PAGE`` rows and ``max_bytes`` of JSON, measured by DuckDB before a row becomes a Python object.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import duckdb
import duckdb_kql

from .plan import SHREDDED_SOURCE, plan
from .request import MAX_RESPONSE_BYTES, QueryLimits, QueryRequest, ResourceGraphError, response_too_large
from .table import COLUMN_NAMES, SHREDDED_NAMES, STORED_TABLE, MaintenanceTable, one_row

TABLE_NAME = "maintenanceresources"
MAX_PAGE = 1000  # ARG's default page and the largest $top ("Working with large Azure resource data sets")
RESULT_FORMATS = ("objectArray", "table")

# Error details. Real ARG answers a bad query with 400 BadRequest, a first detail InvalidQuery and a second naming
# the problem (ParserFailure, UnknownFunction: observed in public fixtures). The reference did not verify the codes,
# so the other second codes are our choice: UnknownTable, UnsupportedOperator, UnsupportedFunction, UnsupportedQuery
# (valid KQL duckdb-kql cannot translate), SemanticError (e.g. an unknown column), QueryTimeout; and for request
# options, details InvalidParameter or InvalidSkipToken.
INVALID_QUERY = {
    "code": "InvalidQuery",
    "message": "Query is invalid. Please refer to the documentation for the Azure Resource Graph service "
    "and fix the error before retrying.",
}

#: Operators ARG does not offer (not in the list of "Understanding the Azure Resource Graph query language"), by the
#: parser's name for them. A denylist rather than an allowlist because ARG's documented list is incomplete (queries
#: users write for it use parse and project-rename, unlisted); safety does not rest on it (see the module docstring).
_REFUSED_OPERATORS = {
    "AsOperatorContext": "as",
    "AssertSchemaOperatorContext": "assert-schema",
    "ConsumeOperatorContext": "consume",
    "EvaluateOperatorContext": "evaluate",
    "ExecuteAndCacheOperatorContext": "execute-and-cache",
    "ExternalDataExpressionContext": "externaldata",
    "FacetByOperatorContext": "facet",
    "FindOperatorContext": "find",
    "ForkOperatorContext": "fork",
    "GetSchemaOperatorContext": "getschema",
    "GraphMarkComponentsOperatorContext": "graph-mark-components",
    "GraphMatchOperatorContext": "graph-match",
    "GraphShortestPathsOperatorContext": "graph-shortest-paths",
    "GraphToTableOperatorContext": "graph-to-table",
    "InvokeOperatorContext": "invoke",
    "LookupOperatorContext": "lookup",
    "MacroExpandOperatorContext": "macro-expand",
    "MakeGraphOperatorContext": "make-graph",
    "MakeSeriesOperatorContext": "make-series",
    "MvapplyOperatorContext": "mv-apply",
    "ParseKvOperatorContext": "parse-kv",
    "ParseWhereOperatorContext": "parse-where",
    "PartitionOperatorContext": "partition",
    "RangeExpressionContext": "range",
    "ReduceByOperatorContext": "reduce",
    "RenderOperatorContext": "render",
    "ScanOperatorContext": "scan",
    "SearchOperatorContext": "search",
    "TopHittersOperatorContext": "top-hitters",
    "TopNestedOperatorContext": "top-nested",
}

#: Functions whose output size a constant argument sets, built outside DuckDB's memory_limit: range(1, 2000000000, 1)
#: alone allocated 24 GB and got the process killed, and replace_regex(s, '', 'x...x') writes the replacement at every
#: position (2.1 GB under a 256 MiB limit, from a 1 KB string and a 2,000-character replacement).
_REFUSED_FUNCTIONS = frozenset({"range", "repeat", "strrep", "replace_regex"})

#: take/limit (one parser rule) and sample: ARG ignores $skip and never pages such a query (paging guide).
_ROW_LIMITING_OPERATORS = frozenset({"TakeOperatorContext", "SampleOperatorContext"})


#: What each limit counts: a parser rule per use (a union leg is one expression after ``union``).
_LIMITED_RULES = (
    ("join", "JoinOperatorContext"),
    ("mv-expand", "MvexpandOperatorContext"),
    ("union leg", "UnionOperatorExpressionContext"),
)


Allowed = Callable[[str], bool] | Collection[str] | None


def run_query(
    table: MaintenanceTable,
    request: QueryRequest,
    allowed: Allowed = None,
    timeout_seconds: float | None = 30.0,
    within: Sequence[str] | None = None,
    limits: QueryLimits = QueryLimits(),
    max_bytes: int | None = MAX_RESPONSE_BYTES,
) -> dict[str, Any]:
    """Run one ARG query and return the response body.

    ``allowed`` says which subscriptions the caller may read (a predicate on the lower-cased id, or a collection of
    ids; None: all). Requested subscriptions it excludes are dropped silently, as ARG filters by RBAC rather than
    failing, so a principal learns nothing about rows it may not see. ``timeout_seconds`` interrupts runaway queries
    (a join of the table on itself can be quadratic). ``within`` narrows further, to rows whose (lower-case) id
    starts with one of these scopes (a resource group, a resource): a principal whose role is assigned below the
    subscription sees the rows under its assignments only. ``limits`` caps join, mv-expand and union legs.
    ``max_bytes`` bounds the page's rows as JSON (about the size of ``data``); a larger page is refused with
    ``ResponsePayloadTooLarge`` before its rows leave DuckDB.

    Thread-safe: each call reads through a cursor of its own, in one snapshot of the table (DuckDB MVCC), so it may
    run on a worker thread while upserts commit.
    """
    if not isinstance(request.query, str) or not request.query.strip():
        raise _bad_request("InvalidParameter", "The query must be a non-empty string.")
    subscriptions = request.subscriptions or ()
    if isinstance(subscriptions, str) or not all(isinstance(subscription, str) for subscription in subscriptions):
        raise _bad_request("InvalidParameter", "Subscriptions must be a list of strings.")
    page_size = _whole_number("$top", request.top, MAX_PAGE, 1, MAX_PAGE)
    skip = _whole_number("$skip", request.skip, 0, 0, None)
    result_format = _result_format(request.result_format)
    compiled = _compile(request.query)
    _check_limits(compiled, limits)
    digest = _digest(request.query, request.subscriptions)
    if request.skip_token is not None:
        offset = _token_offset(request.skip_token, digest)  # a token carries its own position; it wins over $skip
    else:
        offset = 0 if compiled.limits_rows else skip  # ARG ignores $skip when the query limits rows itself
    prefixes = None if within is None else [prefix.lower().rstrip("/") + "/" for prefix in within]
    total, columns, rows = _execute(
        table,
        compiled,
        (request.subscriptions, allowed),
        request.now,
        _Page(page_size, offset, max_bytes),
        timeout_seconds,
        prefixes,
    )

    _check_names(columns, len(rows), result_format, max_bytes)
    more = offset + len(rows) < total
    # Paging is impossible when the query limits rows itself or when every column is dynamic/null (paging guide):
    # such a result is cut short with resultTruncated "true" and no token.
    pageable = not compiled.limits_rows and any(kind not in ("JSON", '"NULL"') for _, kind in columns)
    body: dict[str, Any] = {
        "totalRecords": total,
        "count": len(rows),
        "resultTruncated": "true" if more and not pageable else "false",
    }
    if more and pageable:
        body["$skipToken"] = _token(offset + len(rows), digest)
    body["facets"] = []
    body["data"] = _data(columns, rows, result_format)
    return body


# --- request options -------------------------------------------------------------------------------------------


def _whole_number(name: str, value: Any, default: int, low: int, high: int | None) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f"of {low} or more"
        raise _bad_request("InvalidParameter", f"{name} must be an integer {bounds}, not {value!r}.")
    return value


def _result_format(name: str) -> str:
    for known in RESULT_FORMATS:
        if isinstance(name, str) and name.lower() == known.lower():
            return known
    raise _bad_request("InvalidParameter", f"resultFormat must be one of {', '.join(RESULT_FORMATS)}, not {name!r}.")


def _digest(query: str, subscriptions: Sequence[str] | None) -> str:
    """What a $skipToken is bound to: the query text and the requested scope ("Working with large Azure resource
    data sets")."""
    scope = sorted({s.lower() for s in subscriptions or ()})
    return hashlib.sha256(json.dumps([query, scope]).encode()).hexdigest()[:32]


def _token(offset: int, digest: str) -> str:
    return base64.b64encode(json.dumps({"offset": offset, "query": digest}).encode()).decode()


def _token_offset(token: str, digest: str) -> int:
    try:
        fields = json.loads(base64.b64decode(token, validate=True))
        offset, bound_to = fields["offset"], fields["query"]
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise _bad_request("InvalidSkipToken", "The $skipToken is not one this service issued.") from None
    if bound_to != digest or not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise _bad_request("InvalidSkipToken", "The $skipToken belongs to another query or scope.")
    return offset


def _scope(stored: Callable[[], list[str]], requested: Sequence[str] | None, allowed: Allowed) -> list[str]:
    """The lower-cased subscriptions a query reads; ``stored`` lists those with rows (read in the query's snapshot,
    so a tenant-level query and its rows agree)."""
    wanted = {s.lower() for s in requested} if requested else set(stored())
    if allowed is None:
        return sorted(wanted)
    if callable(allowed):
        return sorted(key for key in wanted if allowed(key))
    permitted = {s.lower() for s in allowed}
    return sorted(wanted & permitted)


# --- KQL to checked SQL ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Compiled:
    sql: str
    uses_clock: bool
    limits_rows: bool
    operator_counts: tuple[tuple[str, int], ...] = ()  # (what, how many) for each limited operator used
    count_sql: str = ""  # the same rows as sql, in any order (plan.py); sql itself if empty


#: Any instant: the SQL reads the clock through a $kqlnow parameter bound at execution, so one translation serves
#: every request of the same text (translating costs ~7 ms of ANTLR; paging repeats the query).
_ANY_INSTANT = datetime(2000, 1, 1)
_CLOCK_SLOT = "kqlnow"

_CONTROL_COMMAND = re.compile(r"\A(?:\s|//[^\n]*(?:\n|\Z))*\.")
_TABLE_SPELLINGS = re.compile(TABLE_NAME, re.IGNORECASE)


@functools.lru_cache(maxsize=256)
def _compile(kql: str) -> _Compiled:
    if _CONTROL_COMMAND.match(kql):
        raise _invalid_query("UnsupportedOperator", "Control commands are not supported.")
    try:
        tree = duckdb_kql.parse(kql).tree
    except duckdb_kql.KqlSyntaxError as error:
        raise _parser_failure(error) from None
    except RecursionError:
        raise _invalid_query("ParserFailure", "The query is nested too deeply.") from None
    counted, functions = _syntax(tree)
    operators = set(counted)
    for rule, operator in _REFUSED_OPERATORS.items():
        if rule in operators:
            raise _invalid_query("UnsupportedOperator", f"Operator '{operator}' is not supported.")
    refused = sorted(functions & _REFUSED_FUNCTIONS)
    if refused:
        raise _invalid_query("UnsupportedFunction", f"Function '{refused[0]}' is not supported.")

    # join and union need the table's columns, looked up by the spelling the query uses; ARG table names are
    # case-insensitive (its docs write 'Maintenanceresources'), so every spelling present gets an entry.
    schema = {spelling: list(COLUMN_NAMES) for spelling in set(_TABLE_SPELLINGS.findall(kql))}
    try:
        translated = duckdb_kql.to_sql(kql, schema=schema, allow_write=False, query_now=_ANY_INSTANT)
    except duckdb_kql.KqlSyntaxError as error:
        raise _parser_failure(error) from None
    except duckdb_kql.KqlSchemaError as error:
        if "unknown table" in (error.hint or ""):
            raise _unknown_table(error.name) from None
        raise _invalid_query("SemanticError", str(error)) from None
    except duckdb_kql.KqlUnsupportedError as error:
        if error.construct.startswith("function:"):
            name = error.construct.removeprefix("function:")
            raise _invalid_query("UnknownFunction", f"Unknown function: '{name}'.") from None
        raise _invalid_query("UnsupportedQuery", f"Not supported by this emulator: {error}") from None
    except (duckdb_kql.KqlError, RecursionError) as error:
        raise _invalid_query("SemanticError", str(error)) from None
    if translated.unbound or set(translated.parameters) - {_CLOCK_SLOT}:
        raise _invalid_query("UnsupportedQuery", "Query parameters are not supported.")
    sql = _parse_rfc1123_dynamic(str(translated))
    _check_references(sql)
    counts = tuple((what, counted[rule]) for what, rule in _LIMITED_RULES if counted[rule])
    planned = plan(sql, TABLE_NAME)  # after the checks: they judge what the user wrote, not the rewrite
    return _Compiled(
        planned.page_sql,
        _CLOCK_SLOT in translated.parameters,
        bool(operators & _ROW_LIMITING_OPERATORS),
        counts,
        planned.count_sql,
    )


def _check_limits(compiled: _Compiled, limits: QueryLimits) -> None:
    allowed = {"join": limits.join, "mv-expand": limits.mv_expand, "union leg": limits.union_legs}
    for what, count in compiled.operator_counts:
        if count > allowed[what]:
            # ARG documents the limits but not the error it answers when one is passed; the code is ours.
            raise _invalid_query(
                "OperatorLimitExceeded",
                f"The query uses {count} '{what}' {'operators' if what != 'union leg' else 'legs'}; "
                f"at most {allowed[what]} are allowed in one query.",
            )


def _syntax(tree: Any) -> tuple[Counter[str], set[str]]:
    """How often the query uses each parser rule (operators among them), and the names of the functions it calls."""
    rules: Counter[str] = Counter()
    functions: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        rule = type(node).__name__
        rules[rule] += 1
        if rule == "NamedFunctionCallExpressionContext":
            functions.add(node.getChild(0).getText().lower())
        stack.extend(getattr(node, "children", None) or ())
    return rules, functions


#: duckdb-kql 1.1.2 renders todatetime(x) with a parsing branch try_strptime(CAST(x AS VARCHAR), [formats]). For a
#: dynamic x (todatetime(properties.NotBefore)) the cast keeps the JSON quotes and the RFC 1123 format never
#: matches. Wrapping the cast in forewarn_json_text (table.py) unquotes it. Both anchors are unique to that template;
#: if a future version renders it differently nothing is rewritten and the test of this query fails.
_TODATETIME_HEAD = "try_strptime(CAST("
_TODATETIME_TAIL = re.compile(r" AS VARCHAR\), \['%m-%d-%Y'")


def _parse_rfc1123_dynamic(sql: str) -> str:
    if sql.count(_TODATETIME_HEAD) != len(_TODATETIME_TAIL.findall(sql)):
        return sql
    sql = sql.replace(_TODATETIME_HEAD, "try_strptime(forewarn_json_text(CAST(")
    return _TODATETIME_TAIL.sub(lambda match: " AS VARCHAR)), ['%m-%d-%Y'", sql)


_PARSER = duckdb.connect(":memory:", config={"enable_external_access": False})
_PARSER_LOCK = threading.Lock()


def _check_references(sql: str) -> None:
    """One SELECT, reading only ``maintenanceresources`` and its own CTEs (guard 2 of the module docstring)."""
    tables: list[dict[str, Any]] = []
    ctes: set[str] = set()
    statements: list[Any] = []
    try:
        statements = duckdb.extract_statements(sql)
        with _PARSER_LOCK:
            (serialized,) = one_row(_PARSER.execute("SELECT json_serialize_sql(?)", [sql]))
        tree = json.loads(serialized)
        _collect_references(tree, tables, ctes)
    except (duckdb.Error, RecursionError):
        tree = {"error": True}
    if tree.get("error") or len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise _invalid_query("UnsupportedQuery", "The query must be one tabular expression this emulator can check.")
    for ref in tables:
        name = ref.get("table_name") or "a table function"
        if ref["type"] != "BASE_TABLE" or ref.get("schema_name") or ref.get("catalog_name"):
            raise _unknown_table(".".join(filter(None, (ref.get("catalog_name"), ref.get("schema_name"), name))))
        folded = name.casefold()
        if folded == STORED_TABLE or (folded != TABLE_NAME and folded not in ctes):
            raise _unknown_table(name)


def _collect_references(node: Any, tables: list[dict[str, Any]], ctes: set[str]) -> None:
    if isinstance(node, dict):
        if node.get("type") in ("BASE_TABLE", "TABLE_FUNCTION", "SHOW_REF"):
            tables.append(node)
        for entry in (node.get("cte_map") or {}).get("map", ()):
            ctes.add(entry["key"].casefold())
        for value in node.values():
            _collect_references(value, tables, ctes)
    elif isinstance(node, list):
        for value in node:
            _collect_references(value, tables, ctes)


# --- execution --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Page:
    size: int  # rows
    offset: int
    max_bytes: int | None  # of the rows as JSON; None: any


#: What DuckDB's error() says when a page is over its byte bound (query.py's own text, so no other error matches it).
_PAGE_TOO_LARGE = "forewarn: the page is larger than its byte bound"


#: The page's values as JSON text, in bytes, column by column summed (COLUMNS(*): no name of the query's own can be
#: taken for the row, as an alias could).
_PAGE_VALUE_BYTES = (
    "(SELECT list_sum(list_value(*COLUMNS(*))) FROM "
    "(SELECT sum(strlen(CAST(to_json(COLUMNS(*)) AS VARCHAR))) FROM forewarn_page))"
)


def _page_sql(scoped: str, sql: str, page: _Page) -> str:
    """The page of the query's result. With a byte bound, the page is kept (a materialized CTE) and its values are
    measured as JSON in DuckDB: beyond the bound, the statement fails before any row is handed to Python, where
    1,000 rows of a hundred megabytes each would be copied again (the column names, repeated on every row of an
    objectArray answer, are counted once the rows are in: ``_check_names``)."""
    rows = f"SELECT * FROM ({sql}) AS q LIMIT {page.size} OFFSET {page.offset}"
    if page.max_bytes is None:
        return f"{scoped}{rows}"
    return (
        f"{scoped}, forewarn_page AS MATERIALIZED ({rows}) SELECT * FROM forewarn_page "
        f"WHERE CASE WHEN {_PAGE_VALUE_BYTES} > {page.max_bytes} THEN error('{_PAGE_TOO_LARGE}') ELSE true END"
    )


def _check_names(columns: list[tuple[str, str]], rows: int, result_format: str, max_bytes: int | None) -> None:
    """Refuses a page whose column names alone would pass the bound: an objectArray answer repeats them on every
    row, and a name can be as long as the query (``project ['xx...xx'] = 1`` over 1,000 rows)."""
    if max_bytes is None:
        return
    names = sum(len(json.dumps(name)) + 2 for name, _ in columns)  # "name": and a comma
    if names * (rows if result_format == "objectArray" else 1) > max_bytes:
        raise response_too_large(max_bytes)


def _execute(
    table: MaintenanceTable,
    compiled: _Compiled,
    scope: tuple[Sequence[str] | None, Allowed],
    now: datetime | None,
    page: _Page,
    timeout_seconds: float | None,
    prefixes: list[str] | None = None,
) -> tuple[int, list[tuple[str, str]], list[tuple[Any, ...]]]:
    visible = ", ".join(f'"{name}"' for name in COLUMN_NAMES)
    shredded = ", ".join(f'"{name}"' for name in SHREDDED_NAMES)
    narrowed = "" if prefixes is None else " AND len(list_filter($forewarn_within, lambda p: starts_with(id, p))) > 0"
    in_scope = f"FROM {STORED_TABLE} WHERE list_contains($forewarn_scope, subscription_key){narrowed}"
    # Both CTEs read the same rows; only plan.py's rewritten steps name the second (DuckDB inlines what is unused).
    scoped = (
        f"WITH {TABLE_NAME} AS (SELECT {visible} {in_scope}), "
        f"{SHREDDED_SOURCE} AS (SELECT {visible}, {shredded} {in_scope}) "
    )
    parameters: dict[str, Any] = {}
    if prefixes is not None:
        parameters["forewarn_within"] = prefixes
    if compiled.uses_clock:
        instant = now or datetime.now(UTC)
        parameters[_CLOCK_SLOT] = instant.astimezone(UTC).replace(tzinfo=None) if instant.tzinfo else instant
    cursor = table.cursor()

    def stored() -> list[str]:  # read only when the scope needs it (a tenant-level query)
        return [key for (key,) in cursor.execute(f"SELECT DISTINCT subscription_key FROM {STORED_TABLE}").fetchall()]

    timer = threading.Timer(timeout_seconds, cursor.interrupt) if timeout_seconds else None
    try:
        if timer:
            timer.start()
        cursor.execute("BEGIN TRANSACTION")  # the scope, the page and the count read one snapshot
        parameters["forewarn_scope"] = _scope(stored, *scope)
        cursor.execute(_page_sql(scoped, compiled.sql, page), parameters)
        columns = [(column[0], str(column[1])) for column in cursor.description]
        rows = cursor.fetchall()
        if len(rows) < page.size and (rows or not page.offset):
            total = page.offset + len(rows)  # the page holds the end of the result: no second pass
        else:
            # DuckDB keeps a subquery's ORDER BY under count(*), so this can cost as much as the page itself.
            count_sql = compiled.count_sql or compiled.sql
            (total,) = one_row(cursor.execute(f"{scoped}SELECT count(*) FROM ({count_sql}) AS q", parameters))
    except duckdb.InterruptException:
        raise _invalid_query("QueryTimeout", f"The query ran longer than {timeout_seconds} s.") from None
    except duckdb.OutOfMemoryException:
        raise _out_of_memory(table.memory_limit) from None
    except duckdb.InvalidInputException as error:
        if str(error).splitlines()[0] == f"Invalid Input Error: {_PAGE_TOO_LARGE}" and page.max_bytes is not None:
            raise response_too_large(page.max_bytes) from None
        raise _invalid_query("SemanticError", str(error).splitlines()[0]) from None
    except duckdb.Error as error:
        # Binder and run-time errors (an unknown column, a failed conversion). The first line only: the rest is SQL.
        raise _invalid_query("SemanticError", str(error).splitlines()[0]) from None
    finally:
        if timer:
            timer.cancel()
        cursor.close()
    return total, columns, rows


# --- results ----------------------------------------------------------------------------------------------------


def _data(columns: list[tuple[str, str]], rows: list[tuple[Any, ...]], result_format: str) -> Any:
    converters = [_converter(kind) for _, kind in columns]
    converted = [[convert(value) for convert, value in zip(converters, row)] for row in rows]
    if result_format == "table":
        return {
            "columns": [{"name": name, "type": _arg_type(kind)} for name, kind in columns],
            "rows": converted,
        }
    names = [name for name, _ in columns]
    return [dict(zip(names, row)) for row in converted]


def _arg_type(kind: str) -> str:
    """DuckDB type to ARG's table-format column type (string, integer, number, boolean, object, datetime)."""
    if kind == "BOOLEAN":
        return "boolean"
    if kind in (
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "HUGEINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "UHUGEINT",
    ):
        return "integer"
    if kind in ("FLOAT", "DOUBLE") or kind.startswith("DECIMAL"):
        return "number"
    if kind.startswith("TIMESTAMP") or kind == "DATE":
        return "datetime"
    if kind in ("JSON", '"NULL"') or kind.endswith("]") or kind.startswith(("STRUCT", "MAP")):
        return "object"
    return "string"  # VARCHAR, UUID, and INTERVAL (a Kusto timespan travels as text)


def _converter(kind: str) -> Callable[[Any], Any]:
    if kind == "JSON":
        return lambda value: None if value is None else json.loads(value)  # objects, not JSON text, as ARG answers
    return _plain


def _plain(value: Any) -> Any:
    """A DuckDB value as JSON-ready Python, rendered the way Kusto prints it."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return (
            value
            if math.isfinite(value)
            else ("NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity"))
        )
    if isinstance(value, Decimal):
        return _plain(float(value))
    if isinstance(value, datetime):
        return _datetime_text(value)
    if isinstance(value, date):
        return _datetime_text(datetime.combine(value, time()))
    if isinstance(value, timedelta):
        return _timespan_text(value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return str(value)


def _datetime_text(moment: datetime) -> str:
    """ISO 8601 in UTC with Z, seven fraction digits when there is a fraction (Kusto's datetime rendering)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{moment.microsecond:06d}0Z" if moment.microsecond else f"{text}Z"


def _timespan_text(span: timedelta) -> str:
    """Kusto's timespan text: [-][d.]hh:mm:ss[.fffffff]."""
    sign = "-" if span < timedelta(0) else ""
    micros = abs(span) // timedelta(microseconds=1)
    days, micros = divmod(micros, 86_400_000_000)
    seconds, micros = divmod(micros, 1_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = f"{sign}{f'{days}.' if days else ''}{hours:02d}:{minutes:02d}:{seconds:02d}"
    return f"{text}.{micros:06d}0" if micros else text


# --- errors -----------------------------------------------------------------------------------------------------


def _bad_request(code: str, message: str) -> ResourceGraphError:
    return ResourceGraphError(400, "BadRequest", message, [{"code": code, "message": message}])


def _invalid_query(code: str, message: str, **extra: Any) -> ResourceGraphError:
    return ResourceGraphError(400, "BadRequest", message, [INVALID_QUERY, {"code": code, "message": message, **extra}])


def _parser_failure(error: duckdb_kql.KqlSyntaxError) -> ResourceGraphError:
    where = error.diagnostics[0].span if error.diagnostics else None
    position = {"line": where.line, "characterPositionInLine": where.column} if where else {}
    return _invalid_query("ParserFailure", str(error), **position)


def _out_of_memory(limit: int | None) -> ResourceGraphError:
    # The bound is the whole database's (table.py): every query running at the time shares it with the rows.
    bound = "" if limit is None else f" ({limit / 2**20:g} MiB, shared with the rows and the queries running beside it)"
    return _invalid_query(
        "QueryMemoryLimitExceeded",
        f"The query needed more memory than Resource Graph may use{bound}. Filter or project earlier, join on more "
        "selective keys, or summarize less.",
    )


def _unknown_table(name: str) -> ResourceGraphError:
    # Kusto's wording for an unknown name (KS204); this emulator holds only the one table.
    return _invalid_query(
        "UnknownTable",
        f"The name '{name}' does not refer to any known table, tabular variable or function. "
        f"This emulator serves only '{TABLE_NAME}'.",
    )
