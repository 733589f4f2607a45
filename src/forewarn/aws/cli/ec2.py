"""``forewarn ec2``: EC2 instances and their scheduled events."""

from __future__ import annotations

import click

from forewarn.cli.common import (
    CONTEXT,
    JSON_OPTION,
    control_client,
    emit,
    print_ec2_events,
    print_table,
    run,
    split_names,
)


def _print_instances(instances: list[dict]) -> None:
    rows = [("INSTANCE", "NAME", "STATE", "HOST", "TYPE", "ZONE", "IMPACTED BY", "LIFECYCLE")]
    for i in instances:
        rows.append(
            (
                i["instance_id"],
                i["name"],
                i["state"],
                i["host"],
                i["instance_type"],
                i["availability_zone"],
                i["impacted_by"] or "-",
                i["lifecycle_state"],
            )
        )
    print_table(rows)


def _print_ec2_outcome(outcome: dict) -> None:
    if outcome["events"]:
        print_ec2_events(outcome["events"])
    if outcome["instances"]:
        _print_instances(outcome["instances"])


@click.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn schedule --code system-reboot --instance i-0a1b2c3d4e5f60718 --notice 1h
  forewarn ec2 events --all
  forewarn ec2 reschedule instance-event-0123456789abcdef0 2026-05-01T10:00:00Z
  forewarn ec2 interrupt i-0f1e2d3c4b5a69788 --action stop     # Spot: two-minute warning, then stopped
  forewarn ec2 start i-0a1b2c3d4e5f60718                      # after instance-stop: a new host""",
)
def ec2():
    """EC2 instances and their scheduled events."""


@ec2.command(name="instances", context_settings=CONTEXT)
@JSON_OPTION
@click.pass_context
def ec2_instances(ctx, as_json):
    """Every instance's state, host and lifecycle (Auto Scaling replacements included)."""
    emit(run(lambda: control_client(ctx).get("/v1/ec2/instances")), as_json, _print_instances)


@ec2.command(name="events", context_settings=CONTEXT)
@click.option("--all", "include_all", is_flag=True, help="Include completed and canceled events.")
@JSON_OPTION
@click.pass_context
def ec2_events(ctx, include_all, as_json):
    """Active EC2 events, or all with --all."""
    emit(
        run(lambda: control_client(ctx).get("/v1/ec2/events", params={"all": str(include_all).lower()})),
        as_json,
        print_ec2_events,
    )


@ec2.command(name="cancel", context_settings=CONTEXT)
@click.argument("event_id")
@JSON_OPTION
@click.pass_context
def ec2_cancel(ctx, event_id, as_json):
    """Cancel an event that has not started ([Canceled] in the history)."""
    emit([run(lambda: control_client(ctx).post(f"/v1/ec2/events/{event_id}/cancel"))], as_json, print_ec2_events)


@ec2.command(name="reschedule", context_settings=CONTEXT)
@click.argument("event_id")
@click.argument("not_before")
@JSON_OPTION
@click.pass_context
def ec2_reschedule(ctx, event_id, not_before, as_json):
    """Move an event's start, with ModifyInstanceEventStartTime's rules."""
    emit(
        [run(lambda: control_client(ctx).post(f"/v1/ec2/events/{event_id}/reschedule", {"not_before": not_before}))],
        as_json,
        print_ec2_events,
    )


@ec2.command(name="start", context_settings=CONTEXT)
@click.argument("instance_id")
@JSON_OPTION
@click.pass_context
def ec2_start(ctx, instance_id, as_json):
    """Start a stopped instance."""
    emit(run(lambda: control_client(ctx).post(f"/v1/ec2/instances/{instance_id}/start")), as_json, _print_ec2_outcome)


@ec2.command(name="interrupt", context_settings=CONTEXT)
@click.argument("instances", nargs=-1, required=True)
@click.option("--action", type=click.Choice(["terminate", "stop", "hibernate"]), default="terminate", show_default=True)
@JSON_OPTION
@click.pass_context
def ec2_interrupt(ctx, instances, action, as_json):
    """Spot interruption notice: spot/instance-action now, the action two minutes later."""
    body = {"instances": split_names(instances), "action": action}
    emit(run(lambda: control_client(ctx).post("/v1/ec2/spot/interrupt", body)), as_json, _print_ec2_outcome)


@ec2.command(name="rebalance", context_settings=CONTEXT)
@click.argument("instances", nargs=-1, required=True)
@JSON_OPTION
@click.pass_context
def ec2_rebalance(ctx, instances, as_json):
    """Rebalance recommendation for Spot instances."""
    emit(
        run(lambda: control_client(ctx).post("/v1/ec2/spot/rebalance", {"instances": split_names(instances)})),
        as_json,
        _print_ec2_outcome,
    )
