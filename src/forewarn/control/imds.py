"""The control API's routes for the metadata listener's callers: which address stands for which machine."""

from __future__ import annotations

from typing import Protocol

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from forewarn.cloud import registered
from forewarn.control.models import ERRORS
from forewarn.net.callers import CallerResolver, Machine, canonical_address


class CallerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    machine: str = Field(
        description="a VM's name, an EC2 instance's id (or its Name tag if unique), a Compute Engine instance's name"
    )


class ResolvesCallers(Protocol):
    """A metadata surface that answers as the machine behind each connection."""

    @property
    def resolver(self) -> CallerResolver: ...


def name_and_kind(machine: Machine) -> tuple[str, str]:
    """The machine's name and kind, from the cloud whose machine it is."""
    for cloud in registered():
        named = cloud.machine_name_and_kind(machine)
        if named is not None:
            return named
    raise LookupError(f"no registered cloud has a machine of type {type(machine).__name__}")


def caller_out(address: str, machine: Machine, listener: tuple[str, int] | None) -> dict:
    name, kind = name_and_kind(machine)
    return {
        "address": address,
        "machine": name,
        "kind": kind,
        "imds": None if listener is None else {"host": listener[0], "port": listener[1]},
    }


def imds_router(imds: ResolvesCallers, listener: tuple[str, int] | None = None) -> APIRouter:
    router = APIRouter()
    resolver = imds.resolver

    @router.get("/v1/imds/callers", tags=["imds"])
    async def callers():
        """Addresses registered as machines while the server runs (by ``forewarn sandbox``)."""
        return [caller_out(address, machine, listener) for address, machine in resolver.registered().items()]

    @router.put("/v1/imds/callers/{address}", tags=["imds"], responses=ERRORS)
    async def register_caller(address: str, body: CallerIn):
        """A connection to the metadata endpoint from ``address`` is from now on the machine named: what the sandbox's
        relay registers for each namespace. The answer says where the metadata listener is. In memory only: a
        restart forgets it."""
        machine = resolver.register(address, body.machine)
        return caller_out(canonical_address(address), machine, listener)

    @router.delete("/v1/imds/callers/{address}", tags=["imds"], responses=ERRORS)
    async def unregister_caller(address: str):
        return {"removed": resolver.unregister(address)}

    return router
