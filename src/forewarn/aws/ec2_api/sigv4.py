"""AWS Signature Version 4 on EC2 requests: the ``Authorization`` header and presigned URLs read strictly, the region a
request is signed for, and (with credentials configured) the signature checked. botocore recomputes signatures and is
imported only when a verifier is built, so a server without EC2 credentials never loads it."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request

from forewarn.aws.ec2_api.protocol import Ec2Error, missing, text
from forewarn.extras import SIGV4, ExtraMissing

MAX_SKEW = timedelta(minutes=15)  # RequestExpired past this (AWS common errors: "more than 15 minutes")
MAX_PRESIGNED_EXPIRES = 7 * 24 * 3600
SIGV4_TIME = "%Y%m%dT%H%M%SZ"
AUTH_FAILURE = "AWS was not able to validate the provided access credentials"
SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS "
    "Secret Access Key and signing method. Consult the service documentation for details."
)
PRESIGNED_PARAMS = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)


def incomplete(message: str) -> Ec2Error:
    return Ec2Error("IncompleteSignature", message)


def mismatch() -> Ec2Error:
    return Ec2Error("SignatureDoesNotMatch", SIGNATURE_MISMATCH, 403)


# ----------------------------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class CredentialScope:
    """``ACCESS_KEY/DATE/REGION/SERVICE/aws4_request``, the part of a SigV4 signature that names who signed, where."""

    access_key: str
    date: str
    region: str
    service: str


def credential_scope(credential: str) -> CredentialScope:
    parts = credential.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request" or not all(parts):
        raise incomplete(
            f"Credential should be of the form ACCESS_KEY/DATE/REGION/SERVICE/aws4_request; got '{credential}'."
        )
    return CredentialScope(*parts[:4])


@dataclass(frozen=True)
class SigV4Header:
    scope: CredentialScope
    credential: str
    signed_headers: str
    signature: str


_HEADER_COMPONENTS = ("Credential", "SignedHeaders", "Signature")


def parse_authorization(authorization: str) -> SigV4Header:
    """``AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...``, read strictly: exactly these three
    components, each once, named exactly. A lenient reading would let unsigned text stand in for the signed scope
    (a ``XCredential=`` component ahead of the real one, say), and the region is read from that scope."""
    algorithm, _, rest = authorization.strip().partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        raise incomplete(f"Unsupported AWS 'algorithm': '{algorithm}'; use AWS4-HMAC-SHA256.")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        part = part.strip()
        if not part:
            continue
        name, equals, value = part.partition("=")
        if not equals:
            raise incomplete(
                f"'{part}' not a valid key=value pair (missing equal-sign) in Authorization header: '{authorization}'."
            )
        if name not in _HEADER_COMPONENTS:
            raise incomplete(
                f"Authorization header has an unknown component '{name}'; a SigV4 header has exactly "
                f"Credential, SignedHeaders and Signature. Authorization={authorization}"
            )
        if name in fields:
            raise incomplete(f"Authorization header has '{name}' more than once. Authorization={authorization}")
        fields[name] = value.strip()
    absent = [
        f"Authorization header requires '{name}' parameter."
        for name in ("Credential", "Signature", "SignedHeaders")
        if not fields.get(name)
    ]
    if absent:
        raise incomplete(" ".join(absent) + f" Authorization={authorization}")
    return SigV4Header(
        credential_scope(fields["Credential"]), fields["Credential"], fields["SignedHeaders"], fields["Signature"]
    )


def signed_region(authorization: str | None, values: Mapping[str, str]) -> str | None:
    """The region of the credential scope the request is signed with: the ``Credential=`` component of the SigV4
    ``Authorization`` header, or else the ``X-Amz-Credential`` parameter of query-string auth (the query string's
    wins over the body's, so a verified presigned URL is read as verified); never any other text of the header. A
    malformed header or scope is refused (IncompleteSignature), whether signatures are verified or not."""
    if authorization is not None:
        return parse_authorization(authorization).scope.region
    if "X-Amz-Credential" in values:
        return credential_scope(values["X-Amz-Credential"]).region
    return None


@dataclass(frozen=True)
class Received:
    """What a signature covers, as the request arrived."""

    method: str
    scheme: str
    raw_path: str  # percent-encoded, as sent
    query: list[tuple[str, str]]  # decoded (no '+' → space: SigV4 encodes spaces as %20)
    headers: list[tuple[str, str]]  # names lower-case, in order, repeats kept
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


def received(request: Request, body: bytes) -> Received:
    raw: bytes = request.scope.get("raw_path") or request.scope.get("path", "/").encode()
    raw_path = raw.decode("latin-1").split("?", 1)[0] or "/"
    query = []
    source = request.scope.get("query_string", b"").decode("latin-1")
    for pair in source.split("&") if source else ():
        name, _, value = pair.partition("=")
        query.append((unquote(name), unquote(value)))
    headers = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in request.headers.raw]
    return Received(request.method, request.scope.get("scheme", "http"), raw_path, query, headers, body)


# -------------------------------------------------------------------------------------------- verifying
class SigV4Verifier:
    """Checks AWS4-HMAC-SHA256 signatures (the ``Authorization`` header, or a presigned URL's ``X-Amz-*`` query
    parameters) against ``credentials`` (access key ID → secret access key). botocore's signer recomputes the
    signature from the request as received; only the choice of signed headers (the ones the client named) is ours.
    botocore is imported here, so that it is needed only when credentials are configured."""

    def __init__(self, credentials: dict[str, str], wall: Callable[[], float]):
        try:
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest
            from botocore.compat import HTTPHeaders
            from botocore.credentials import Credentials
        except ImportError as error:
            raise ExtraMissing(SIGV4) from error
        for key, secret in credentials.items():
            if not isinstance(key, str) or not isinstance(secret, str) or not key or not secret:
                raise ValueError("EC2 API credentials map non-empty access key IDs to non-empty secret access keys")
        self.credentials = dict(credentials)
        self.wall = wall
        self.request_class: Any = AWSRequest
        self.credentials_class: Any = Credentials

        class Recompute(SigV4Auth):
            """botocore's SigV4, over exactly the headers the client signed (botocore's own list leaves out some,
            such as User-Agent, that other SDKs sign)."""

            def __init__(self, credentials: Any, service_name: str, region_name: str, signed: list[tuple[str, str]]):
                super().__init__(credentials, service_name, region_name)
                self.client_signed = signed

            def headers_to_sign(self, request: Any) -> Any:
                headers = HTTPHeaders()
                for name, value in self.client_signed:
                    headers[name] = value
                return headers

        self.signer_class: Any = Recompute

    def verify(self, request: Received, service: str = "ec2") -> None:
        """Refused unless signed for ``service`` (the endpoint also serves SQS, EventBridge and Auto Scaling)."""
        authorization = request.header("authorization")
        query = dict(request.query)
        if authorization is not None:
            self.verify_header(request, authorization, service)
        elif "X-Amz-Algorithm" in query or "X-Amz-Signature" in query:
            self.verify_presigned(request, query, service)
        elif "Signature" in query and "AWSAccessKeyId" in query:
            raise incomplete(
                "Signature Version 2 is not supported by this endpoint; sign requests with "
                "AWS4-HMAC-SHA256 (Signature Version 4)."
            )
        else:
            raise missing("AWSAccessKeyId")

    def verify_header(self, request: Received, authorization: str, service: str = "ec2") -> None:
        header = parse_authorization(authorization)
        stamp = request.header("x-amz-date")
        date = request.header("date")
        if stamp is None and date is not None:
            try:
                stamp = parsedate_to_datetime(date).astimezone(UTC).strftime(SIGV4_TIME)
            except (TypeError, ValueError, OverflowError):  # OverflowError: a year-1 date east of UTC
                stamp = None
        if stamp is None:
            raise incomplete(
                "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. "
                f"Authorization={authorization}"
            )
        self.check(
            request,
            request.query,
            header.credential,
            header.signed_headers,
            header.signature,
            stamp,
            expires=None,
            service=service,
        )

    def verify_presigned(self, request: Received, query: dict[str, str], service: str = "ec2") -> None:
        absent = [name for name in PRESIGNED_PARAMS if not query.get(name)]
        if absent:
            raise incomplete(
                "A presigned request requires the query parameters "
                + ", ".join(PRESIGNED_PARAMS)
                + "; missing: "
                + ", ".join(absent)
                + "."
            )
        if query["X-Amz-Algorithm"] != "AWS4-HMAC-SHA256":
            raise incomplete(f"Unsupported AWS 'algorithm': '{text(query['X-Amz-Algorithm'])}'; use AWS4-HMAC-SHA256.")
        try:
            expires = int(query["X-Amz-Expires"])
        except ValueError:
            expires = -1
        if not 1 <= expires <= MAX_PRESIGNED_EXPIRES:
            raise incomplete(f"X-Amz-Expires must be a number of seconds from 1 to {MAX_PRESIGNED_EXPIRES}.")
        signed_query = [(name, value) for name, value in request.query if name != "X-Amz-Signature"]
        self.check(
            request,
            signed_query,
            query["X-Amz-Credential"],
            query["X-Amz-SignedHeaders"],
            query["X-Amz-Signature"],
            query["X-Amz-Date"],
            expires=expires,
            service=service,
        )

    def check(
        self,
        request: Received,
        query: list[tuple[str, str]],
        credential: str,
        signed_headers: str,
        signature: str,
        stamp: str,
        expires: int | None,
        service: str = "ec2",
    ) -> None:
        scope = credential_scope(credential)
        access_key, region, signed_for = scope.access_key, scope.region, scope.service
        secret = self.credentials.get(access_key)
        if secret is None:
            raise Ec2Error("AuthFailure", AUTH_FAILURE, 401)
        try:
            signed_at = datetime.strptime(stamp, SIGV4_TIME).replace(tzinfo=UTC)
        except ValueError:
            raise incomplete(f"Invalid date '{text(stamp)}': X-Amz-Date must be YYYYMMDD'T'HHMMSS'Z'.") from None
        names = [name.strip().lower() for name in signed_headers.split(";") if name.strip()]
        signed = [(name, value) for name, value in request.headers if name in names]
        if "host" not in names or {name for name, _ in signed} != set(names):
            raise mismatch()  # a signed header did not arrive (or the host was not signed): it cannot match
        content_hash = request.header("x-amz-content-sha256")
        if content_hash is not None and content_hash != hashlib.sha256(request.body).hexdigest():
            raise mismatch()  # the body is not the one the client hashed and signed
        recomputed = self.request_class(
            method=request.method,
            url=f"{request.scheme}://signed{request.raw_path}",
            data=request.body,
            params=list(query),
        )
        if content_hash is not None:
            recomputed.headers["X-Amz-Content-SHA256"] = content_hash
        recomputed.context["timestamp"] = stamp
        signer = self.signer_class(self.credentials_class(access_key, secret), signed_for, region, signed)
        expected = signer.signature(signer.string_to_sign(recomputed, signer.canonical_request(recomputed)), recomputed)
        if signed_for != service or not hmac.compare_digest(expected, signature.strip().lower()):
            raise mismatch()
        # Against the wall clock (the simulated clock may be anywhere): a signed request within 15 minutes either way;
        # a presigned URL until it expires, and not signed more than 15 minutes ahead.
        now = datetime.fromtimestamp(self.wall(), UTC)
        # Differences, not sums: a validly signed stamp of 9999-12-31 plus the skew would overflow a datetime.
        late = now - signed_at > (MAX_SKEW if expires is None else timedelta(seconds=expires))
        if late or signed_at - now > MAX_SKEW:
            raise Ec2Error("RequestExpired", "Request has expired.")
