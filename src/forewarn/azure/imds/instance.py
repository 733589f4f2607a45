"""Azure IMDS ``GET /metadata/instance`` (and its leaf paths) and ``GET /metadata/versions`` for one simulated VM.

Pure rendering: plain functions and dicts, no I/O. The HTTP adapter (``azure_imds.py``) checks headers and the
api-version, then calls :func:`answer` (or the smaller pieces below) and caches the bytes.

Sources, cited below as [doc] and [capture]:

* [doc] learn.microsoft.com/azure/virtual-machines/instance-metadata-service (MicrosoftDocs/azure-compute-docs,
  ``articles/virtual-machines/instance-metadata-service.md`` and ``includes/imds-full-instance-response.md``):
  the per-field "Version introduced" tables, the sample responses, "Route parameters", "Data format",
  "Versioning", "Errors and debugging". Older revisions of the same page for the 2017-03-01 preview schema.
* [capture] raw ``curl`` output from real VMs published in public write-ups and issues: api-version 2017-04-02
  (``format=text`` listings of the root and of ``compute``), 2017-08-01 (hashicorp/terraform-azurerm-consul#38),
  2019-02-01 and 2021-05-01 full documents. Their key sets are exactly what the [doc] table predicts for each
  version, and their keys are in alphabetical order at every level.

Key order: real IMDS sends every object's keys in alphabetical order ([capture], all versions). The [doc] sample
is hand-edited (``additionalCapabilities``, ``hostGroup`` and ``extendedLocation`` pasted at the top,
``extendedLocation.type`` before ``name``); apart from those pasted keys its order is alphabetical too, which the
tests check.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import uuid
from dataclasses import dataclass
from typing import Any, Final

from forewarn.azure.imds.errors import NOT_FOUND, bad_api_version
from forewarn.azure.vms import VM
from forewarn.net.http import JSON, TEXT

# ------------------------------------------------------------------------------------------------ versions

# [doc] "Supported API versions", newest first. The same list is IMDS-wide; scheduled events use their own set.
INSTANCE_API_VERSIONS: Final[tuple[str, ...]] = (
    "2025-04-07",
    "2024-07-17",
    "2024-03-15",
    "2023-11-15",
    "2023-07-01",
    "2021-12-13",
    "2021-11-15",
    "2021-11-01",
    "2021-10-01",
    "2021-08-01",
    "2021-05-01",
    "2021-03-01",
    "2021-02-01",
    "2021-01-01",
    "2020-12-01",
    "2020-10-01",
    "2020-09-01",
    "2020-07-15",
    "2020-06-01",
    "2019-11-01",
    "2019-08-15",
    "2019-08-01",
    "2019-06-04",
    "2019-06-01",
    "2019-04-30",
    "2019-03-11",
    "2019-02-01",
    "2018-10-01",
    "2018-04-02",
    "2018-02-01",
    "2017-12-01",
    "2017-10-01",
    "2017-08-01",
    "2017-04-02",
    "2017-03-01",
)
_VERSION_SET: Final[frozenset[str]] = frozenset(INSTANCE_API_VERSIONS)

# The preview: the [doc] table dates the base compute fields 2017-04-02, but the 2017-03-01 revision of the page
# shows the same compute fields, and a different (lower-case) network schema.
PREVIEW: Final = "2017-03-01"
ALWAYS: Final = PREVIEW


def versions_document() -> dict:
    """``GET /metadata/versions``: [doc] "Versions" shows ``apiVersions`` OLDEST FIRST (2017-03-01, 2017-04-02, ...)."""
    return {"apiVersions": list(reversed(INSTANCE_API_VERSIONS))}


# ------------------------------------------------------------------------------------------------ error bodies
# Bodies only; the status is in each comment. Do not mutate them, they are shared.

# 400 when a leaf is asked for as JSON (format=json or no format). Status: [doc] "Errors and debugging" and
# azure-docs#15283 (both format=json and a missing format fail on compute/vmId). Body: not documented; our choice.
LEAF_REQUIRES_TEXT_ERROR: Final[dict] = {
    "error": "Bad request. Leaf nodes are only available with format=text. For more information refer to "
    "aka.ms/azureimds"
}
# 400 for a format other than json or text ([doc] "Get VM metadata" lists only those two). Body: our choice.
BAD_FORMAT_ERROR: Final[dict] = {
    "error": "Bad request. format must be json or text. For more information refer to aka.ms/azureimds"
}
# 404 for a route parameter that names nothing ([doc] "Errors and debugging"): azure_errors.NOT_FOUND.
# Not an error: format=text on the root or any non-leaf node answers 200 with the child keys (see text_format).
# A real 2017-04-02 VM answered /metadata/instance?format=text with "compute/" and "network/" [capture].


# ------------------------------------------------------------------------------------------------ constants
# Values the VM record does not carry. Each is either documented or marked as our choice.

AZ_ENVIRONMENT: Final = "AzurePublicCloud"  # [doc] Sample 5 and the cloud table; real VMs send this casing
PROVIDER: Final = "Microsoft.Compute"  # [capture] every document since 2018-10-01
ADMIN_USERNAME: Final = "azureuser"  # our choice: the portal's default admin name
OS_DISK_SIZE_GB: Final = {"Linux": "30", "Windows": "127"}  # our choice: the marketplace images' default sizes
OS_DISK_ACCOUNT_TYPE: Final = "Premium_LRS"  # our choice
# [doc] resourceDisk: "If there's no local temp disk for the VM, this value is 0." Our choice: none is simulated.
RESOURCE_DISK_SIZE: Final = "0"
# Our choice: the defaults of a VM created today (Trusted launch with secure boot and vTPM, no host encryption).
SECURITY_TYPE: Final = "TrustedLaunch"
# 00-0D-3A is a Microsoft OUI; every MAC in the [doc] samples and the [capture]s of that era starts with it.
MAC_PREFIX: Final = "000D3A"
# Azure's platform DNS; the 2017-03-01 preview listed the subnet's DNS servers (our choice of which).
PLATFORM_DNS: Final = "168.63.129.16"
SUBNET_PREFIX: Final = 24  # our choice


@dataclass(frozen=True)
class Image:
    publisher: str
    offer: str
    sku: str
    version: str  # the exact version; imageReference.version says "latest" as the [doc] sample does


# Our choice: a common marketplace image per os_type (the VM record has no image).
IMAGES: Final[dict[str, Image]] = {
    "Linux": Image("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2", "22.04.202404090"),
    "Windows": Image("MicrosoftWindowsServer", "WindowsServer", "2022-datacenter-azure-edition", "20348.2402.240405"),
}


# ------------------------------------------------------------------------------------------------ the document

Entry = tuple[str, str, Any]  # (key, api-version that introduced it, value)


def _gated(api_version: str, entries: list[Entry]) -> dict:
    """The entries that ``api_version`` has, keys in alphabetical order as real IMDS sends them [capture]."""
    return {key: value for key, since, value in sorted(entries, key=lambda e: e[0]) if api_version >= since}


def _fields(**values: Any) -> dict:
    """An object whose fields all exist since the preview, in IMDS's alphabetical order."""
    return dict(sorted(values.items()))


