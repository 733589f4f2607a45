"""Who may call the Azure management surfaces: bearer tokens mapped to principals with role assignments.

Off by default: with no access file, every management call is allowed and no token is needed (a local emulator's
usual stance). With ``forewarn serve --access FILE`` every call to the ARM port must
carry ``Authorization: Bearer TOKEN`` of a configured principal, and each needs a role that allows its action at a
scope that contains its target:

```yaml
principals:
  - name: maintenance-controller          # shown in 403 messages
    token: controller-secret              # the bearer token it sends
    roles:
      - {role: Scheduled Events Contributor, scope: /subscriptions/6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01}
  - name: ops
    token: ops-secret
    roles: [{role: Owner, scope: /subscriptions/6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01/resourceGroups/contoso-rg}]
```

Actions follow ARM's names (``Microsoft.Compute/virtualMachines/read``, ``.../write``, ``.../delete``,
``.../action``); a role is a list of action patterns where ``*`` matches any run of characters. The exact action list
of "Scheduled Events Contributor" is not public; ROLES below is our reading of "read or acknowledge the
scheduled events".
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forewarn import yamlfile
from forewarn.yamlfile import YamlFileError

SCHEDULED_EVENTS_CONTRIBUTOR = "Scheduled Events Contributor"

ROLES: dict[str, tuple[str, ...]] = {
    "Owner": ("*",),
    "Contributor": ("*",),
    "Reader": ("*/read",),  # but not scheduled events: NOT_ACTIONS
    # Reference 5.4: built-in role b67fe603-310e-4889-b9ee-8257d09d353d, "to read or acknowledge the scheduled
    # events"; querying them goes through Resource Graph.
    SCHEDULED_EVENTS_CONTRIBUTOR: (
        "Microsoft.Maintenance/scheduledevents/read",
        "Microsoft.Maintenance/scheduledevents/acknowledge/action",
        "Microsoft.ResourceGraph/resources/read",
    ),
    "EventGrid Contributor": ("Microsoft.EventGrid/*",),
}
# "Scheduled Events in Event Grid": "A user must have the ScheduledEventContributor role to read or acknowledge the scheduled events", so
# Reader's */read stops short of them (Owner and Contributor, which can assign themselves any role, keep them).
NOT_ACTIONS: dict[str, tuple[str, ...]] = {"Reader": ("Microsoft.Maintenance/scheduledevents/*",)}
# the spelling of "Scheduled Events in Event Grid"
ROLE_ALIASES = {
    "ScheduledEventContributor": SCHEDULED_EVENTS_CONTRIBUTOR,
    "ScheduledEventsContributor": SCHEDULED_EVENTS_CONTRIBUTOR,
}
ROLE_IDS = {  # role definition ids, shown in listings and accepted in the file
    "Owner": "8e3af657-a8ff-443c-a75c-2fe8c4bcb635",
    "Contributor": "b24988ac-6180-42a0-ab88-20f7382dd24c",
    "Reader": "acdd72a7-3385-48ef-bd42-f606fba81ae7",
    SCHEDULED_EVENTS_CONTRIBUTOR: "b67fe603-310e-4889-b9ee-8257d09d353d",
    "EventGrid Contributor": "1e241071-0855-49ea-94dc-649edcd759de",
}


class AccessFileError(Exception):
    """The access file was refused; the message says where and why."""


@dataclass(frozen=True)
class Assignment:
    role: str
    scope: str  # lower case, no trailing slash; "/" for the whole tenant


@dataclass(frozen=True)
class Principal:
    name: str
    object_id: str
    assignments: tuple[Assignment, ...] = field(default=())

    def can(self, action: str, scope: str) -> bool:
        """Whether a role assigned at ``scope`` or above it allows ``action``."""
        target = _normal(scope)
        return any(_contains(a.scope, target) and _allows(a.role, action) for a in self.assignments)

    def scopes_for(self, action: str) -> list[str]:
        """The scopes at which a role allows ``action`` ("/" for the whole tenant)."""
        return sorted({a.scope for a in self.assignments if _allows(a.role, action)})


def _matches(action: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in patterns)


def _allows(role: str, action: str) -> bool:
    return _matches(action, ROLES[role]) and not _matches(action, NOT_ACTIONS.get(role, ()))


def _normal(scope: str) -> str:
    scope = "/" + scope.strip().strip("/").lower()
    return scope


def _contains(outer: str, inner: str) -> bool:
    return outer == "/" or inner == outer or inner.startswith(outer + "/")


class _RoleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str
    scope: str = Field(pattern=r"^/")


class _PrincipalSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    token: str = Field(min_length=8)
    object_id: str | None = None
    roles: list[_RoleSpec] = Field(default_factory=list)


class _AccessSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    principals: list[_PrincipalSpec]


@dataclass(frozen=True)
class AccessControl:
    """Principals by the hash of their token (tokens are compared in constant time, never logged)."""

    principals: dict[bytes, Principal]

    def principal_for(self, token: str) -> Principal | None:
        digest = _digest(token)
        for known, principal in self.principals.items():
            if hmac.compare_digest(known, digest):
                return principal
        return None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def load_access(path: str | Path) -> AccessControl:
    try:
        data = yamlfile.load(path, "access file", yamlfile.MAX_SMALL_FILE_BYTES).data
        spec = _AccessSpec.model_validate(data)
    except YamlFileError as error:
        raise AccessFileError(str(error)) from None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise AccessFileError(f"{path}: {problems}") from None
    principals: dict[bytes, Principal] = {}
    by_id = {role_id: name for name, role_id in ROLE_IDS.items()}
    for index, item in enumerate(spec.principals):
        assignments = []
        for role in item.roles:
            name = ROLE_ALIASES.get(role.role, by_id.get(role.role.lower(), role.role))
            if name not in ROLES:
                raise AccessFileError(
                    f"{path}: principals[{index}].roles: unknown role {role.role!r}; known: {', '.join(ROLES)}"
                )
            assignments.append(Assignment(name, _normal(role.scope)))
        digest = _digest(item.token)
        if digest in principals:
            raise AccessFileError(f"{path}: principals[{index}]: two principals share a token")
        object_id = item.object_id or str(uuid.uuid5(uuid.NAMESPACE_URL, f"forewarn-principal:{item.name}"))
        principals[digest] = Principal(item.name, object_id, tuple(assignments))
    return AccessControl(principals)
