"""``forewarn gce``: Compute Engine instances, their host maintenance, preemption and host errors."""

from __future__ import annotations

import click

from forewarn.cli.common import (
    CONTEXT,
    JSON_OPTION,
    PointingGroup,
    action_command,
    control_client,
    listing_command,
    names_command,
    print_outcome_of,
    print_parts,
    print_records,
    run,
    split_names,
)


def _print_instances(instances: list[dict]) -> None:
    print_records(
        instances,
        ("INSTANCE", "STATUS", "HOST", "ZONE", "ON HOST MAINTENANCE", "MAINTENANCE-EVENT", "UPCOMING"),
        lambda i: (
            i["name"],
            i["status"] + (" (deleted)" if i["deleted"] else "") + (" (preempted)" if i["preempted"] else ""),
            i["host"],
            i["zone"],
            i["on_host_maintenance"] + ("" if i["automatic_restart"] else ", no restart"),
            i["maintenance_event"],
            "-" if i["upcoming"] is None else f"{i['upcoming']['window_start']} ({i['upcoming']['type']})",
        ),
    )


def _print_events(events: list[dict]) -> None:
    print_records(
        events,
        ("EVENT ID", "INSTANCE", "KIND", "STATE", "WINDOW START", "WINDOW END", "ANNOUNCED"),
        lambda e: (
            e["event_id"],
            e["instance"],
            e["kind"],
            e["state"],
            e["window_start"],
            e["window_end"],
            "yes" if e["announced"] else "no",
        ),
        empty="no maintenance",
    )


def notice_notes(events: list[dict], instances: list[dict]) -> list[str]:
    """Why an instance whose maintenance was just made will see no ``maintenance-event`` notice: the key is given
    only to an instance that migrates or has GPUs, and only if it read the key since its last maintenance ("Query
    metadata server for maintenance event notices"); otherwise the maintenance starts when the notice would."""
    by_name = {instance["name"]: instance for instance in instances}
    notes = []
    for event in events:
        instance = by_name.get(event["instance"])
        if instance is None or event["announced"] or event["notice_at"] or event["state"] not in ("pending", "ongoing"):
            continue
        name = instance["name"]
        if instance["on_host_maintenance"] != "MIGRATE" and not instance["gpus"]:
            notes.append(
                f"note: {name} terminates without GPUs: maintenance-event stays NONE, and the maintenance starts "
                "at its window"
            )
        elif not instance["watched"]:
            notes.append(
                f"note: {name} has not read maintenance-event since its last maintenance: it gets no notice, and "
                "the maintenance starts when the notice would begin (an agent that reads the key first sees it)"
            )
    return notes


def _print_with_notes(ctx: click.Context, events: list[dict], outcome: dict | None = None) -> None:
    if outcome is None:
        _print_events(events)
    else:
        _print_outcome(outcome)
    if events:
        instances = run(lambda: control_client(ctx).get("/v1/gce/instances"))
        for note in notice_notes(events, instances):
            click.echo(note)


def _print_outcome(outcome: dict) -> None:
    print_parts(outcome, {"events": _print_events, "instances": _print_instances})


@click.group(
    cls=PointingGroup,
    elsewhere={
        "schedule": "Compute Engine maintenance is `forewarn gce maintain NAME` (or simulate, preempt, host-error)"
    },
    context_settings=CONTEXT,
    epilog="""\b
Examples (the demo fleet's Compute Engine instances):
  forewarn gce maintain web-1                      # maintenance-event MIGRATE_ON_HOST_MAINTENANCE now, the
                                                   # migration 60 s later (if web-1 asked for the key before)
  forewarn gce maintain trainer-1                  # a GPU instance: TERMINATE_ON_HOST_MAINTENANCE now, the stop
                                                   # an hour later (GPU instances get a 1-hour notice)
  forewarn gce maintain trainer-1 --notice 7d      # announced: upcoming-maintenance for a week
  forewarn gce perform trainer-1                   # performMaintenance: start the announced one now
  forewarn gce maintain trainer-1 --notice 7d --latest 7d
  forewarn gce reschedule trainer-1 --notice 10d   # move it later, up to its latest window start
  forewarn gce preempt batch-1                     # Spot: preempted TRUE, stopped 30 s later
  curl -s -H 'Metadata-Flavor: Google' \\
    'http://127.0.0.40:8169/computeMetadata/v1/instance/maintenance-event?wait_for_change=true'""",
)
def gce():
    """Compute Engine instances: host maintenance, preemption, host errors."""


listing_command(
    gce,
    "instances",
    "/v1/gce/instances",
    _print_instances,
    "Every instance's status, host, scheduling, maintenance-event value and upcoming maintenance.",
)
listing_command(
    gce,
    "events",
    "/v1/gce/maintenance",
    _print_events,
    "Pending and ongoing maintenance, or all with --all.",
    all_help="Include completed and canceled maintenance.",
)


