"""The rendering of Azure IMDS ``/metadata/instance`` and ``/metadata/versions`` (forewarn.azure.imds.instance).

Expected key lists come from Microsoft's IMDS page (the "Version introduced" tables and the full sample response)
and from raw documents of real VMs; each test says which.
"""

from __future__ import annotations

import ipaddress
import json
import re

import pytest

from forewarn.azure.imds import instance as ai
from forewarn.azure.vms import VM

NEWEST = ai.INSTANCE_API_VERSIONS[0]
SUB = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"


def make_vm(**overrides) -> VM:
    fields = {
        "name": "standalone-01",
        "host": "host-02",
        "subscription_id": SUB,
        "resource_group": "contoso-rg",
        "location": "westeurope",
        "zone": "1",
        "size": "Standard_D2s_v3",
        "fault_domain": 1,
        "update_domain": 3,
        "spot": False,
        "vm_id": "0f8fad5b-d9cb-469f-a165-70867728950e",
        "tags": {"role": "api", "Env": "prod"},
    }
    fields.update(overrides)
    return VM(**fields)


@pytest.fixture
def vm() -> VM:
    return make_vm()


@pytest.fixture
def scale_set_vm() -> VM:
    return make_vm(
        name="myvmss_2",
        scale_set="myvmss",
        instance_id="2",
        placement_group=0,
        zone="3",
        vm_id="7c9e6679-7425-40de-944b-e07fc1f90ae7",
        tags={},
    )


def previous(version: str) -> str:
    """The supported api-version just older than ``version``."""
    versions = ai.INSTANCE_API_VERSIONS
    return versions[versions.index(version) + 1]


def walk(document: dict, dotted: str):
    return ai.leaf(document, dotted.split("."))


# ---------------------------------------------------------------------------------------------------- versions


def test_instance_api_versions_are_the_documented_list_newest_first():
    versions = ai.INSTANCE_API_VERSIONS
    assert len(versions) == 35 == len(set(versions))
    assert list(versions) == sorted(versions, reverse=True)
    assert versions[:3] == ("2025-04-07", "2024-07-17", "2024-03-15")
    assert versions[-1] == "2017-03-01"
    assert "2020-07-15" in versions
    # Scheduled-events-only versions are not instance versions (azure-docs#46856).
    assert "2019-04-01" not in versions and "2020-07-01" not in versions


def test_versions_document_lists_every_version_oldest_first():
    document = ai.versions_document()
    assert list(document) == ["apiVersions"]
    assert document["apiVersions"][:2] == ["2017-03-01", "2017-04-02"]  # the doc's sample starts like this
    assert document["apiVersions"] == sorted(ai.INSTANCE_API_VERSIONS)
    json.dumps(document)


def test_unknown_api_version_is_refused(vm):
    with pytest.raises(ValueError):
        ai.instance_document(vm, "2017-07-01")
    with pytest.raises(ValueError):
        ai.instance_document(vm, "latest")


# ---------------------------------------------------------------------------------------------------- key order

# The compute keys of the doc's full sample response (includes/imds-full-instance-response.md, Linux tab).
DOC_SAMPLE_COMPUTE_KEYS = [
    "azEnvironment",
    "additionalCapabilities",
    "hostGroup",
    "extendedLocation",
    "evictionPolicy",
    "isHostCompatibilityLayerVm",
    "licenseType",
    "location",
    "name",
    "offer",
    "osProfile",
    "osType",
    "placementGroupId",
    "plan",
    "platformFaultDomain",
    "platformSubFaultDomain",
    "platformUpdateDomain",
    "priority",
    "publicKeys",
    "publisher",
    "resourceGroupName",
    "resourceId",
    "securityProfile",
    "sku",
    "storageProfile",
    "subscriptionId",
    "tags",
    "version",
    "virtualMachineScaleSet",
    "vmId",
    "vmScaleSetName",
    "vmSize",
    "zone",
]
# The sample's three keys that were pasted in at the top by hand; everything else in it is alphabetical.
DOC_SAMPLE_PASTED = {"additionalCapabilities", "hostGroup", "extendedLocation"}


