"""Fleet files: defaults, scopes, and errors that name the file, the line and the problem."""

import pytest

from forewarn.aws.fleet import ec2_fleet
from forewarn.azure.fleet import azure_fleet
from forewarn.fleet.file import FleetFileError, load_fleet, parse_fleet
from forewarn.gcp.fleet import gce_fleet


def test_issue_example_and_defaults():
    fleet = parse_fleet("""
hosts:
  - name: host-01
  - name: host-02
vms:
  - name: WestNO_0
    host: host-01
    availability_set: westno
    imds: {address: 127.0.0.10, port: 9010}
scale_sets:
  - name: myvmss
    instances: 3
    hosts: [host-02]
""")
    vm = azure_fleet(fleet).vm("WestNO_0")
    assert (vm.subscription_id, vm.resource_group, vm.location, vm.size, vm.spot) == (
        "00000000-0000-0000-0000-000000000000",
        "forewarn-rg",
        "eastus",
        "Standard_D2s_v3",
        False,
    )
    assert (vm.imds_address, vm.imds_port) == ("127.0.0.10", 9010)
    assert [v.name for v in azure_fleet(fleet).vms.values()] == ["WestNO_0", "myvmss_0", "myvmss_1", "myvmss_2"]
    assert azure_fleet(fleet).vm("myvmss_2").scope == azure_fleet(fleet).vm("myvmss_0").scope
    assert azure_fleet(fleet).vm("myvmss_1").update_domain == 1 and azure_fleet(fleet).vm("myvmss_1").instance_id == "1"
    assert fleet.default_vm is None


def test_placement_groups_split_large_scale_sets():
    fleet = parse_fleet("scale_sets: [{name: big, instances: 250, placement_group_size: 100}]")
    scopes = {azure_fleet(fleet).vm(f"big_{i}").scope for i in (0, 99, 100, 199, 200)}
    assert len(scopes) == 3 and azure_fleet(fleet).vm("big_99").scope != azure_fleet(fleet).vm("big_100").scope


def test_availability_set_domains_and_subscriptions():
    fleet = parse_fleet("""
availability_sets: [{name: a, fault_domains: 2, update_domains: 3}]
vms:
  - {name: a0, availability_set: a}
  - {name: a1, availability_set: a}
  - {name: a2, availability_set: a}
  - {name: b0, availability_set: a, subscription: 11111111-1111-1111-1111-111111111111}
""")
    assert [
        (azure_fleet(fleet).vm(n).fault_domain, azure_fleet(fleet).vm(n).update_domain) for n in ("a0", "a1", "a2")
    ] == [
        (0, 0),
        (1, 1),
        (0, 2),
    ]
    # same name, another subscription: another set
    assert azure_fleet(fleet).vm("b0").scope != azure_fleet(fleet).vm("a0").scope
    assert azure_fleet(fleet).vm("a0").host == "a0-host"
    assert parse_fleet("vms: [{name: only}]").default_vm == "only"


def test_demo_fleet_has_what_the_readme_promises():
    fleet = load_fleet("demo")
    subscriptions = {vm.subscription_id for vm in azure_fleet(fleet).vms_by_host["host-02"]}
    assert len(subscriptions) == 2
    kinds = {scope.split(":")[0] for scope in azure_fleet(fleet).scopes}
    assert kinds == {"vm", "avset", "vmss"}
    assert fleet.default_vm == "standalone-01"
    # Addresses, no fixed ports: any number of demo servers run side by side, each on its own --imds-port.
    machines = [*azure_fleet(fleet).vms.values(), *ec2_fleet(fleet).instances.values()]
    assert all(machine.imds_address and machine.imds_port is None for machine in machines)


