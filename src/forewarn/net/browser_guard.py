"""What the management ports (control API, ARM, EC2 Query API) refuse so that a web page cannot drive them.

A browser lets any page send "simple" requests to any address, loopback included: a form POST, a ``text/plain``
fetch, an ``<img>`` GET. The answer is unreadable to the page, but the request has its effect (the clock moves, a VM
restarts). And through DNS rebinding a page's own name can come to point at 127.0.0.1, so that the browser treats
forewarn's answers as the page's own. What tells these requests apart from a real client's:

- ``Host``: a rebinding page's requests carry the page's name. Only loopback names, IP addresses (a rebinding attack
  needs a name it controls; an address in ``Host`` means the browser was pointed at the address itself, and then the
  ``Origin`` rule applies), the server's ``--host`` when that is a name, and the operator's ``--allowed-host`` names
  are answered.
- ``Origin``: browsers send it with every cross-origin request but simple GETs, and with every POST; real clients
  (SDKs, curl) do not send it. It must name this server (the ``Host`` the request came to).
- ``Sec-Fetch-Site``: browsers since 2020-2023 mark every request with where it came from; ``cross-site`` and
  ``same-site`` (another port of localhost is "same site") are refused, ``same-origin`` and ``none`` (typed in the
  address bar) are not.
- ``Content-Type`` on the JSON APIs: form and ``text/plain`` bodies are the ones a page can send without asking the
  server first (a CORS preflight, which forewarn never approves); a JSON API has no use for them.

Each surface turns a :class:`Refusal` into its own error shape.

The metadata listeners are stricter (:class:`MetadataGuard`): a metadata service is asked by programs on the VM, never
by a web page, so any mark of a browser is refused there, same-origin ones included.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

# The content types a page may send cross-origin without a preflight (the Fetch standard's CORS-safelisted ones).
SIMPLE_CONTENT_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
REFUSED_FETCH_SITES = frozenset({"cross-site", "same-site"})
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Refusal:
    code: str  # InvalidHost, CrossOriginRequest or UnsupportedMediaType; surfaces with their own codes map these
    status: int
    message: str


def split_host(value: str) -> tuple[str, int | None] | None:
    """``Host``'s name (lower case, without a trailing dot or IPv6 brackets) and port; None when malformed."""
    try:
        parts = urlsplit("//" + value.strip())
        name, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not name or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return name.rstrip("."), port