def instance_document(vm: VM, api_version: str, extended: bool = False) -> dict:
    """The full ``/metadata/instance`` document of ``vm`` as IMDS renders it for ``api_version``; with
    ``extended`` (the ``extended=true`` query parameter), the top-level ``extended`` object too.

    Raises ValueError for an api-version IMDS does not serve (the adapter refuses those before calling).
    """
    if api_version not in _VERSION_SET:
        raise ValueError(f"unsupported IMDS api-version {api_version!r}")
    document = {"compute": _compute(vm, api_version)}
    if extended:
        document["extended"] = EXTENDED
    document["network"] = _network(vm, api_version)
    return document


# ``extended=true`` is not in the [doc] page nor in the IMDS Swagger; it is what provisioning agents send
# (cloud-init asks ``/metadata/instance?api-version=2021-08-01&extended=true``; Azure/azure-init#134: it marks the
# request as one for provisioning, so IMDS answers complete data or fails instead of answering 200 with partial
# data). The answer gains a top-level ``extended`` object, of which cloud-init reads
# ``extended.compute.ppsType`` (pre-provisioning: "None" once a VM is provisioned, "Running", "Savable",
# "PreprovisionedOSDisk"). A simulated VM is never pre-provisioned, so "None". Other keys real IMDS may put there
# (such as ``hasCustomData``, whose type is not public) are not served; this is the whole of it.
EXTENDED: Final[dict] = {"compute": {"ppsType": "None"}}


