"""``forewarn vm``, ``vmss``, ``policy`` and ``platform``: VMs, scale sets, policies and the platform's own cases."""

from __future__ import annotations

import click

from forewarn.cli.common import (
    CONTEXT,
    JSON_OPTION,
    control_client,
    emit,
    listing_command,
    names_command,
    print_answer,
    print_events,
    print_outcome_of,
    print_parts,
    print_records,
    run,
    short_time,
    split_names,
)
from forewarn.core.words import counted


def _print_vms(vms: list[dict]) -> None:
    print_records(
        vms,
        ("VM", "POWER", "HOST", "BOOTED (UTC)", "IMPACTED BY", "MODEL"),
        lambda vm: (
            vm["name"],
            vm["power"],
            vm["host"],
            short_time(vm["booted_at"]),
            vm["impacted_by"] or "-",
            f"{vm['model_version']}" + ("" if vm["latest_model"] else " (not latest)"),
        ),
    )


def _print_outcome(outcome: dict) -> None:
    print_parts(outcome, {"events": print_events, "vms": _print_vms}, nothing="nothing changed")


@click.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn vm list
  forewarn vm restart standalone-01          # a User Reboot; Started at once under automaticallyApprove
  forewarn vm redeploy WestNO_0 --notice 2m
  forewarn vm delete myvmss_2                # a Terminate event if the instance's model enables it
  forewarn vm reimage myvmss_0               # announced as a Reboot with OS image notifications""",
)
def vm():
    """VMs: their running state, and the operations a user starts on them."""


listing_command(vm, "list", "/v1/vms", _print_vms, "Every VM's power state, host, boot time and model version.")


@vm.command(name="show", context_settings=CONTEXT)
@click.argument("name")
@JSON_OPTION
@click.pass_context
def vm_show(ctx, name, as_json):
    """One VM's running state."""
    print_answer(ctx, f"/v1/vms/{name}", as_json, lambda data: _print_vms([data]))


def _vm_operation(action: str, help_text: str, with_notice: bool):
    params = [
        click.Argument(["names"], nargs=-1, required=True),
        click.Option(["--json", "as_json"], is_flag=True, help="Print JSON."),
    ]
    if with_notice:
        params.append(click.Option(["--notice"], help="Time until NotBefore (default per type)."))

    @click.pass_context
    def command(ctx, names, as_json, notice=None):
        body = {"vms": split_names(names)}
        if notice is not None:
            body["notice"] = notice
        print_outcome_of(ctx, f"/v1/vms/{action}", as_json, _print_outcome, body)

    vm.add_command(click.Command(action, callback=command, params=params, help=help_text, context_settings=CONTEXT))


_vm_operation("restart", "Restart VMs: a User Reboot event.", True)
_vm_operation("redeploy", "Redeploy VMs to other hosts: a User Redeploy event.", True)
_vm_operation("reimage", "Reimage VMs (announced only with OS image notifications).", False)
_vm_operation("delete", "Delete VMs (announced by Terminate only with terminate notifications).", False)


@click.group(context_settings=CONTEXT)
def vmss():
    """Scale sets: scale in, and update instances to the latest model."""


@vmss.command(name="scale-in", context_settings=CONTEXT)
@click.argument("name")
@click.option("--count", type=int, default=1, show_default=True, help="How many instances to remove.")
@JSON_OPTION
@click.pass_context
def vmss_scale_in(ctx, name, count, as_json):
    """Remove instances, highest instance ids first (Terminate events if the profile is on)."""
    print_outcome_of(ctx, f"/v1/scale-sets/{name}/scale-in", as_json, _print_outcome, {"count": count})


@vmss.command(name="update-instances", context_settings=CONTEXT)
@click.argument("name")
@click.argument("instances", nargs=-1)
@JSON_OPTION
@click.pass_context
def vmss_update_instances(ctx, name, instances, as_json):
    """Bring instances (all when none are named) to the latest model, so that profile changes apply to them."""
    body = {"vms": list(instances)}
    print_outcome_of(ctx, f"/v1/scale-sets/{name}/update-instances", as_json, _print_outcome, body)


def _print_policy(policy: dict) -> None:
    for key, value in policy.items():
        click.echo(f"{key:>24}: {value}")