@pytest.mark.parametrize(
    "text, message",
    [
        ("vms:\n  - name: a\n    hots: h\n", "f.yaml:3: vms[0].hots: unknown key 'hots'"),
        ("vms:\n  - name: a\n    spot: maybe\n", "f.yaml:3: vms[0].spot: Input should be a valid boolean"),
        ("hosts: [{name: h}]\nvms:\n  - {name: a, host: x}\n", "f.yaml:3: vms[0].host: host 'x' is not declared"),
        ("vms:\n  - {name: a}\n  - {name: a}\n", "duplicate VM name 'a'"),
        ("vms:\n  - name: a\n    imds: {address: 999.1.1.1}\n", "f.yaml:3: vms[0].imds.address"),
        ("vms:\n  - {name: a, imds: {port: 9}}\n  - {name: b, imds: {port: 9}}\n", "share imds port 9"),
        ("scale_sets:\n  - name: s\n    instances: -1\n", "f.yaml:3: scale_sets[0].instances"),
        ("vms: [\n", "f.yaml:2: not valid YAML"),
        (
            "default_vm: nobody\nvms: [{name: a}]\n",
            "f.yaml:1: default_vm: 'nobody' is not a VM, EC2 or Compute Engine instance of this fleet",
        ),
        ("hosts: [{name: h}, {name: h}]\n", "f.yaml:1: hosts[1].name: duplicate host 'h'"),
        ("- a\n- b\n", "f.yaml:1: a fleet file is a mapping"),
        ("vms:\n  - name: a\n    name: b\n", "f.yaml:3: duplicate key 'name'"),
    ],
)
def test_errors_name_file_line_and_problem(text, message):
    with pytest.raises(FleetFileError) as error:
        parse_fleet(text, "f.yaml")
    assert message in str(error.value)


AZURE_NAME_RULE = (
    "a VM name is letters, digits, underscores, periods and hyphens, starting with a letter or digit and ending with "
    "a letter, digit or underscore"
)
NAME_TAG_RULE = "a Name tag is letters, numbers, spaces and + - = . _ : / @"


@pytest.mark.parametrize(
    "text, message",
    [
        # Azure: "Naming rules and restrictions for Azure resources" (virtualMachines, virtualMachineScaleSets).
        ("vms:\n  - {name: ok}\n  - {name: 'rel x'}\n", f"f.yaml:3: vms[1].name: {AZURE_NAME_RULE}: 'rel x' is not"),
        ("vms: [{name: 'a/b'}]\n", f"f.yaml:1: vms[0].name: {AZURE_NAME_RULE}: 'a/b' is not"),
        ("vms: [{name: '<x>'}]\n", f"vms[0].name: {AZURE_NAME_RULE}"),
        ("vms: [{name: 'relé'}]\n", f"vms[0].name: {AZURE_NAME_RULE}"),
        ("vms: [{name: _x}]\n", f"vms[0].name: {AZURE_NAME_RULE}"),
        ("vms: [{name: x-}]\n", f"vms[0].name: {AZURE_NAME_RULE}"),
        ("vms: [{name: x.}]\n", f"vms[0].name: {AZURE_NAME_RULE}"),
        (
            "vms: [{name: '" + "a" * 65 + "'}]\n",
            "f.yaml:1: vms[0].name: a VM name is 1-64 characters for Linux, not 65",
        ),
        (
            "vms: [{name: sixteen-letters1, os_type: Windows}]\n",
            "f.yaml:1: vms[0].name: a VM name is 1-15 characters for Windows, not 16",
        ),
        (
            "defaults: {os_type: Windows}\nvms: [{name: sixteen-letters1}]\n",
            "f.yaml:2: vms[0].name: a VM name is 1-15 characters for Windows, not 16",
        ),
        ("scale_sets:\n  - {name: 'my set', instances: 2}\n", "f.yaml:2: scale_sets[0].name: a scale set name is"),
        # EC2: a Name tag, "Tag your Amazon EC2 resources" (tag restrictions).
        ('ec2_instances:\n  - {name: "rel\\tx"}\n', f"f.yaml:2: ec2_instances[0].name: {NAME_TAG_RULE}; '\\t'"),
        ("ec2_instances:\n  - {name: 'a<b'}\n", f"f.yaml:2: ec2_instances[0].name: {NAME_TAG_RULE}; '<'"),
        ("ec2_instances: [{name: '" + "a" * 257 + "'}]\n", "ec2_instances[0].name: a Name tag is 1-256 characters"),
        (
            "ec2_instances:\n  - id: i-0123456789abcdef0\n    tags: {Name: 'x>'}\n",
            f"f.yaml:3: ec2_instances[0].tags.Name: {NAME_TAG_RULE}",
        ),
        # Compute Engine: RFC 1035, "Resource naming convention".
        ("gce_instances: [{name: Web-1}]\n", "gce_instances[0].name: a Compute Engine name is 1-63 lowercase"),
        ("gce_instances: [{name: web-}]\n", "gce_instances[0].name: a Compute Engine name is 1-63 lowercase"),
    ],
)
def test_machine_names_follow_each_clouds_rules(text, message):
    with pytest.raises(FleetFileError) as error:
        parse_fleet(text, "f.yaml")
    assert message in str(error.value)


