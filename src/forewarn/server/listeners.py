"""The server's own listeners: the control API and each cloud's API on ``--host``, the metadata endpoint on
``--imds-host``, plus each machine's own metadata port (the fleet's ``imds.port``) and loopback address (its
``imds.address``: ``http://127.0.0.10:8169`` is WestNO_0's metadata endpoint)."""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.requests import ClientDisconnect

from forewarn.net.own_listeners import OwnListeners
from forewarn.server.http1 import listening_socket

log = logging.getLogger("forewarn.server")

ASGIApp = Callable[..., Awaitable[None]]


@dataclass
class Listeners:
    control: tuple[str, int]
    imds: tuple[str, int]
    apis: dict[str, tuple[str, int]] = field(default_factory=dict)  # each cloud's API that is on, by its role
    api_titles: dict[str, str] = field(default_factory=dict)  # by role: "the ARM port"
    vm_ports: dict[int, str] = field(default_factory=dict)
    vm_addresses: dict[str, str] = field(default_factory=dict)
    open_vm_ports: bool = True  # the fleet's per-VM imds.port listeners (serve --vm-ports/--no-vm-ports)
    hosts: str | None = None  # the metadata listeners serve the machines on these hosts only (a glob; serve --hosts)


class ListenError(OSError):
    """One of the server's own listeners could not be bound: which one (``role``: control, imds, a cloud's API such
    as arm, or vm_port with the ``machine`` whose fleet entry names the port) and where, so that the message can name
    the address and the setting that chose it."""

    def __init__(self, role: str, address: tuple[str, int], cause: OSError, machine: str | None = None):
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.role = role
        self.address = address
        self.machine = machine


def listen(role: str, address: tuple[str, int], machine: str | None = None) -> socket.socket:
    try:
        return listening_socket(*address)
    except (OSError, OverflowError) as error:  # OverflowError: a port outside 0-65535
        cause = error if isinstance(error, OSError) else OSError(None, str(error))
        raise ListenError(role, address, cause, machine) from None


class Machine(Protocol):
    """What the listeners need of any cloud's machine: where its own metadata endpoint answers."""

    @property
    def name(self) -> str: ...
    @property
    def imds_port(self) -> int | None: ...
    @property
    def imds_address(self) -> str | None: ...


@dataclass
class Bound:
    management: list[socket.socket]  # the control API's, then each cloud API's
    metadata: list[socket.socket]

    def close(self) -> None:
        for opened in [*self.management, *self.metadata]:
            opened.close()


def bind_own(listeners: Listeners) -> Bound:
    """The server's own sockets: the control API's, each cloud API's and the metadata endpoint's. Bound before the
    store is opened: a server whose port is taken stops there, before it creates a database, takes a shared
    database's lock or initializes it."""
    bound = Bound([listen("control", listeners.control)], [])
    try:
        for role, address in listeners.apis.items():
            bound.management.append(listen(role, address))
        bound.metadata.append(listen("imds", listeners.imds))
    except ListenError:
        bound.close()
        raise
    return bound


def bind_machines(listeners: Listeners, machines: Sequence[Machine], bound: Bound) -> None:
    """Each machine's own sockets, added to ``bound`` (the fleet names them: they are known once the store is
    open). A machine's own port (the fleet's ``imds.port``) that cannot be bound, or that is one of this server's
    own ports, stops the start (:class:`ListenError`, every socket closed), and so does its own loopback address
    when another socket holds that address's port: skipped, its agent would read whatever answers there, another
    forewarn's documents or this server's API. A loopback address the system does not have is skipped with a
    warning (nothing else answers there then)."""
    own_ports = own_port_titles(listeners)
    try:
        for machine in machines:
            bind_machine(listeners, machine, own_ports, bound)
    except ListenError:
        bound.close()
        raise


def own_port_titles(listeners: Listeners) -> dict[int, str]:
    """This server's own listening ports, each with what listens there ("the EC2 API")."""
    apis = reversed(listeners.apis.items())  # of two APIs given one port, the first one's name
    titles = {address[1]: listeners.api_titles.get(role, role) for role, address in apis}
    titles[listeners.imds[1]] = "the metadata endpoint"
    titles[listeners.control[1]] = "the control API"
    return titles


def bind_machine(listeners: Listeners, machine: Machine, own_ports: dict[int, str], bound: Bound) -> None:
    name, port, address = machine.name, machine.imds_port, machine.imds_address
    if port is not None and listeners.open_vm_ports:
        where = (listeners.imds[0], port)
        if port in own_ports:
            raise ListenError(
                "vm_port", where, OSError(None, f"it is this server's own port too ({own_ports[port]})"), name
            )
        bound.metadata.append(listen("vm_port", where, name))
        listeners.vm_ports[port] = name
    if address is not None and address != listeners.imds[0]:
        if ipaddress.ip_address(address).is_loopback and listeners.imds[0] not in ("0.0.0.0", "::"):
            bind_machine_address(listeners, name, address, bound)


def bind_machine_address(listeners: Listeners, name: str, address: str, bound: Bound) -> None:
    try:
        bound.metadata.append(listening_socket(address, listeners.imds[1]))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise ListenError("vm_address", (address, listeners.imds[1]), error, name) from None
        log.warning("%s: cannot listen on %s (%s); skipped", name, address, error.strerror)
        return
    listeners.vm_addresses[address] = name


class ByPort:
    """One ASGI app per listening port, for the surfaces uvicorn serves."""

    def __init__(self, apps: dict[int, ASGIApp]):
        self.apps = apps

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        port = scope["server"][1]
        try:
            await self.apps[port](scope, receive, send)
        except ClientDisconnect:  # not a failure of ours: one line, where uvicorn would log a traceback as an error
            log.info(
                "%s %s on port %d: the client closed its connection before its request's body had arrived; "
                "nothing was answered",
                scope.get("method", scope["type"]),
                scope["path"],
                port,
            )


def own_listeners(bound: Bound, listeners: Listeners) -> OwnListeners:
    """Every port this server listens on, named for the messages of refused outgoing requests."""
    roles = {port: f"the metadata endpoint of {name}" for port, name in listeners.vm_ports.items()}
    roles.update(own_port_titles(listeners))
    return OwnListeners.of([*bound.management, *bound.metadata], roles)
