"""``forewarn ec2``: EC2 instances and their scheduled events."""

from __future__ import annotations

import click

from forewarn.cli.common import (
    CONTEXT,
    JSON_OPTION,
    PointingGroup,
    action_command,
    listing_command,
    names_command,
    print_ec2_events,
    print_outcome_of,
    print_parts,
    print_records,
    split_names,
)


def _print_instances(instances: list[dict]) -> None:
    print_records(
        instances,
        ("INSTANCE", "NAME", "STATE", "HOST", "TYPE", "ZONE", "IMPACTED BY", "LIFECYCLE"),
        lambda i: (
            i["instance_id"],
            i["name"],
            i["state"],
            i["host"],
            i["instance_type"],
            i["availability_zone"],
            i["impacted_by"] or "-",
            i["lifecycle_state"],
        ),
    )


def _print_ec2_outcome(outcome: dict) -> None:
    print_parts(outcome, {"events": print_ec2_events, "instances": _print_instances})


@click.group(
    cls=PointingGroup,
    elsewhere={"schedule": "EC2 events are scheduled by `forewarn schedule --code CODE --instance ID`"},
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


listing_command(
    ec2,
    "instances",
    "/v1/ec2/instances",
    _print_instances,
    "Every instance's state, host and lifecycle (Auto Scaling replacements included).",
)
listing_command(
    ec2,
    "events",
    "/v1/ec2/events",
    print_ec2_events,
    "Active EC2 events, or all with --all.",
    all_help="Include completed and canceled events.",
)


action_command(
    ec2,
    "cancel",
    "/v1/ec2/events/{event_id}/cancel",
    print_ec2_events,
    "Cancel an event that has not started ([Canceled] in the history).",
    one=True,
)


@ec2.command(name="reschedule", context_settings=CONTEXT)
@click.argument("event_id")
@click.argument("not_before")
@JSON_OPTION
@click.pass_context
def ec2_reschedule(ctx, event_id, not_before, as_json):
    """Move an event's start, with ModifyInstanceEventStartTime's rules."""
    body = {"not_before": not_before}
    print_outcome_of(ctx, f"/v1/ec2/events/{event_id}/reschedule", as_json, print_ec2_events, body, one=True)


action_command(ec2, "start", "/v1/ec2/instances/{instance_id}/start", _print_ec2_outcome, "Start a stopped instance.")


@ec2.command(name="interrupt", context_settings=CONTEXT)
@click.argument("instances", nargs=-1, required=True)
@click.option("--action", type=click.Choice(["terminate", "stop", "hibernate"]), default="terminate", show_default=True)
@JSON_OPTION
@click.pass_context
def ec2_interrupt(ctx, instances, action, as_json):
    """Spot interruption notice: spot/instance-action now, the action two minutes later."""
    body = {"instances": split_names(instances), "action": action}
    print_outcome_of(ctx, "/v1/ec2/spot/interrupt", as_json, _print_ec2_outcome, body)


names_command(
    ec2,
    "rebalance",
    "/v1/ec2/spot/rebalance",
    "instances",
    _print_ec2_outcome,
    "Rebalance recommendation for Spot instances.",
)
