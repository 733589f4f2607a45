"""Pages of a Describe action: ``MaxResults`` items in ID order, and a ``NextToken`` to continue after the last one.
A token names the ID to resume after, bound to the query it continues (a digest of its parameters) and signed with
the fleet's seed, so a token made up, altered or reused with other filters is refused (InvalidNextToken)."""

from __future__ import annotations

import base64
import bisect
import hashlib
import hmac
import json
from collections.abc import Callable

from forewarn.aws.ec2_api.protocol import Ec2Error


def query_digest(*parts: object) -> str:
    """A digest of what a query asks (its filters, IDs...), given as JSON-able parts."""
    canonical = json.dumps(parts, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _mac(secret: str, payload: str) -> str:
    return hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()[:16]


def next_token(secret: str, after: str, digest: str) -> str:
    payload = f"1|{after}|{digest}"
    raw = f"{payload}|{_mac(secret, payload)}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def resume_after(secret: str, token: str, digest: str) -> str:
    """The ID a NextToken continues after; InvalidNextToken unless it is ours, for this query."""
    invalid = Ec2Error("InvalidNextToken", "The specified NextToken is not valid.")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise invalid from None
    parts = raw.split("|")
    if len(parts) != 4 or parts[0] != "1":
        raise invalid
    payload = "|".join(parts[:3])
    if not hmac.compare_digest(parts[3], _mac(secret, payload)) or parts[2] != digest:
        raise invalid
    return parts[1]


def page(
    candidates: list[str], after: str, limit: int, render: Callable[[str], str | None]
) -> tuple[list[str], str | None]:
    """The items of one page: ``render`` of each sorted candidate ID past ``after`` (None: not shown), up to
    ``limit``; and the ID the next page continues after (None: this is the last page). A resumed page starts by
    bisection, so each item costs the same wherever the page is."""
    items: list[str] = []
    start = bisect.bisect_right(candidates, after) if after else 0
    for index in range(start, len(candidates)):
        item = render(candidates[index])
        if item is None:
            continue
        items.append(item)
        if len(items) == limit:
            return items, candidates[index] if index + 1 < len(candidates) else None
    return items, None