def _compute(vm: VM, v: str) -> dict:
    image = IMAGES.get(vm.os_type, IMAGES["Linux"])
    # Since dates: the [doc] "Compute" table. Values are strings: "In json responses, all primitives will be of
    # type string, and missing or inapplicable values are always included but will be set to an empty string."
    return _gated(
        v,
        [
            ("additionalCapabilities", "2021-11-01", {"hibernationEnabled": "false"}),
            ("azEnvironment", "2018-10-01", AZ_ENVIRONMENT),
            # Deprecated and disabled in IMDS [doc]; real documents still carry it empty [capture].
            ("customData", "2019-02-01", ""),
            ("evictionPolicy", "2020-12-01", "Deallocate" if vm.spot else ""),
            ("extendedLocation", "2021-03-01", _fields(name="", type="")),
            ("host", "2021-11-15", {"id": ""}),
            ("hostGroup", "2021-11-15", {"id": ""}),
            ("isHostCompatibilityLayerVm", "2020-06-01", "false"),
            ("licenseType", "2020-09-01", ""),  # only set for Azure Hybrid Benefit [doc]; empty otherwise [capture]
            ("location", ALWAYS, vm.location),
            # For a scale-set instance this is "{scaleset}_{instanceId}", which the fleet already uses as vm.name.
            ("name", ALWAYS, vm.name),
            ("offer", ALWAYS, image.offer),
            ("osProfile", "2020-07-15", _os_profile(vm, v)),
            ("osType", ALWAYS, vm.os_type),
            ("physicalZone", "2023-11-15", _physical_zone(vm)),
            ("placementGroupId", "2017-08-01", _placement_group_id(vm)),
            ("plan", "2018-04-02", _fields(name="", product="", publisher="")),  # platform images have no plan
            ("platformFaultDomain", ALWAYS, str(vm.fault_domain)),
            ("platformSubFaultDomain", "2021-10-01", ""),
            ("platformUpdateDomain", ALWAYS, str(vm.update_domain)),
            ("priority", "2020-12-01", "Spot" if vm.spot else "Regular"),
            ("provider", "2018-10-01", PROVIDER),
            ("publicKeys", "2018-04-02", []),  # our choice: the fleet has no SSH keys to show
            ("publisher", ALWAYS, image.publisher),
            ("resourceGroupName", "2017-08-01", vm.resource_group),
            ("resourceId", "2019-03-11", vm.resource_id),
            ("securityProfile", "2020-06-01", _security_profile(v)),
            ("sku", ALWAYS, image.sku),
            ("storageProfile", "2019-06-01", _storage_profile(vm, v, image)),
            ("subscriptionId", "2017-08-01", vm.subscription_id),
            ("tags", "2017-08-01", tags_text(vm.tags)),
            ("tagsList", "2019-06-04", tags_list(vm.tags)),
            ("userData", "2021-01-01", ""),  # base64 of the user data; none is simulated
            ("version", ALWAYS, image.version),
            ("virtualMachineScaleSet", "2021-03-01", {"id": ""}),  # see _virtual_machine_scale_set_id below
            ("vmId", ALWAYS, vm.vm_id),
            ("vmScaleSetName", "2017-12-01", vm.scale_set or ""),
            ("vmSize", ALWAYS, vm.size),
            ("zone", "2017-12-01", vm.zone),
        ],
    )
    # virtualMachineScaleSet.id is only filled for Flexible scale sets [doc]. The fleet's scale-set instances have
    # the Uniform resource id (.../virtualMachineScaleSets/S/virtualMachines/N), so it stays "" for every VM.


def tags_text(tags: dict[str, str]) -> str:
    """``compute.tags``: "name:value" pairs joined by ";" [doc] Sample 3, unescaped (the doc warns about ";").

    Our choice: sorted by name, as in both [doc] examples, so the output does not depend on the fleet file's order.
    """
    return ";".join(f"{name}:{value}" for name, value in sorted(tags.items()))


def tags_list(tags: dict[str, str]) -> list[dict[str, str]]:
    """``compute.tagsList``: the same tags as ``[{"name", "value"}]`` [doc] Sample 3, in the same order as ``tags``."""
    return [{"name": name, "value": value} for name, value in sorted(tags.items())]


def _os_profile(vm: VM, v: str) -> dict:
    # disablePasswordAuthentication is 2020-10-01 and "only present for Linux VMs" [doc]; empty for Windows.
    return _gated(
        v,
        [
            ("adminUsername", "2020-07-15", ADMIN_USERNAME),
            ("computerName", "2020-07-15", computer_name(vm)),
            ("disablePasswordAuthentication", "2020-10-01", "true" if vm.os_type == "Linux" else ""),
        ],
    )


def computer_name(vm: VM) -> str:
    """The guest host name. Our choice, modelled on Azure's defaults: a Uniform scale-set instance is named
    prefix + its instance id in base 36 on 6 digits; Windows names are cut to 15 characters (NetBIOS)."""
    limit = 15 if vm.os_type == "Windows" else 64
    if vm.scale_set is not None and vm.instance_id is not None and vm.instance_id.isdigit():
        return vm.scale_set[: limit - 6] + _base36(int(vm.instance_id)).rjust(6, "0")
    return vm.name[:limit]


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
        if number == 0:
            return text