def test_newest_compute_has_every_key_of_the_doc_sample_in_the_doc_sample_order(vm):
    keys = list(ai.instance_document(vm, NEWEST)["compute"])
    assert set(DOC_SAMPLE_COMPUTE_KEYS) <= set(keys)
    ours = [key for key in keys if key in DOC_SAMPLE_COMPUTE_KEYS and key not in DOC_SAMPLE_PASTED]
    assert ours == [key for key in DOC_SAMPLE_COMPUTE_KEYS if key not in DOC_SAMPLE_PASTED]
    # Fields the table has and the sample leaves out are present too.
    for key in ("customData", "host", "physicalZone", "provider", "tagsList", "userData"):
        assert key in keys


def test_newest_compute_keys_exactly(vm):
    assert list(ai.instance_document(vm, NEWEST)["compute"]) == [
        "additionalCapabilities",
        "azEnvironment",
        "customData",
        "evictionPolicy",
        "extendedLocation",
        "host",
        "hostGroup",
        "isHostCompatibilityLayerVm",
        "licenseType",
        "location",
        "name",
        "offer",
        "osProfile",
        "osType",
        "physicalZone",
        "placementGroupId",
        "plan",
        "platformFaultDomain",
        "platformSubFaultDomain",
        "platformUpdateDomain",
        "priority",
        "provider",
        "publicKeys",
        "publisher",
        "resourceGroupName",
        "resourceId",
        "securityProfile",
        "sku",
        "storageProfile",
        "subscriptionId",
        "tags",
        "tagsList",
        "userData",
        "version",
        "virtualMachineScaleSet",
        "vmId",
        "vmScaleSetName",
        "vmSize",
        "zone",
    ]


def _objects(node):
    if isinstance(node, dict):
        yield node
        for child in node.values():
            yield from _objects(child)
    elif isinstance(node, list):
        for child in node:
            yield from _objects(child)


@pytest.mark.parametrize("version", ai.INSTANCE_API_VERSIONS)
def test_every_object_has_its_keys_in_alphabetical_order(vm, scale_set_vm, version):
    for machine in (vm, scale_set_vm):
        for obj in _objects(ai.instance_document(machine, version)):
            assert list(obj) == sorted(obj), list(obj)


# Key sets of real documents (raw curl output from real VMs), for the versions they were fetched with.
REAL_2017_04_02 = [
    "location",
    "name",
    "offer",
    "osType",
    "platformFaultDomain",
    "platformUpdateDomain",
    "publisher",
    "sku",
    "version",
    "vmId",
    "vmSize",
]
REAL_2017_08_01 = [
    "location",
    "name",
    "offer",
    "osType",
    "placementGroupId",
    "platformFaultDomain",
    "platformUpdateDomain",
    "publisher",
    "resourceGroupName",
    "sku",
    "subscriptionId",
    "tags",
    "version",
    "vmId",
    "vmSize",
]
REAL_2021_05_01 = [
    "azEnvironment",
    "customData",
    "evictionPolicy",
    "extendedLocation",
    "isHostCompatibilityLayerVm",
    "licenseType",
    "location",
    "name",
    "offer",
    "osProfile",
    "osType",
    "placementGroupId",
    "plan",
    "platformFaultDomain",
    "platformUpdateDomain",
    "priority",
    "provider",
    "publicKeys",
    "publisher",
    "resourceGroupName",
    "resourceId",
    "securityProfile",
    "sku",
    "storageProfile",
    "subscriptionId",
    "tags",
    "tagsList",
    "userData",
    "version",
    "virtualMachineScaleSet",
    "vmId",
    "vmScaleSetName",
    "vmSize",
    "zone",
]


