"""Error bodies of Azure IMDS, shared by its endpoints. Each says where its wording comes from."""

from __future__ import annotations

import json


def error_body(message: str, **extra) -> bytes:
    """IMDS errors are ``{"error": "..."}``, sometimes with more keys (``newest-versions``)."""
    return json.dumps({"error": message, **extra}).encode()


# Seen on real VMs (azure-docs#91624), spacing included; the docs' FAQ paraphrases it.
MISSING_METADATA_HEADER = b'{ "error": "Bad request: . Required metadata header not specified" }'
# The docs' "Versioning" section, verbatim; the list of newest versions is added per endpoint.
BAD_API_VERSION = (
    "Bad request. api-version is invalid or was not specified in the request. For more information refer to "
    "aka.ms/azureimds"
)
# Documented as rejected; the bodies are not documented, these are our wording.
FORWARDED_REFUSED = error_body("Bad request. Requests with an X-Forwarded-For header are not allowed")
DUPLICATE_PARAMETER = error_body("Bad request. Requests with duplicate query parameter names are not allowed")
# 404 and 405 are documented statuses; the bodies are ours.
NOT_FOUND = error_body("Not found")
METHOD_NOT_ALLOWED = error_body("Method not allowed")
# 500 is documented as "service error, retry"; the body is ours.
SERVICE_ERROR = error_body("Internal server error. Retry the request.")
# 429 above about 5 requests a second per VM, and 410 while IMDS updates ("retry for up to 70 seconds"): documented
# statuses, bodies ours.
TOO_MANY_REQUESTS = error_body("Too many requests. Retry after some time.")
GONE = error_body("Gone. The metadata service is being updated; retry for up to 70 seconds.")
FAULT_BODIES = {410: GONE, 429: TOO_MANY_REQUESTS, 500: SERVICE_ERROR}


def bad_api_version(newest: list[str]) -> bytes:
    return error_body(BAD_API_VERSION, **{"newest-versions": newest})