def _physical_zone(vm: VM) -> str:
    # Our choice: logical zone N maps to "{location}-azN", the form ARM's availabilityZoneMappings use.
    return f"{vm.location}-az{vm.zone}" if vm.zone else ""


def _placement_group_id(vm: VM) -> str:
    # A GUID for scale-set instances, "" otherwise [doc]. Our choice: derived from the broadcast scope, which is
    # one per placement group, so the instances of one placement group agree.
    if vm.scale_set is None:
        return ""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"forewarn:{vm.scope}"))


def _security_profile(v: str) -> dict:
    return _gated(
        v,
        [
            ("encryptionAtHost", "2021-11-01", "false"),
            ("secureBootEnabled", "2020-06-01", "true"),
            ("securityType", "2021-12-13", SECURITY_TYPE),
            ("virtualTpmEnabled", "2020-06-01", "true"),
        ],
    )


def _storage_profile(vm: VM, v: str, image: Image) -> dict:
    # "storageProfile" is 2019-06-01 [doc]; sub-fields with their own dates are gated below.
    return _gated(
        v,
        [
            ("dataDisks", "2019-06-01", []),
            (
                "imageReference",
                "2019-06-01",
                _gated(
                    v,
                    [
                        ("communityGalleryImageId", "2023-07-01", ""),
                        ("exactVersion", "2023-07-01", image.version),
                        ("id", "2019-06-01", ""),
                        ("offer", "2019-06-01", image.offer),
                        ("publisher", "2019-06-01", image.publisher),
                        ("sharedGalleryImageId", "2023-07-01", ""),
                        ("sku", "2019-06-01", image.sku),
                        ("version", "2019-06-01", "latest"),
                    ],
                ),
            ),
            ("osDisk", "2019-06-01", _os_disk(vm, v)),
            ("resourceDisk", "2021-02-01", {"size": RESOURCE_DISK_SIZE}),
        ],
    )


def _os_disk(vm: VM, v: str) -> dict:
    # The [doc] table gives osDisk fields no dates of their own; the encryption key objects are 2021-11-01.
    name = f"{vm.name}_OsDisk_1_{vm.vm_id.replace('-', '')}"  # Azure's default pattern; the suffix is ours
    disk_id = (
        f"/subscriptions/{vm.subscription_id}/resourceGroups/{vm.resource_group}"
        f"/providers/Microsoft.Compute/disks/{name}"
    )
    encryption = _gated(
        v,
        [
            ("diskEncryptionKey", "2021-11-01", _fields(secretUrl="", sourceVault={"id": ""})),
            ("enabled", ALWAYS, "false"),
            ("keyEncryptionKey", "2021-11-01", _fields(keyUrl="", sourceVault={"id": ""})),
        ],
    )
    return _fields(
        caching="ReadWrite",
        createOption="FromImage",
        diffDiskSettings={"option": ""},
        diskSizeGB=OS_DISK_SIZE_GB.get(vm.os_type, "30"),
        encryptionSettings=encryption,
        image={"uri": ""},
        managedDisk=_fields(id=disk_id, storageAccountType=OS_DISK_ACCOUNT_TYPE),
        name=name,
        osType=vm.os_type,
        vhd={"uri": ""},
        writeAcceleratorEnabled="false",
    )


# ------------------------------------------------------------------------------------------------ network


def private_ipv4(vm: VM) -> ipaddress.IPv4Address:
    """The VM's private address: its IMDS address when it has an IPv4 one, else 10.a.b.c derived from its name.

    The derived host part is 4..254 because Azure keeps .0-.3 and .255 of every subnet for itself.
    """
    if vm.imds_address:
        try:
            return ipaddress.IPv4Address(vm.imds_address)
        except ValueError:
            pass  # a host name or an IPv6 address: derive one instead
    digest = hashlib.sha256(vm.name.encode()).digest()
    return ipaddress.IPv4Address(f"10.{digest[0]}.{digest[1]}.{4 + digest[2] % 251}")


def mac_address(vm: VM) -> str:
    """12 upper-case hex digits without separators, as IMDS writes them [doc], derived from the vm_id."""
    return MAC_PREFIX + hashlib.sha256(vm.vm_id.encode()).hexdigest()[:6].upper()