@pytest.mark.parametrize(
    "version, keys",
    [
        ("2017-04-02", REAL_2017_04_02),
        ("2017-08-01", REAL_2017_08_01),
        ("2021-05-01", REAL_2021_05_01),
    ],
)
def test_compute_keys_match_real_documents(vm, version, keys):
    assert list(ai.instance_document(vm, version)["compute"]) == keys


def test_2021_05_01_nested_objects_match_the_real_document(vm):
    compute = ai.instance_document(vm, "2021-05-01")["compute"]
    assert list(compute["securityProfile"]) == ["secureBootEnabled", "virtualTpmEnabled"]
    assert list(compute["storageProfile"]) == ["dataDisks", "imageReference", "osDisk", "resourceDisk"]
    assert list(compute["storageProfile"]["imageReference"]) == ["id", "offer", "publisher", "sku", "version"]
    assert list(compute["storageProfile"]["osDisk"]) == [
        "caching",
        "createOption",
        "diffDiskSettings",
        "diskSizeGB",
        "encryptionSettings",
        "image",
        "managedDisk",
        "name",
        "osType",
        "vhd",
        "writeAcceleratorEnabled",
    ]
    assert compute["storageProfile"]["osDisk"]["encryptionSettings"] == {"enabled": "false"}
    assert compute["extendedLocation"] == {"name": "", "type": ""}


# ---------------------------------------------------------------------------------------------------- gating

# (field, api-version that introduced it) from the doc's "Version introduced" tables.
INTRODUCED = [
    ("compute.vmScaleSetName", "2017-12-01"),
    ("compute.zone", "2017-12-01"),
    ("compute.subscriptionId", "2017-08-01"),
    ("compute.tags", "2017-08-01"),
    ("compute.placementGroupId", "2017-08-01"),
    ("compute.plan", "2018-04-02"),
    ("compute.publicKeys", "2018-04-02"),
    ("compute.azEnvironment", "2018-10-01"),
    ("compute.provider", "2018-10-01"),
    ("compute.customData", "2019-02-01"),
    ("compute.resourceId", "2019-03-11"),
    ("compute.storageProfile", "2019-06-01"),
    ("compute.tagsList", "2019-06-04"),
    ("compute.isHostCompatibilityLayerVm", "2020-06-01"),
    ("compute.securityProfile", "2020-06-01"),
    ("compute.osProfile", "2020-07-15"),
    ("compute.osProfile.disablePasswordAuthentication", "2020-10-01"),
    ("compute.licenseType", "2020-09-01"),
    ("compute.priority", "2020-12-01"),
    ("compute.evictionPolicy", "2020-12-01"),
    ("compute.userData", "2021-01-01"),
    ("compute.storageProfile.resourceDisk", "2021-02-01"),
    ("compute.extendedLocation", "2021-03-01"),
    ("compute.virtualMachineScaleSet", "2021-03-01"),
    ("compute.platformSubFaultDomain", "2021-10-01"),
    ("compute.additionalCapabilities", "2021-11-01"),
    ("compute.securityProfile.encryptionAtHost", "2021-11-01"),
    ("compute.storageProfile.osDisk.encryptionSettings.diskEncryptionKey", "2021-11-01"),
    ("compute.host", "2021-11-15"),
    ("compute.hostGroup", "2021-11-15"),
    ("compute.securityProfile.securityType", "2021-12-13"),
    ("compute.storageProfile.imageReference.exactVersion", "2023-07-01"),
    ("compute.storageProfile.imageReference.communityGalleryImageId", "2023-07-01"),
    ("compute.physicalZone", "2023-11-15"),
]


@pytest.mark.parametrize("field, since", INTRODUCED)
def test_field_appears_with_the_version_that_introduced_it(vm, field, since):
    assert walk(ai.instance_document(vm, previous(since)), field) is None
    assert walk(ai.instance_document(vm, since), field) is not None
    assert walk(ai.instance_document(vm, NEWEST), field) is not None


def test_oldest_versions_have_only_the_base_fields(vm):
    assert list(ai.instance_document(vm, "2017-03-01")["compute"]) == REAL_2017_04_02