def test_names_each_cloud_allows_are_taken():
    fleet = parse_fleet(
        "vms: [{name: WestNO_0}, {name: a.b-c_}, {name: fifteen-letters, os_type: Windows}, {name: '"
        + "a" * 64
        + "'}]\n"
        "ec2_instances: [{name: rel x}, {name: rel-x}, {name: relé}, {name: relá}, {name: 'a+b=c:d/e@f'}, "
        "{name: '" + "é" * 256 + "'}]\n"
        "gce_instances: [{name: web-1}]\n"
    )
    assert len(azure_fleet(fleet).vms) == 4 and len(gce_fleet(fleet).instances) == 1
    assert sorted(instance.name for instance in ec2_fleet(fleet).instances.values())[:4] == [
        "a+b=c:d/e@f",
        "rel x",
        "rel-x",
        "relá",
    ]
    assert len({instance.instance_id for instance in ec2_fleet(fleet).instances.values()}) == 6


def test_missing_file():
    with pytest.raises(FleetFileError, match="nope.yaml: cannot read the fleet file"):
        load_fleet("nope.yaml")


def test_policies_and_profiles():
    fleet = parse_fleet("""
availability_sets:
  - name: a
    scheduled_events_policy: {user_initiated_redeploy: {automatically_approve: true}}
vms:
  - {name: a0, availability_set: a}
  - name: solo
    scheduled_events_policy: {user_initiated_reboot: {automatically_approve: true}}
scale_sets:
  - name: s
    instances: 2
    scheduled_events_profile:
      terminate_notification_profile: {enable: true, not_before_timeout: PT7M}
      os_image_notification_profile: {enable: true, not_before_timeout: PT15M}
""")
    a = azure_fleet(fleet).policies[azure_fleet(fleet).vm("a0").policy_owner]
    assert (a.auto_approve_reboot, a.auto_approve_redeploy) == (False, True)
    assert azure_fleet(fleet).policies[azure_fleet(fleet).vm("solo").policy_owner].auto_approve_reboot
    s = azure_fleet(fleet).policies[azure_fleet(fleet).vm("s_1").policy_owner]
    assert s.terminate.enable and s.terminate.not_before_timeout.total_seconds() == 420 and s.os_image.enable
    assert azure_fleet(load_fleet("demo")).policies  # the demo scale set announces deletes


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "scale_sets:\n  - name: s\n    instances: 1\n    spot: true\n    scheduled_events_profile:\n"
            "      terminate_notification_profile: {enable: true}\n",
            "f.yaml:5: scale_sets[0].scheduled_events_profile: terminate notifications cannot be enabled on Spot",
        ),
        (
            "scale_sets:\n  - name: s\n    instances: 1\n    scheduled_events_profile:\n"
            "      terminate_notification_profile: {enable: true, not_before_timeout: PT30M}\n",
            "between PT5M and PT15M",
        ),
        (
            "scale_sets:\n  - name: s\n    instances: 1\n    size: Standard_M64\n    scheduled_events_profile:\n"
            "      os_image_notification_profile: {enable: true}\n",
            "not supported for size Standard_M64",
        ),
        (
            "availability_sets: [{name: a}]\nvms:\n  - name: v\n    availability_set: a\n    scheduled_events_policy: {}\n",
            "f.yaml:5: vms[0].scheduled_events_policy: VM v is in availability set a; set the policy there",
        ),
        (
            "vms:\n  - name: v\n    scheduled_events_policy: {user_initiated_reboot: {automatically: true}}\n",
            "unknown key 'automatically'",
        ),
    ],
)
def test_policy_errors(text, message):
    with pytest.raises(FleetFileError) as error:
        parse_fleet(text, "f.yaml")
    assert message in str(error.value)
