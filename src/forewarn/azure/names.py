"""The names Azure gives virtual machines and scale sets, by the rule of Microsoft's "Naming rules and restrictions for
Azure resources" (Microsoft.Compute: virtualMachines, virtualMachineScaleSets): 1-15 characters for Windows, 1-64 for
Linux; letters, digits, underscores, periods and hyphens; not starting with an underscore (nor a period or hyphen: ARM
wants a letter or digit first), not ending with a period or a hyphen."""

from __future__ import annotations

import re

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
MAX_LENGTH = {"Windows": 15, "Linux": 64}


def name_problem(name: str, os_type: str | None = None, what: str = "a VM name") -> str | None:
    """Why ``name`` cannot name an Azure VM (or scale set) of ``os_type`` (the Linux rule when it is not known), or
    None when it can."""
    limit = MAX_LENGTH.get(os_type or "Linux", MAX_LENGTH["Linux"])
    if not 1 <= len(name) <= limit:
        return f"{what} is 1-{limit} characters for {os_type or 'Linux'}, not {len(name)}"
    if _NAME.fullmatch(name) is None:
        return (
            f"{what} is letters, digits, underscores, periods and hyphens, starting with a letter or digit and ending "
            f"with a letter, digit or underscore: {name!r} is not"
        )
    return None