def _network(vm: VM, v: str) -> dict:
    address = private_ipv4(vm)
    subnet = ipaddress.IPv4Network(f"{address}/{SUBNET_PREFIX}", strict=False)
    if v == PREVIEW:
        interface = _preview_interface(vm, address, subnet)
    else:
        # [doc] "Network" table, all 2017-04-02; ipv6.ipAddress is [] without IPv6 [doc] full sample, [capture].
        interface = _fields(
            ipv4=_fields(
                ipAddress=[_fields(privateIpAddress=str(address), publicIpAddress="")],
                subnet=[_fields(address=str(subnet.network_address), prefix=str(subnet.prefixlen))],
            ),
            ipv6={"ipAddress": []},
            macAddress=mac_address(vm),
        )
    return {"interface": [interface]}


def _preview_interface(vm: VM, address: ipaddress.IPv4Address, subnet: ipaddress.IPv4Network) -> dict:
    # The 2017-03-01 preview schema (that version of the [doc] page): lower-case "ipaddress"/"publicip", "mac",
    # and dnsservers; clients of that era still query .../ipv4/ipaddress/0/publicip?api-version=2017-03-01.
    return _fields(
        ipv4=_fields(
            ipaddress=[_fields(ipaddress=str(address), publicip="")],
            subnet=[
                _fields(
                    address=str(subnet.network_address),
                    dnsservers=[{"ipaddress": PLATFORM_DNS}],
                    prefix=str(subnet.prefixlen),
                )
            ],
        ),
        ipv6={"ipaddress": []},
        mac=mac_address(vm),
    )


# ------------------------------------------------------------------------------------------------ route parameters


def leaf(document: Any, path: list[str]) -> Any | None:
    """The node at ``path`` ([doc] "Route parameters": keys, and decimal indexes into arrays), or None.

    Keys are case-sensitive (the 2017-2019 [doc] pages: "All instance metadata queries are case-sensitive").
    Empty segments are skipped, so ``/metadata/instance/`` and ``compute//name`` walk like the paths without
    them (our choice; real IMDS's handling of extra slashes is not documented).
    """
    node = document
    for segment in path:
        if segment == "":
            continue
        if isinstance(node, dict):
            if segment not in node:
                return None
            node = node[segment]
        elif isinstance(node, list):
            # Only canonical non-negative decimals ("0", "12"), not "-1", "+1", "01" or " 1" (our choice).
            if not segment.isdigit() or not segment.isascii() or str(int(segment)) != segment:
                return None
            index = int(segment)
            if index >= len(node):
                return None
            node = node[index]
        else:
            return None  # a leaf has no children
    return node


def is_leaf(node: Any) -> bool:
    return not isinstance(node, (dict, list))


def text_format(value: Any) -> str:
    """What IMDS answers with ``format=text``.

    A leaf: its value as plain text, nothing added (the [doc] samples print just ``0`` or the vmId).
    A non-leaf: one child per line, a child that has children of its own followed by "/"; array children are
    their indexes. A real VM answered ``/metadata/instance?format=text`` with ``compute/`` and ``network/``, and
    ``compute?format=text`` with the leaf names (``location``, ``name``, ... ``vmSize``) [capture]; asking for
    ``tagsList`` as text gives indexes to drill into (azure-docs#39437). Lines are joined by "\\n" without a final
    newline (our choice; the captures do not show it). An empty array lists nothing: "".
    """
    if isinstance(value, dict):
        return "\n".join(_listed(key, child) for key, child in value.items())
    if isinstance(value, list):
        return "\n".join(_listed(str(index), child) for index, child in enumerate(value))
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _listed(name: str, child: Any) -> str:
    return name if is_leaf(child) else name + "/"


# ------------------------------------------------------------------------------------------------ one request


def answer(vm: VM, api_version: str, subpath: str, fmt: str | None, extended: bool = False) -> tuple[int, bytes, bytes]:
    """``GET /metadata/instance{subpath}?api-version=...&format=...[&extended=true]`` for ``vm``: (status, body,
    content type).

    The adapter has already checked the Metadata header, X-Forwarded-For, duplicate parameters and the api-version,
    and caches what this returns (the fleet's VMs do not change while the server runs).
    """
    if api_version not in _VERSION_SET:
        return 400, bad_api_version(list(INSTANCE_API_VERSIONS[:3])), JSON
    if fmt not in (None, "json", "text"):
        return 400, _encode(BAD_FORMAT_ERROR), JSON
    node = leaf(instance_document(vm, api_version, extended), subpath.split("/"))
    if node is None:
        return 404, NOT_FOUND, JSON
    if fmt == "text":
        return 200, text_format(node).encode(), TEXT
    if is_leaf(node):
        return 400, _encode(LEAF_REQUIRES_TEXT_ERROR), JSON
    return 200, _encode(node), JSON


def _encode(value: Any) -> bytes:
    # Compact like the [capture]s; UTF-8 rather than \u escapes (our choice; tags may hold any text).
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