def test_preview_network_uses_the_preview_schema(vm):
    document = ai.instance_document(vm, "2017-03-01")
    assert walk(document, "network.interface.0.ipv4.ipaddress.0.publicip") == ""
    assert walk(document, "network.interface.0.ipv4.ipaddress.0.ipaddress") == str(ai.private_ipv4(vm))
    assert walk(document, "network.interface.0.mac") == ai.mac_address(vm)
    assert walk(document, "network.interface.0.ipv4.subnet.0.dnsservers.0.ipaddress") == "168.63.129.16"
    assert walk(ai.instance_document(vm, "2017-04-02"), "network.interface.0.ipv4.ipaddress") is None


# ---------------------------------------------------------------------------------------------------- values


@pytest.mark.parametrize("version", ai.INSTANCE_API_VERSIONS)
def test_every_primitive_is_a_string(vm, scale_set_vm, version):
    # "In json responses, all primitives will be of type string" (doc, "Data format").
    def leaves(node):
        if isinstance(node, dict):
            for child in node.values():
                yield from leaves(child)
        elif isinstance(node, list):
            for child in node:
                yield from leaves(child)
        else:
            yield node

    for machine in (vm, scale_set_vm):
        assert all(isinstance(value, str) for value in leaves(ai.instance_document(machine, version)))


def test_values_come_from_the_vm_record(vm):
    compute = ai.instance_document(vm, NEWEST)["compute"]
    assert compute["name"] == "standalone-01"
    assert compute["location"] == "westeurope"
    assert compute["vmId"] == vm.vm_id
    assert compute["vmSize"] == "Standard_D2s_v3"
    assert compute["subscriptionId"] == SUB
    assert compute["resourceGroupName"] == "contoso-rg"
    assert compute["resourceId"] == (
        f"/subscriptions/{SUB}/resourceGroups/contoso-rg/providers/Microsoft.Compute/virtualMachines/standalone-01"
    )
    assert compute["platformFaultDomain"] == "1" and compute["platformUpdateDomain"] == "3"
    assert compute["zone"] == "1" and compute["physicalZone"] == "westeurope-az1"
    assert compute["vmScaleSetName"] == "" and compute["placementGroupId"] == ""
    assert compute["azEnvironment"] == "AzurePublicCloud"
    assert compute["provider"] == "Microsoft.Compute"
    assert compute["osType"] == "Linux"
    assert compute["osProfile"]["computerName"] == "standalone-01"
    assert compute["osProfile"]["disablePasswordAuthentication"] == "true"


def test_scale_set_instance(scale_set_vm):
    compute = ai.instance_document(scale_set_vm, NEWEST)["compute"]
    assert compute["name"] == "myvmss_2"
    assert compute["vmScaleSetName"] == "myvmss"
    assert compute["resourceId"].endswith("/virtualMachineScaleSets/myvmss/virtualMachines/2")
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", compute["placementGroupId"])
    # Instances of one placement group share the id; another placement group has another.
    sibling = make_vm(name="myvmss_0", scale_set="myvmss", instance_id="0", placement_group=0)
    other = make_vm(name="myvmss_9", scale_set="myvmss", instance_id="9", placement_group=1)
    assert ai.instance_document(sibling, NEWEST)["compute"]["placementGroupId"] == compute["placementGroupId"]
    assert ai.instance_document(other, NEWEST)["compute"]["placementGroupId"] != compute["placementGroupId"]
    assert compute["osProfile"]["computerName"] == "myvmss000002"
    assert compute["virtualMachineScaleSet"] == {"id": ""}  # Uniform orchestration: only Flexible fills it


