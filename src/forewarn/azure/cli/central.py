"""``forewarn graph`` and ``forewarn acknowledge``: the central controller's two calls ("Scheduled Events in Event
Grid"), from the shell.

They speak to the ARM port as any client would (Resource Graph, the Maintenance acknowledge API); they are a
convenience for people without the az CLI, not another way in: the same requests, the same answers.
"""

from __future__ import annotations

import json
import re

import click

from forewarn.cli.common import CONTEXT, JSON_OPTION, CliClient, ClientError, fail, print_table

ARG_API = "2022-10-01"
ACK_API = "2023-10-01-preview"
ARM_OPTION = click.option(
    "--arm",
    "arm_url",
    envvar="FOREWARN_ARM",
    default="http://127.0.0.1:8171",
    show_default=True,
    help="The ARM port of the server (env FOREWARN_ARM).",
)
TOKEN_OPTION = click.option(
    "--token",
    envvar="FOREWARN_ARM_TOKEN",
    help="Bearer token, when the server runs with --access (env FOREWARN_ARM_TOKEN).",
)


def _arm(arm_url: str, token: str | None) -> CliClient:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return CliClient(
        arm_url, headers=headers, pointed_by="--arm URL or FOREWARN_ARM (the server's --arm-port)", control_api=False
    )


def _cell(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


@click.command(
    name="graph",
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn graph 'maintenanceresources | project name, properties.EventStatus, properties.Resources'
  forewarn graph 'maintenanceresources | summarize count() by tostring(properties.EventType)' --json
  forewarn graph 'maintenanceresources | where properties.EventStatus == "Scheduled" | project id' --token "$T"
Docs: docs/azure-central.md ("Resource Graph").""",
)
@click.argument("query")
@click.option(
    "--subscription",
    "subscriptions",
    multiple=True,
    metavar="ID",
    help="Subscriptions to query (repeatable); default: every one the caller may read.",
)
@click.option("--first", type=click.IntRange(1, 100_000), help="At most this many rows (pages are followed).")
@ARM_OPTION
@TOKEN_OPTION
@JSON_OPTION
def graph(query, subscriptions, first, arm_url, token, as_json):
    """Run a Resource Graph (KQL) query over maintenanceresources, following $skipToken pages."""
    client = _arm(arm_url, token)
    rows: list[dict] = []
    options: dict = {"resultFormat": "objectArray"}
    try:
        while True:
            body = {"query": query, "options": options}
            if subscriptions:
                body["subscriptions"] = list(subscriptions)
            page = client.request(
                "POST", "/providers/Microsoft.ResourceGraph/resources", params={"api-version": ARG_API}, json=body
            )
            rows.extend(page["data"])
            token_next = page.get("$skipToken")
            if not token_next or (first is not None and len(rows) >= first):
                break
            options = {**options, "$skipToken": token_next}
    except ClientError as error:
        fail(str(error))
    if first is not None:
        rows = rows[:first]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no rows")
        return
    columns = list(dict.fromkeys(key for row in rows for key in row))
    print_table([tuple(columns)] + [tuple(_cell(row.get(column)) for column in columns) for row in rows], cell_limit=80)


_EVENT_ID_PREFIX = re.compile(r"^[0-9A-Fa-f-]{4,36}$")


def _arm_id_of(client: CliClient, event_id: str) -> str:
    """The ARM id of the centrally published event whose EventId is or starts with ``event_id``, from Resource
    Graph (where a controller finds it too)."""
    if not _EVENT_ID_PREFIX.match(event_id):
        raise ClientError(
            "not a scheduled event id (.../providers/Microsoft.Maintenance/scheduledevents/ID) nor an "
            "EventId or its first characters (hex digits and hyphens, at least 4)"
        )
    # KQL string comparisons are case-insensitive, like EventIds.
    query = (
        f"maintenanceresources | where type == 'microsoft.maintenance/scheduledevents' "
        f"and name startswith '{event_id}' | project id, name, status = tostring(properties.EventStatus)"
    )
    page = client.request(
        "POST",
        "/providers/Microsoft.ResourceGraph/resources",
        params={"api-version": ARG_API},
        json={"query": query, "options": {"resultFormat": "objectArray", "$top": 11}},
    )
    rows = page["data"]
    if not rows:
        raise ClientError(
            "no scheduled event in Resource Graph has this EventId (only events of owners that "
            "publish centrally are there: forewarn policy set OWNER --central)"
        )
    if len(rows) > 1:
        shown = ", ".join(f"{row['name']} ({row['status']})" for row in rows[:10])
        raise ClientError(
            f"the start of {'more than 10' if len(rows) > 10 else len(rows)} EventIds: {shown}; give more characters"
        )
    return rows[0]["id"]


@click.command(
    name="acknowledge",
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn acknowledge 6B5C9A2E                    # an EventId or its first characters: the id is looked up
  forewarn acknowledge /subscriptions/$SUB/resourcegroups/contoso-rg/providers/microsoft.compute/virtualmachinescalesets/web/providers/microsoft.maintenance/scheduledevents/$EVENT
  forewarn graph 'maintenanceresources | where properties.EventStatus == "Scheduled" | project id' --json \\
    | jq -r '.[].id' | xargs forewarn acknowledge
Docs: docs/azure-central.md ("Maintenance acknowledge API").""",
)
@click.argument("ids", nargs=-1, required=True)
@ARM_OPTION
@TOKEN_OPTION
def acknowledge(ids, arm_url, token):
    """Acknowledge scheduled events through the Maintenance resource provider, by their full ids (the `id` column
    of Resource Graph) or by EventId or an unambiguous prefix of one (at least 4 characters; its id is looked up in
    Resource Graph): each starts as if its VMs had approved it through IMDS."""
    client = _arm(arm_url, token)
    failed = False
    for event_id in ids:
        if "/" not in event_id:
            try:
                event_id = _arm_id_of(client, event_id)
            except ClientError as error:
                click.echo(f"forewarn: {event_id}: {error}", err=True)
                failed = True
                continue
        path = event_id.rstrip("/")
        if "/providers/microsoft.maintenance/scheduledevents/" not in path.lower():
            click.echo(
                f"forewarn: {event_id}: not a scheduled event id (.../providers/Microsoft.Maintenance/"
                "scheduledevents/ID)",
                err=True,
            )
            failed = True
            continue
        try:
            answer = client.request("POST", f"{path}/acknowledge", params={"api-version": ACK_API})
        except ClientError as error:
            click.echo(f"forewarn: {path.rsplit('/', 1)[-1]}: {error}", err=True)
            failed = True
            continue
        click.echo(f"{path.rsplit('/', 1)[-1]}: {answer['value']}")
    if failed:
        raise SystemExit(1)
