"""EC2's Query protocol on the way in: a request's parameters (query string, then form body), read within bounds;
booleans, timestamps, instance IDs and the numbered ``Name.N`` members the actions take."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qsl

from starlette.requests import Request

from forewarn.aws.ec2_api.protocol import Ec2Error, bad_value
from forewarn.aws.ec2_api.sigv4 import signed_region
from forewarn.core import times as core_times
from forewarn.core.errors import CoreError

MAX_FIELDS = 10_000  # form fields per request

# A member number of a list parameter (``InstanceId.3``): 1 to 999999.
N = r"([1-9]\d{0,5})"

# A well-formed instance ID: the old 8-hex-digit form or the 17-digit one (error-code page, InvalidInstanceID.Malformed).
WELL_FORMED_ID = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$")

# Parameters that sign a request (SigV4 presigned query, SigV2); they are never "unknown".
AUTH_PARAMS = frozenset(
    {
        "AWSAccessKeyId",
        "Signature",
        "SignatureMethod",
        "SignatureVersion",
        "Timestamp",
        "Expires",
        "SecurityToken",
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
        "X-Amz-Security-Token",
        "X-Amz-Content-Sha256",
    }
)


@dataclass
class Params:
    """A request's parameters: the query string's, then the form body's; the first occurrence of a name wins."""

    values: dict[str, str]
    region: str | None  # from the SigV4 credential scope; None when the request is not signed

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def boolean(self, name: str) -> bool:
        text = self.values.get(name)
        if text is None:
            return False
        lowered = text.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise bad_value(name, text, "Expecting a boolean (true or false).")

    def check_known(self, known: Callable[[str], bool]) -> None:
        for name in self.values:
            if name not in AUTH_PARAMS and name not in ("Action", "Version") and not known(name):
                raise Ec2Error("UnknownParameter", f"The parameter {name} is not recognized")

    def numbered(self, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
        """The values of ``Name.N`` parameters (``pattern`` has one group, N), by N."""
        return sorted((int(match.group(1)), value) for name, value, match in self._matching(pattern))

    def numbered_fields(self, pattern: re.Pattern[str]) -> list[tuple[int, str, str]]:
        """``Name.N.Field`` parameters (``pattern``: groups N and Field) as (N, Field, value), by N then Field."""
        return sorted((int(match.group(1)), match.group(2), value) for name, value, match in self._matching(pattern))

    def doubly_numbered(self, pattern: re.Pattern[str]) -> list[tuple[int, int, str]]:
        """``Name.N.Member.M`` parameters (``pattern``: groups N and M) as (N, M, value), by N then M."""
        return sorted(
            (int(match.group(1)), int(match.group(2)), value) for name, value, match in self._matching(pattern)
        )

    def doubly_numbered_fields(self, pattern: re.Pattern[str]) -> list[tuple[int, int, str, str]]:
        """``Name.N.Member.M.Field`` parameters (groups N, M and Field) as (N, M, Field, value), in that order."""
        return sorted(
            (int(match.group(1)), int(match.group(2)), match.group(3), value)
            for name, value, match in self._matching(pattern)
        )

    def _matching(self, pattern: re.Pattern[str]) -> list[tuple[str, str, re.Match[str]]]:
        found = []
        for name, value in self.values.items():
            match = pattern.match(name)
            if match:
                found.append((name, value, match))
        return found


def check_instance_ids(instance_ids: list[str]) -> None:
    for instance_id in instance_ids:
        if not WELL_FORMED_ID.match(instance_id):
            raise Ec2Error("InvalidInstanceID.Malformed", f'Invalid id: "{instance_id}"')


def parse_time(text: str) -> datetime | None:
    """An ISO 8601 date and time (UTC when it names no offset); None when it is not one."""
    try:
        return core_times.parse_time(text).astimezone(UTC)
    except (CoreError, OverflowError):
        return None


async def read_params(request: Request) -> Params:
    values: dict[str, str] = {}
    sources = [request.scope.get("query_string", b"").decode("latin-1")]
    if request.method == "POST":
        content_type = request.headers.get("content-type", "application/x-www-form-urlencoded").lower()
        body = await request.body()
        if body.strip():
            if not content_type.startswith("application/x-www-form-urlencoded"):
                raise Ec2Error(
                    "InvalidParameterValue",
                    f"The request body must be application/x-www-form-urlencoded, not '{content_type}'",
                )
            sources.append(body.decode("utf-8", errors="replace"))
    for source in sources:
        try:
            pairs = parse_qsl(
                source, keep_blank_values=True, encoding="utf-8", errors="replace", max_num_fields=MAX_FIELDS
            )
        except ValueError:
            raise Ec2Error("MalformedQueryString", f"The request has more than {MAX_FIELDS} parameters") from None
        for name, value in pairs:
            values.setdefault(name, value)
    return Params(values, signed_region(request.headers.get("authorization"), values))