def test_tags_as_the_semicolon_string_and_as_a_list(vm):
    compute = ai.instance_document(vm, NEWEST)["compute"]
    assert compute["tags"] == "Env:prod;role:api"
    assert compute["tagsList"] == [{"name": "Env", "value": "prod"}, {"name": "role", "value": "api"}]
    assert list(compute["tagsList"][0]) == ["name", "value"]
    untagged = ai.instance_document(make_vm(tags={}), NEWEST)["compute"]
    assert untagged["tags"] == "" and untagged["tagsList"] == []


def test_spot_fields(vm):
    spot = ai.instance_document(make_vm(name="spot-worker-01", spot=True), NEWEST)["compute"]
    regular = ai.instance_document(vm, NEWEST)["compute"]
    assert (spot["priority"], spot["evictionPolicy"]) == ("Spot", "Deallocate")
    assert (regular["priority"], regular["evictionPolicy"]) == ("Regular", "")


def test_image_follows_the_os_type(vm):
    linux = ai.instance_document(vm, NEWEST)["compute"]
    windows = ai.instance_document(make_vm(name="win-app-server-01", os_type="Windows"), NEWEST)["compute"]
    assert linux["publisher"] == "Canonical" and linux["storageProfile"]["imageReference"]["publisher"] == "Canonical"
    assert windows["publisher"] == "MicrosoftWindowsServer" and windows["offer"] == "WindowsServer"
    assert windows["storageProfile"]["osDisk"]["osType"] == "Windows"
    assert windows["osProfile"]["disablePasswordAuthentication"] == ""
    assert windows["osProfile"]["computerName"] == "win-app-server-"  # 15 characters, as Windows allows
    image = linux["storageProfile"]["imageReference"]
    assert image["version"] == "latest" and image["exactVersion"] == linux["version"]


def test_network_uses_the_imds_address_when_there_is_one():
    vm = make_vm(imds_address="127.0.0.13", imds_port=9013)
    interface = ai.instance_document(vm, NEWEST)["network"]["interface"][0]
    assert interface["ipv4"]["ipAddress"] == [{"privateIpAddress": "127.0.0.13", "publicIpAddress": ""}]
    assert interface["ipv4"]["subnet"] == [{"address": "127.0.0.0", "prefix": "24"}]
    assert interface["ipv6"] == {"ipAddress": []}
    assert list(interface) == ["ipv4", "ipv6", "macAddress"]


def test_network_address_is_derived_from_the_name_otherwise(vm):
    address = ai.private_ipv4(vm)
    assert address in ipaddress.IPv4Network("10.0.0.0/8")
    assert 4 <= int(str(address).rsplit(".", 1)[1]) <= 254  # Azure keeps .0-.3 and .255
    assert ai.private_ipv4(make_vm()) == address  # deterministic
    assert ai.private_ipv4(make_vm(name="standalone-02")) != address
    assert ai.private_ipv4(make_vm(imds_address="localhost")) == address  # not an IPv4 address: derived


def test_mac_is_derived_from_the_vm_id(vm):
    mac = ai.mac_address(vm)
    assert re.fullmatch(r"000D3A[0-9A-F]{6}", mac)
    assert ai.mac_address(make_vm(name="renamed")) == mac
    assert ai.mac_address(make_vm(vm_id="7c9e6679-7425-40de-944b-e07fc1f90ae7")) != mac
    assert ai.instance_document(vm, NEWEST)["network"]["interface"][0]["macAddress"] == mac


def test_document_is_deterministic_and_json_serialisable(vm):
    first = ai.instance_document(vm, NEWEST)
    assert first == ai.instance_document(vm, NEWEST)
    assert json.loads(json.dumps(first)) == first


# ---------------------------------------------------------------------------------------------------- leaf


def test_leaf_walks_keys_and_list_indexes(vm):
    document = ai.instance_document(vm, NEWEST)
    assert ai.leaf(document, ["compute", "name"]) == "standalone-01"
    assert ai.leaf(document, "network/interface/0/ipv4/ipAddress/0/privateIpAddress".split("/")) == str(
        ai.private_ipv4(vm)
    )
    assert ai.leaf(document, ["compute", "tagsList", "1", "value"]) == "api"
    assert ai.leaf(document, ["network", "interface", "0"]) is document["network"]["interface"][0]
    assert ai.leaf(document, []) is document
    assert ai.leaf(document, ["", "compute", "", "vmId", ""]) == vm.vm_id  # empty segments are skipped