@gce.command(name="maintain", context_settings=CONTEXT)
@click.argument("instances", nargs=-1, required=True)
@click.option(
    "--kind",
    type=click.Choice(["migrate", "terminate"]),
    help="What happens at the start (default: each instance's onHostMaintenance).",
)
@click.option(
    "--notice",
    help="Time until the start, e.g. 90s, 7d (default: each instance's maintenance-event notice only, 60s, or 1h "
    "with GPUs; longer than that notice is announced as upcoming maintenance).",
)
@click.option("--start", help="Explicit start, ISO 8601 (instead of --notice).")
@click.option("--window", help="The window upcoming maintenance shows.  [default: 1h]")
@click.option(
    "--no-reschedule", is_flag=True, help="canReschedule false: performMaintenance and rescheduling are refused."
)
@click.option(
    "--latest",
    help="How much later than the start its user may reschedule it (latestWindowStartTime; default: not later).",
)
@click.option(
    "--type",
    "maintenance_type",
    type=click.Choice(["SCHEDULED", "UNSCHEDULED"]),
    default="SCHEDULED",
    show_default=True,
)
@JSON_OPTION
@click.pass_context
def gce_maintain(ctx, instances, kind, notice, start, window, no_reschedule, latest, maintenance_type, as_json):
    """Host maintenance of instances (one event each)."""
    body = {
        "instances": split_names(instances),
        "kind": kind,
        "notice": notice,
        "start": start,
        "window": window,
        "can_reschedule": not no_reschedule,
        "latest": latest,
        "type": maintenance_type,
    }
    print_outcome_of(ctx, "/v1/gce/maintenance", as_json, lambda events: _print_with_notes(ctx, events), body)


action_command(
    gce,
    "cancel",
    "/v1/gce/maintenance/{event_id}/cancel",
    _print_events,
    "Cancel maintenance that has not given its notice yet.",
    one=True,
)


@gce.command(name="simulate", context_settings=CONTEXT)
@click.argument("instance")
@JSON_OPTION
@click.pass_context
def gce_simulate(ctx, instance, as_json):
    """What simulateMaintenanceEvent does: the instance's own maintenance, after its notice (1 h with GPUs)."""
    print_outcome_of(
        ctx,
        f"/v1/gce/instances/{instance}/simulate-maintenance",
        as_json,
        lambda outcome: _print_with_notes(ctx, outcome["events"], outcome),
    )


action_command(
    gce,
    "perform",
    "/v1/gce/instances/{instance}/perform-maintenance",
    _print_outcome,
    "What performMaintenance does: announced maintenance starts 60 s from now (GPU instances too).",
)


@gce.command(name="reschedule", context_settings=CONTEXT)
@click.argument("instance")
@click.option("--start", help="The new start, ISO 8601.")
@click.option("--notice", help="Or the time from now to the new start, e.g. 3d.")
@JSON_OPTION
@click.pass_context
def gce_reschedule(ctx, instance, start, notice, as_json):
    """Move announced maintenance to another start: at least the instance's notice from now (60 s; 1 h with GPUs), at
    most its latest window start."""
    body = {"start": start, "notice": notice}
    print_outcome_of(ctx, f"/v1/gce/instances/{instance}/reschedule-maintenance", as_json, _print_outcome, body)


@gce.command(name="scheduling", context_settings=CONTEXT)
@click.argument("instance")
@click.option("--on-host-maintenance", type=click.Choice(["MIGRATE", "TERMINATE"]))
@click.option("--automatic-restart/--no-automatic-restart", default=None)
@JSON_OPTION
@click.pass_context
def gce_scheduling(ctx, instance, on_host_maintenance, automatic_restart, as_json):
    """What setScheduling does, with Compute Engine's checks."""
    body = {"on_host_maintenance": on_host_maintenance, "automatic_restart": automatic_restart}
    print_outcome_of(ctx, f"/v1/gce/instances/{instance}/scheduling", as_json, _print_outcome, body)


names_command(
    gce,
    "preempt",
    "/v1/gce/preempt",
    "instances",
    _print_outcome,
    "Preempt Spot or preemptible instances: preempted TRUE now, stopped (or deleted) 30 s later.",
)


names_command(
    gce,
    "host-error",
    "/v1/gce/host-error",
    "instances",
    _print_outcome,
    "The instances' host fails: no notice; they restart elsewhere if automaticRestart.",
)


action_command(
    gce, "start", "/v1/gce/instances/{instance}/start", _print_outcome, "Start a stopped (TERMINATED) instance."
)
