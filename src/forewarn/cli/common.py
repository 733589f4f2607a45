"""What every ``forewarn`` command group shares: the client of the server, errors, output, tables, options.

Kept light on purpose: every command imports it, and a client command must start in well under 0.15 s of process
time (bench/startup.py), so nothing here imports the server, the engine, FastAPI or httpx.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import SplitResult, urlsplit

import click

from forewarn.core.errors import CoreError

if TYPE_CHECKING:
    from forewarn.net.control_client import BadJson, ControlClient, Refused, Response, Unreachable


class PointingGroup(click.Group):
    """A command group that, asked for a command it does not have but another place does (``forewarn ec2 schedule``:
    EC2 events are scheduled by ``forewarn schedule``), says where it is, instead of click's nearest name."""

    def __init__(self, *args: Any, elsewhere: Mapping[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.elsewhere = dict(elsewhere or {})

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else None
        if name in self.elsewhere and self.get_command(ctx, name) is None:
            ctx.fail(f"No such command {name!r}: {self.elsewhere[name]}")
        return super().resolve_command(ctx, args)


DEFAULT_SERVER = "http://127.0.0.1:8170"
# show_default: every option's default is in its --help line, whether or not the option says so itself.
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 110, "show_default": True}
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
SERVER_POINTER = "--server URL or FOREWARN_SERVER"

T = TypeVar("T")


class ClientError(Exception):
    """The server refused a request, or could not be reached; the message is for the user as it is."""


class CliClient:
    """The control-API client, with its failures worded for the command line (:class:`ClientError`)."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str] | None = None,
        pointed_by: str = SERVER_POINTER,
        control_api: bool = True,
    ):
        """``control_api``: whether ``base_url`` should be the control API (a refusal then asks the port what it
        is, to tell a user who pointed ``--server`` at another port); False for a client of another port (ARM)."""
        # http.client (and ssl with it) only for commands that call a server: `forewarn --help` does without.
        from forewarn.net.control_client import ControlClient

        self.http: ControlClient = ControlClient(base_url, headers=headers)
        self.base_url = self.http.base_url
        self.pointed_by = pointed_by
        self.control_api = control_api

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, json: Any = None) -> Any:
        from forewarn.net.control_client import BadJson, Refused, Unreachable

        try:
            return self.http.request(method, path, params=params, json_body=json)
        except (Unreachable, Refused, BadJson) as error:
            raise ClientError(self.describe(error)) from None

    def send(self, method: str, path: str, params: dict[str, Any] | None = None) -> Response:
        """The response as it came (for its exact bytes); errors raise :class:`ClientError` as in ``request``."""
        from forewarn.net.control_client import Refused, Unreachable

        try:
            return self.http.checked(self.http.send(method, path, params=params))
        except (Unreachable, Refused) as error:
            raise ClientError(self.describe(error)) from None

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.request("POST", path, json=body or {})

    def describe(self, error: Unreachable | Refused | BadJson) -> str:
        from forewarn.cli.ports import not_the_control_api
        from forewarn.net.control_client import BadJson, Unreachable

        if isinstance(error, Unreachable):
            return (
                f"cannot reach forewarn at {self.base_url} ({error.kind}). Is `forewarn serve` running? "
                f"Point the CLI at it with {self.pointed_by}."
            )
        if isinstance(error, BadJson):
            said = f"{self.base_url} answered HTTP {error.status} with JSON this client cannot use: {error}"
        elif error.code is None:
            said = f"HTTP {error.status}: {error.response.text[:500]}"
        else:
            said = str(error)
        if not self.control_api:
            return said
        port, hint = not_the_control_api(self.base_url)
        if port is not None and hint is not None:  # another forewarn port: its answer says nothing of use
            return hint
        return said if hint is None else f"{said} ({hint})"


def server_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--server`` as a URL: ``http://`` is assumed when no scheme is given (``127.0.0.1:8170``)."""
    text = value.strip().rstrip("/")
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or not _port_valid(parts):
        raise click.BadParameter(
            f"{value!r} is not the URL of a forewarn control API: give http://HOST:PORT (e.g. {DEFAULT_SERVER})"
        )
    return text


def _port_valid(parts: SplitResult) -> bool:
    try:
        return parts.port is None or parts.port > 0  # reading it raises for a port that is not a number in range
    except ValueError:
        return False


def control_client(ctx: click.Context) -> CliClient:
    """The client of the server the root options (--server, --control-token) point at."""
    root = ctx.find_root().params
    token = root.get("control_token")
    return CliClient(root["server"], headers={"Authorization": f"Bearer {token}"} if token else None)


def fail(message: str) -> NoReturn:
    click.echo(f"forewarn: {message}", err=True)
    sys.exit(1)


def run(action: Callable[[], T]) -> T:
    """``action()``, with a refusal or a wrong input printed as one ``forewarn: ...`` line and exit status 1."""
    try:
        return action()
    except (ClientError, CoreError) as error:
        fail(str(error))


def emit(data: Any, as_json: bool, render: Callable[[Any], object]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        render(data)


def print_answer(ctx: click.Context, path: str, as_json: bool, render: Callable[[Any], object], **query: Any) -> None:
    """GET ``path`` of the control API (``query``: its parameters) and print the answer (as JSON with --json)."""
    emit(run(lambda: control_client(ctx).get(path, params=query or None)), as_json, render)


def print_outcome_of(
    ctx: click.Context,
    path: str,
    as_json: bool,
    render: Callable[[Any], object],
    body: dict[str, Any] | None = None,
    one: bool = False,
) -> None:
    """POST ``body`` to ``path`` of the control API and print the outcome (``one``: a single record, printed as a list
    of one, as the listing prints it)."""
    outcome = run(lambda: control_client(ctx).post(path, body))
    emit([outcome] if one else outcome, as_json, render)


def listing_command(
    group: click.Group,
    name: str,
    path: str,
    render: Callable[[Any], object],
    help_text: str,
    all_help: str | None = None,
) -> None:
    """Add to ``group`` the command ``name`` that prints what GET ``path`` answers; with ``all_help``, its flag --all
    asks for every record, the ended ones too."""

    @click.pass_context
    def listing(ctx: click.Context, as_json: bool, include_all: bool = False) -> None:
        if all_help is None:
            print_answer(ctx, path, as_json, render)
        else:
            print_answer(ctx, path, as_json, render, all=str(include_all).lower())

    command = JSON_OPTION(listing)
    if all_help is not None:
        command = click.option("--all", "include_all", is_flag=True, help=all_help)(command)
    group.command(name=name, context_settings=CONTEXT, help=help_text)(command)


def action_command(
    group: click.Group, name: str, path: str, render: Callable[[Any], object], help_text: str, one: bool = False
) -> None:
    """Add to ``group`` the command ``name`` with one argument, the one ``path`` names in braces: it POSTs to ``path``
    with the argument put in and prints the outcome (``one``: a single record, printed as a list of one)."""
    argument = path[path.index("{") + 1 : path.index("}")]

    @click.pass_context
    def action(ctx: click.Context, as_json: bool, **given: str) -> None:
        print_outcome_of(ctx, path.format(**given), as_json, render, one=one)

    command = click.argument(argument)(JSON_OPTION(action))
    group.command(name=name, context_settings=CONTEXT, help=help_text)(command)


def names_command(
    group: click.Group, name: str, path: str, argument: str, render: Callable[[Any], object], help_text: str
) -> None:
    """Add to ``group`` the command ``name`` that POSTs the names it is given (``argument``: one or more, each
    comma-separated or not) to ``path`` under that key, and prints the outcome."""

    @click.pass_context
    def names(ctx: click.Context, as_json: bool, **given: tuple[str, ...]) -> None:
        print_outcome_of(ctx, path, as_json, render, {argument: split_names(given[argument])})

    command = click.argument(argument, nargs=-1, required=True)(JSON_OPTION(names))
    group.command(name=name, context_settings=CONTEXT, help=help_text)(command)


def split_names(values: tuple[str, ...]) -> list[str]:
    """Names given comma-separated, repeated, or both."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def short_time(text: str | None) -> str:
    if not text:
        return "-"
    return datetime.fromisoformat(text.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S")


def print_table(rows: Sequence[Sequence[str]], cell_limit: int | None = None) -> None:
    """Rows of text as aligned columns (the first row is the header); cells longer than ``cell_limit`` are cut."""
    if cell_limit is not None:
        rows = [tuple(cell[:cell_limit] for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def print_records(
    records: list[dict[str, Any]],
    header: tuple[str, ...],
    row: Callable[[dict[str, Any]], tuple[str, ...]],
    empty: str | None = None,
) -> None:
    """Records as a table under ``header``, one ``row`` each; ``empty``, when given, is said instead of an empty
    table."""
    if not records and empty is not None:
        click.echo(empty)
        return
    print_table([header, *(row(record) for record in records)])


def print_parts(outcome: dict[str, Any], printers: Mapping[str, Callable[[Any], None]], nothing: str = "") -> None:
    """Each non-empty part of a command's outcome with its printer, in the printers' order; ``nothing``, when given,
    is said when every part is empty."""
    for part, render in printers.items():
        if outcome[part]:
            render(outcome[part])
    if nothing and not any(outcome[part] for part in printers):
        click.echo(nothing)


def print_events(events: list[dict[str, Any]]) -> None:
    print_records(
        events,
        ("EVENT ID", "STATUS", "TYPE", "SOURCE", "NOT BEFORE (UTC)", "RESOURCES"),
        lambda e: (
            e["event_id"],
            e["status"],
            e["type"],
            e["source"],
            short_time(e["not_before"]),
            ",".join(e["resources"]),
        ),
        empty="no events",
    )


def print_ec2_events(events: list[dict[str, Any]]) -> None:
    print_records(
        events,
        ("EVENT ID", "INSTANCE", "CODE", "STATE", "NOT BEFORE (UTC)", "NOT AFTER", "DEADLINE"),
        lambda e: (
            e["event_id"],
            e["instance_id"],
            e["code"],
            e["state"],
            short_time(e["not_before"]),
            short_time(e["not_after"]),
            short_time(e["not_before_deadline"]),
        ),
        empty="no events",
    )
