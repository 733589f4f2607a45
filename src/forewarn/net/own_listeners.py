"""This server's own listeners, and the guard that keeps its outgoing requests away from them.

forewarn sends requests to URLs its users give it: Event Grid validation handshakes and deliveries to a
subscription's endpoint (which anyone allowed to create subscriptions chooses), AWS Health webhooks. Pointed at
forewarn itself, such a request would drive its own surfaces (a handshake POSTed to the control API's
``/v1/clock/next`` moves the clock). So every outgoing request first resolves its host, and is refused when any
address it resolves to is one of this machine's (loopback, 0.0.0.0/::, or an address of one of its interfaces)
at a port this server listens on. Deliberately broad: a listener bound to 127.0.0.1 is not reached through 127.0.0.2,
but no webhook of forewarn's own fleet is expected there either, and a rule without exceptions has fewer holes.

For plain HTTP, the request is then sent to the address that was checked (with the original ``Host``), so a name
whose DNS answer changes between the check and the connection (DNS rebinding) cannot slip through. HTTPS is checked
but not pinned (the certificate names the host): forewarn's listeners speak plain HTTP, so a TLS connection to one
of them fails before any request is read.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


class SelfTarget(Exception):
    """The URL leads back to this server; the message says which listener."""


@dataclass(frozen=True)
class Destination:
    """Where to send a request: the URL (its host replaced by the checked address, for plain HTTP) and the headers to
    add (the original ``Host``)."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _ip_version(text: str) -> int:
    """4 or 6; 9 for what is no address, so that it sorts last."""
    address = _address(text)
    return address.version if address is not None else 9


def is_local_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Loopback, unspecified (a connection to 0.0.0.0 reaches this machine), or assigned to one of this machine's
    interfaces (which is exactly when a socket can be bound to it)."""
    if address.is_loopback or address.is_unspecified:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
        return True
    except OSError:
        return False


class OwnListeners:
    """The ports this server listens on (``roles``: port → what serves it, for messages)."""

    def __init__(self, roles: dict[int, str]):
        self.roles = dict(roles)

    @classmethod
    def of(cls, sockets: Iterable[socket.socket], roles: dict[int, str] | None = None) -> OwnListeners:
        """From the bound sockets themselves (so a port chosen by the system is known too)."""
        named = roles or {}
        return cls({sock.getsockname()[1]: named.get(sock.getsockname()[1], "a listener") for sock in sockets})

    def own(self, address: str, port: int) -> str | None:
        """What of this server ``address:port`` reaches, or None."""
        role = self.roles.get(port)
        parsed = _address(address)
        if role is None or parsed is None or not is_local_address(parsed):
            return None
        return role

    async def destination(self, url: str) -> Destination:
        """Where to send a request for ``url``; SelfTarget when it would reach this server. A host that does not
        resolve is left to the HTTP client, which fails on it as it always did."""
        try:
            parts = urlsplit(url)
            # The root's dot ("localhost.", "127.0.0.1.") names the same host, but neither parses as an address nor
            # resolves everywhere: checked without it, or a lookup that fails here could succeed for the client.
            host, port = (parts.hostname or "").rstrip("."), parts.port or DEFAULT_PORTS.get(parts.scheme)
        except ValueError:
            return Destination(url)
        if not host or port is None:
            return Destination(url)
        if _address(host) is not None:
            addresses = [host]
        else:
            try:
                found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except (socket.gaierror, UnicodeError, OSError):
                return Destination(url)
            # An IP socket address starts with its host as text (only AF_UNIX ones, never asked for here, differ).
            addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        for address in addresses:
            role = self.own(address, port)
            if role is not None:
                raise SelfTarget(
                    f"{url} leads to this forewarn server itself ({role}, port {port}, through "
                    f"{address}); forewarn never sends its own requests to itself."
                )
        if parts.scheme != "http" or _address(host) is not None or not addresses:
            return Destination(url)
        # Pinned to the checked address; IPv4 first, as most local receivers listen on 127.0.0.1 only.
        chosen = sorted(addresses, key=_ip_version)[0]
        literal = f"[{chosen}]" if ":" in chosen else chosen
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (f"{userinfo}@" if userinfo else "") + literal + (f":{parts.port}" if parts.port else "")
        original = host + (f":{parts.port}" if parts.port else "")
        return Destination(urlunsplit(parts._replace(netloc=netloc)), {"host": original})


def own_url(address: tuple[str, int]) -> str:
    """How the server's own clients (scenario runs) reach one of its ports: a wildcard address by loopback."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(address[0], address[0])
    return f"http://[{host}]:{address[1]}" if ":" in host else f"http://{host}:{address[1]}"