@click.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn policy show westno
  forewarn policy set westno --auto-approve-reboot
  forewarn policy set myvmss --terminate-notification PT10M
  forewarn vmss update-instances myvmss        # instances follow the new profile from now on
  forewarn policy set myvmss --terminate-notification off""",
)
def policy():
    """scheduledEventsPolicy and scale-set notification profiles."""


@policy.command(name="show", context_settings=CONTEXT)
@click.argument("owner")
@JSON_OPTION
@click.pass_context
def policy_show(ctx, owner, as_json):
    """The policy of a scale set, an availability set or a standalone VM."""
    print_answer(ctx, f"/v1/policies/{owner}", as_json, _print_policy)


def _profile_option(value: str | None) -> dict | None:
    if value is None:
        return None
    if value.lower() == "off":
        return {"enable": False}
    return {"enable": True, "not_before_timeout": value}


@policy.command(name="set", context_settings=CONTEXT)
@click.argument("owner")
@click.option(
    "--auto-approve-reboot/--no-auto-approve-reboot", default=None, help="userInitiatedReboot.automaticallyApprove"
)
@click.option(
    "--auto-approve-redeploy/--no-auto-approve-redeploy",
    default=None,
    help="userInitiatedRedeploy.automaticallyApprove",
)
@click.option("--terminate-notification", metavar="PT5M..PT15M|off", help="Scale sets: terminate notifications.")
@click.option("--os-image-notification", metavar="PT15M|off", help="Scale sets: OS image notifications.")
@click.option(
    "--central/--no-central",
    "publish_central",
    default=None,
    help="Publish this owner's new events to Event Grid and Resource Graph "
    "(scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph).",
)
@JSON_OPTION
@click.pass_context
def policy_set(
    ctx,
    owner,
    auto_approve_reboot,
    auto_approve_redeploy,
    terminate_notification,
    os_image_notification,
    publish_central,
    as_json,
):
    """Change a policy or a notification profile."""
    body = {}
    if auto_approve_reboot is not None:
        body["auto_approve_reboot"] = auto_approve_reboot
    if auto_approve_redeploy is not None:
        body["auto_approve_redeploy"] = auto_approve_redeploy
    if publish_central is not None:
        body["publish_central"] = publish_central
    for key, value in (
        ("terminate_notification", terminate_notification),
        ("os_image_notification", os_image_notification),
    ):
        if value is not None:
            body[key] = _profile_option(value)
    if not body:
        raise click.UsageError("nothing to change; see forewarn policy set --help")
    emit(run(lambda: control_client(ctx).request("PATCH", f"/v1/policies/{owner}", json=body)), as_json, _print_policy)


@click.group(
    context_settings=CONTEXT,
    epilog="""\b
Examples:
  forewarn platform hardware-failure host-02                  # events appear as Started, no notice
  forewarn platform hardware-failure host-02 --type Reboot
  forewarn platform predicted-failure host-01 --notice 3d     # a Redeploy days ahead
  forewarn platform evict spot-worker-01                      # Preempt, 30 s""",
)
def platform():
    """The platform's exceptional cases: hardware failures, predicted failures, Spot evictions."""


@platform.command(name="hardware-failure", context_settings=CONTEXT)
@click.argument("hosts", nargs=-1, required=True)
@click.option("--type", "event_type", help="Redeploy (default) or Reboot: the docs disagree.")
@JSON_OPTION
@click.pass_context
def platform_hardware_failure(ctx, hosts, event_type, as_json):
    """Hosts fail: the notice is bypassed and their VMs' events appear as Started."""
    body = {"hosts": split_names(hosts)}
    if event_type:
        body["type"] = event_type
    failed = split_names(hosts)
    print_outcome_of(
        ctx, "/v1/platform/hardware-failure", as_json, lambda outcome: _print_failure(failed, outcome), body
    )


def _print_failure(hosts: list[str], outcome: dict) -> None:
    """Which hosts failed and where their VMs went, above the events and the VMs (whose HOST is the new one)."""
    names = [vm["name"] for vm in outcome["vms"]]
    moved_to = sorted({vm["host"] for vm in outcome["vms"]} - set(hosts))
    where = f", now on {', '.join(moved_to)}" if moved_to else ""
    failed = ", ".join(hosts)
    click.echo(
        f"{failed} failed: {counted(len(names), 'VM')} impacted{' (' + ', '.join(names) + ')' if names else ''}{where}"
    )
    _print_outcome(outcome)


@platform.command(name="predicted-failure", context_settings=CONTEXT)
@click.argument("hosts", nargs=-1, required=True)
@click.option("--notice", help="Time until NotBefore (default 7d).")
@JSON_OPTION
@click.pass_context
def platform_predicted_failure(ctx, hosts, notice, as_json):
    """Degraded hosts: a Redeploy with NotBefore days ahead; approving brings it forward."""
    body = {"hosts": split_names(hosts)}
    if notice:
        body["notice"] = notice
    print_outcome_of(ctx, "/v1/platform/predicted-failure", as_json, _print_outcome, body)


names_command(
    platform,
    "evict",
    "/v1/platform/evict",
    "vms",
    _print_outcome,
    "Evict Spot VMs: Preempt with 30 s notice, then deleted.",
)