@pytest.mark.parametrize(
    "path",
    [
        "compute/nope",
        "compute/Name",  # case-sensitive
        "network/interface/1",
        "network/interface/-1",
        "network/interface/01",
        "network/interface/x",
        "network/interface/0/ipv4/ipAddress/0/privateIpAddress/more",
        "compute/0",
        "computer",
    ],
)
def test_leaf_returns_none_for_paths_that_do_not_exist(vm, path):
    assert ai.leaf(ai.instance_document(vm, NEWEST), path.split("/")) is None


def test_leaf_respects_the_version(vm):
    assert ai.leaf(ai.instance_document(vm, "2017-08-01"), ["compute", "vmScaleSetName"]) is None
    assert ai.leaf(ai.instance_document(vm, "2017-12-01"), ["compute", "vmScaleSetName"]) == ""


# ---------------------------------------------------------------------------------------------------- text


def test_text_format_of_leaves(vm):
    document = ai.instance_document(vm, NEWEST)
    assert ai.text_format(ai.leaf(document, ["compute", "platformFaultDomain"])) == "1"
    assert ai.text_format(ai.leaf(document, ["compute", "tags"])) == "Env:prod;role:api"
    assert ai.text_format(ai.leaf(document, ["compute", "vmScaleSetName"])) == ""
    assert ai.text_format(ai.leaf(document, "network/interface/0/ipv4/ipAddress/0/privateIpAddress".split("/"))) == str(
        ai.private_ipv4(vm)
    )
    assert ai.text_format(7) == "7" and ai.text_format(None) == ""


def test_text_format_of_non_leaves_lists_the_children(vm):
    document = ai.instance_document(vm, NEWEST)
    assert ai.text_format(document) == "compute/\nnetwork/"  # what a real VM answered
    assert ai.text_format(document["network"]) == "interface/"
    assert ai.text_format(document["network"]["interface"]) == "0/"
    assert ai.text_format(document["network"]["interface"][0]) == "ipv4/\nipv6/\nmacAddress"
    assert ai.text_format(document["compute"]["tagsList"]) == "0/\n1/"
    assert ai.text_format(document["network"]["interface"][0]["ipv6"]["ipAddress"]) == ""
    lines = ai.text_format(document["compute"]).split("\n")
    assert lines == [
        key + "/" if isinstance(value, (dict, list)) else key for key, value in document["compute"].items()
    ]
    assert "plan/" in lines and "name" in lines and "tagsList/" in lines


def test_text_listing_of_2017_04_02_compute_matches_the_real_one(vm):
    compute = ai.instance_document(vm, "2017-04-02")["compute"]
    assert ai.text_format(compute).split("\n") == REAL_2017_04_02


# ---------------------------------------------------------------------------------------------------- errors

BAD_API_VERSION_ERROR = {
    "error": "Bad request. api-version is invalid or was not specified in the request. For more information "
    "refer to aka.ms/azureimds",
    "newest-versions": ["2025-04-07", "2024-07-17", "2024-03-15"],
}


def test_error_bodies_have_the_imds_shape():
    for body in (ai.LEAF_REQUIRES_TEXT_ERROR, ai.BAD_FORMAT_ERROR):
        assert list(body) == ["error"] and isinstance(body["error"], str)


# ---------------------------------------------------------------------------------------------------- answer


def test_answer_leaf_as_text(vm):
    status, body, content_type = ai.answer(vm, NEWEST, "/compute/name", "text")
    assert (status, body) == (200, b"standalone-01")
    assert content_type.startswith(b"text/plain")