def is_loopback_name(name: str) -> bool:
    """``localhost`` and its subdomains (RFC 6761: they resolve to loopback, and browsers resolve them so
    themselves) and loopback addresses."""
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def listens_beyond_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` can be reached from other machines (0.0.0.0, ::, an interface's address,
    or a name that is not localhost's)."""
    return not is_loopback_name(host)


class HostNames:
    """The names a management port answers to in ``Host``: IP addresses and loopback names always; ``own`` (the
    listening address, when it is a name); and the operator's ``allowed``, where ``*`` allows any name and
    ``.example.com`` a domain and its subdomains. The machine's host name is not assumed: a short name can be
    resolved through a search domain to anything."""

    def __init__(self, allowed: Iterable[str] = (), own: Iterable[str] = ()):
        self.any = False
        self.names: set[str] = set()
        self.domains: list[str] = []
        for entry in [*own, *allowed]:
            entry = entry.strip().lower().rstrip(".")
            if entry == "*":
                self.any = True
            elif entry.startswith("."):
                self.domains.append(entry)
            elif entry:
                self.names.add(entry)

    @classmethod
    def for_server(cls, listening: str, allowed: Iterable[str] = ()) -> HostNames:
        return cls(allowed, [listening] if listening else [])

    def allows(self, name: str) -> bool:
        name = name.lower().rstrip(".")
        if self.any or name in self.names or is_loopback_name(name):
            return True
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            pass
        return any(name == domain[1:] or name.endswith(domain) for domain in self.domains)


class BrowserGuard:
    """The checks of one port. ``json_api``: the port takes JSON bodies only (the control API, ARM), so form and
    ``text/plain`` writes are refused; the EC2 Query API's protocol is form bodies, so it relies on the rest."""

    def __init__(self, hosts: HostNames, json_api: bool):
        self.hosts = hosts
        self.json_api = json_api

    def check(self, method: str, headers: Mapping[str, str]) -> Refusal | None:
        """``headers``: case-insensitive (Starlette's ``Headers``), or lower-case keys."""
        host = headers.get("host")
        parsed = split_host(host) if host is not None else None
        if host is not None and (parsed is None or not self.hosts.allows(parsed[0])):
            return Refusal(
                "InvalidHost",
                400,
                f"Host '{host}' is not a name this server answers to (a DNS rebinding "
                "guard): use a loopback name or an IP address, or start the server "
                "with --allowed-host NAME.",
            )
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, parsed):
            return Refusal(
                "CrossOriginRequest",
                403,
                f"Requests from web pages of another origin ({origin}) are "
                "refused: forewarn's management ports take requests from "
                "clients, not from browsers visiting other sites.",
            )
        site = headers.get("sec-fetch-site", "").strip().lower()
        if site in REFUSED_FETCH_SITES:
            return Refusal(
                "CrossOriginRequest",
                403,
                f"Requests a browser marks Sec-Fetch-Site: {site} are "
                "refused: forewarn's management ports take requests from "
                "clients, not from browsers visiting other sites.",
            )
        if self.json_api and method.upper() in WRITES:
            media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media_type in SIMPLE_CONTENT_TYPES:
                return Refusal(
                    "UnsupportedMediaType",
                    415,
                    f"The content media type '{media_type}' is not supported. Only 'application/json' is supported.",
                )
        return None


def _same_origin(origin: str, host: tuple[str, int | None] | None) -> bool:
    if host is None:
        return False
    try:
        parts = urlsplit(origin.strip())
        name, port = parts.hostname, parts.port
    except ValueError:
        return False
    if parts.scheme not in DEFAULT_PORTS or not name:  # "null" (a sandboxed frame, a file), or no origin at all
        return False
    default = DEFAULT_PORTS[parts.scheme]
    return (name.rstrip("."), port or default) == (host[0], host[1] or default)


# The names clients on a VM put in ``Host`` for the metadata services beyond its address (169.254.169.254,
# fd00:ec2::254): Compute Engine's "metadata.google.internal" and its short "metadata" ("About VM metadata"), EC2's
# "instance-data" (the name Amazon's DNS resolves on an instance).
METADATA_NAMES = ("metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal")
GUARDED_HEADERS = frozenset({b"host", b"origin", b"sec-fetch-site"})
UNDERSCORE = ord("_")
# Distinct Host values whose verdict is kept; a scan of more names is judged afresh each time.
KNOWN_HOSTS = 256
# Distinct header sets (of at most 2 KB each) whose verdict is kept; more are judged afresh each time.
KNOWN_HEADER_SETS = 1024


class MetadataGuard:
    """What the metadata listeners refuse, in any surface's paths: a request a browser made (``Origin``, or
    ``Sec-Fetch-Site`` other than ``none``, which marks a typed address), a ``Host`` that is not a name of the service
    (DNS rebinding) or that is given twice, and a header name with an underscore (front ends disagree on it: nginx and
    Apache drop it, CGI-style ones read ``X_Forwarded_For`` as ``X-Forwarded-For``; refused, it cannot slip a header
    past a check). Real metadata services are reached by name or address from the VM only and need a header no page
    can send across origins; forewarn's listeners are reachable from a browser on the same machine, hence this."""

    def __init__(self, hosts: HostNames):
        self.hosts = hosts
        self._verdicts: dict[bytes, bool] = {}
        self._by_headers: dict[tuple[tuple[bytes, bytes], ...], tuple[Refusal | None]] = {}

    @classmethod
    def for_listener(cls, listening: str, allowed: Iterable[str] = ()) -> MetadataGuard:
        return cls(HostNames.for_server(listening, [*allowed, *METADATA_NAMES]))

    def check(self, headers: tuple[tuple[bytes, bytes], ...]) -> Refusal | None:
        """``headers``: as the metadata server parses them, names in lower case. The verdict is a function of the
        headers alone: kept for header sets an agent sends again and again."""
        judged = self._by_headers.get(headers)
        if judged is None:
            judged = (self._judge(headers),)
            if len(self._by_headers) < KNOWN_HEADER_SETS and sum(len(n) + len(v) for n, v in headers) <= 2048:
                self._by_headers[headers] = judged
        return judged[0]

    def _judge(self, headers: tuple[tuple[bytes, bytes], ...]) -> Refusal | None:
        hosts = 0
        for name, value in headers:
            if name not in GUARDED_HEADERS:
                if UNDERSCORE in name:  # an int: ``b"_" in name`` raises and clears a TypeError inside, every time
                    return Refusal(
                        "InvalidHeader",
                        400,
                        f"Header names with an underscore ({name.decode('latin-1')}) are refused: front ends "
                        "disagree on whether they mean the name with a hyphen.",
                    )
            elif name == b"host":
                hosts += 1
                if hosts > 1:
                    return Refusal("InvalidHost", 400, "A request with more than one Host header is refused.")
                if not self._allows(value):
                    return Refusal(
                        "InvalidHost",
                        400,
                        f"Host '{value.decode('latin-1')}' is not a name of the metadata service (a DNS rebinding "
                        "guard): use its address or one of its names, or start the server with --allowed-host NAME.",
                    )
            elif name == b"origin" or value.strip().lower() != b"none":  # Origin, or Sec-Fetch-Site not none
                return Refusal(
                    "CrossOriginRequest",
                    403,
                    "Requests from web pages are refused: the metadata service answers programs on the VM.",
                )
        return None

    def _allows(self, value: bytes) -> bool:
        verdict = self._verdicts.get(value)
        if verdict is None:
            parsed = split_host(value.decode("latin-1"))
            verdict = parsed is not None and self.hosts.allows(parsed[0])
            if len(self._verdicts) < KNOWN_HOSTS:
                self._verdicts[value] = verdict
        return verdict
