"""The registry: which clouds this server has, in the order their components are built.

The one module outside a cloud's package that imports it, and only when the clouds are first asked for, so that a
command which needs none of them (``forewarn --help``, a client command) never loads one. The order matters: the
engine builds the components in this order, and deadlines due at one instant fire in the order they were set.

More clouds come from ``FOREWARN_CLOUDS``: ``module:attribute`` entries, comma-separated, each naming an object that
implements :class:`~forewarn.cloud.Cloud` (a cloud of one's own, kept outside this package; every process reads the
variable, so a server started from a shell that sets it has the cloud too).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from forewarn.core.component import ComponentSource as Cloud

BUILT_IN = ("forewarn.azure.cloud:AZURE", "forewarn.aws.cloud:AWS", "forewarn.gcp.cloud:GCP")
EXTRA_VARIABLE = "FOREWARN_CLOUDS"


class UnknownCloud(LookupError):
    """A cloud was asked for by a name no registered cloud has."""


def entries() -> tuple[str, ...]:
    extra = [entry.strip() for entry in os.environ.get(EXTRA_VARIABLE, "").split(",") if entry.strip()]
    return (*BUILT_IN, *extra)


@functools.cache
def clouds() -> tuple[Cloud, ...]:
    """Every registered cloud, loaded once per process."""
    return loaded(entries())


def loaded(entries: Sequence[str]) -> tuple[Cloud, ...]:
    loaded = [load(entry) for entry in entries]
    names = [cloud.name for cloud in loaded]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"two clouds registered under one name: {', '.join(twice)} ({EXTRA_VARIABLE}?)")
    return tuple(loaded)


def load(entry: str) -> Cloud:
    module_name, _, attribute = entry.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"a cloud entry is module:attribute, not {entry!r} ({EXTRA_VARIABLE}?)")
    cloud = getattr(importlib.import_module(module_name), attribute, None)
    if cloud is None:
        raise ValueError(f"{module_name} has no {attribute!r}: the cloud entry {entry!r} names nothing")
    return cast("Cloud", cloud)


def cloud_named(name: str, among: Sequence[Cloud] | None = None) -> Cloud:
    registered = clouds() if among is None else among
    for cloud in registered:
        if cloud.name == name:
            return cloud
    known = ", ".join(cloud.name for cloud in registered)
    raise UnknownCloud(f"no cloud named {name!r}: this server has {known}")