@pytest.mark.parametrize("fmt", [None, "json"])
def test_answer_leaf_without_format_text_is_a_400(vm, fmt):
    status, body, content_type = ai.answer(vm, NEWEST, "/compute/vmId", fmt)
    assert status == 400 and json.loads(body) == ai.LEAF_REQUIRES_TEXT_ERROR
    assert content_type.startswith(b"application/json")


def test_answer_whole_document_and_subtrees_as_json(vm):
    status, body, _ = ai.answer(vm, NEWEST, "", None)
    assert status == 200 and json.loads(body) == ai.instance_document(vm, NEWEST)
    assert body.startswith(b'{"compute":{"additionalCapabilities":{"hibernationEnabled":"false"},"azEnvironment"')
    status, body, _ = ai.answer(vm, NEWEST, "/network/interface/0", "json")
    assert status == 200 and json.loads(body) == ai.instance_document(vm, NEWEST)["network"]["interface"][0]
    status, body, _ = ai.answer(vm, NEWEST, "/compute/tagsList", None)
    assert status == 200 and json.loads(body) == [{"name": "Env", "value": "prod"}, {"name": "role", "value": "api"}]


def test_answer_non_leaf_as_text_lists_children(vm):
    assert ai.answer(vm, NEWEST, "", "text")[:2] == (200, b"compute/\nnetwork/")
    assert ai.answer(vm, NEWEST, "/", "text")[:2] == (200, b"compute/\nnetwork/")
    assert ai.answer(vm, NEWEST, "/network/interface", "text")[:2] == (200, b"0/")


def test_answer_errors(vm):
    assert ai.answer(vm, NEWEST, "/compute/nope", "text")[0] == 404
    assert json.loads(ai.answer(vm, NEWEST, "/compute/nope", None)[1]) == {"error": "Not found"}
    assert ai.answer(vm, "2017-08-01", "/compute/vmScaleSetName", "text")[0] == 404  # not in that version
    status, body, _ = ai.answer(vm, "2019-04-01", "/compute/name", "text")  # a scheduled-events version
    assert status == 400 and json.loads(body) == BAD_API_VERSION_ERROR
    status, body, _ = ai.answer(vm, NEWEST, "/compute/name", "xml")
    assert status == 400 and json.loads(body) == ai.BAD_FORMAT_ERROR


def test_answer_preview_public_ip_path(vm):
    path = "/network/interface/0/ipv4/ipaddress/0/publicip"
    assert ai.answer(vm, "2017-03-01", path, "text")[:2] == (200, b"")
    assert ai.answer(vm, "2017-04-02", path, "text")[0] == 404


def test_answer_is_rendered_again_when_the_vm_record_changes(vm):
    assert ai.answer(vm, NEWEST, "/compute/tags", "text")[1] == b"Env:prod;role:api"
    retagged = make_vm(tags={"role": "db"})
    assert ai.answer(retagged, NEWEST, "/compute/tags", "text")[1] == b"role:db"


# ---------------------------------------------------------------------------------------------------- extended


def test_extended_adds_the_provisioning_object_and_nothing_else(vm):
    """``extended=true`` (what cloud-init and azure-init send) adds the top-level ``extended`` object, whose
    ``compute.ppsType`` cloud-init reads ("None": the VM is not pre-provisioned); the rest is the same document."""
    plain = ai.instance_document(vm, "2021-08-01")
    extended = ai.instance_document(vm, "2021-08-01", extended=True)
    assert list(extended) == ["compute", "extended", "network"]  # alphabetical, as every level
    assert extended["extended"] == {"compute": {"ppsType": "None"}}
    assert {key: value for key, value in extended.items() if key != "extended"} == plain
    status, body, _ = ai.answer(vm, "2021-08-01", "/extended/compute/ppsType", "text", extended=True)
    assert (status, body) == (200, b"None")
    assert ai.answer(vm, "2021-08-01", "/extended", "json")[0] == 404  # only when asked for
    assert ai.answer(vm, NEWEST, "", "text", extended=True)[1] == b"compute/\nextended/\nnetwork/"
