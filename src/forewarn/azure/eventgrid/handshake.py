"""The endpoint validation Event Grid performs when an event subscription is created or updated (Microsoft's
"Webhook event delivery").

- Event Grid schema: POST the SubscriptionValidationEvent (``aeg-event-type: SubscriptionValidation``). ``200`` with
  ``{"validationResponse": code}`` within the timeout validates at once. Any other 2xx answer starts the manual
  handshake: the subscription waits in ``AwaitingManualAction`` until the subscriber GETs the ``validationUrl`` (within
  5 minutes of engine time), and fails otherwise. Anything else refuses the subscription.
- CloudEvents schema: the CloudEvents abuse-protection handshake, ``OPTIONS`` with ``WebHook-Request-Origin:
  eventgrid.azure.net``; the answer must be 200 with ``WebHook-Allowed-Origin`` ``eventgrid.azure.net`` or ``*``.

A refusal is Event Grid's error, code ``Url validation`` and its message word for word as clients have reported it
(azure-cli#21006, azure-sdk-for-java#37065), including its "troublehooting" misspelling.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime

from forewarn.azure.arm.wire import ArmError
from forewarn.azure.eventgrid.delivery import ORIGIN, status_name
from forewarn.azure.eventgrid.events import METADATA_VERSION, VALIDATION_DATA_VERSION, validation_event, validation_url
from forewarn.azure.eventgrid.model import (
    AWAITING_MANUAL_ACTION,
    CLOUD_EVENT_SCHEMA,
    SUCCEEDED,
    EventSubscription,
    PendingValidation,
    SystemTopic,
    invalid_subscription,
)
from forewarn.core.ids import derived_guid
from forewarn.net.outbound import Answer, NoAnswer, Outbound
from forewarn.net.own_listeners import Destination, OwnListeners, SelfTarget
from forewarn.net.untrusted_json import JsonInputError, parse_json

log = logging.getLogger("forewarn.azure.eventgrid")

VALIDATION_CODE = "Url validation"
TROUBLESHOOTING = "For troublehooting, visit https://aka.ms/esvalidation."
VALIDATED_TEXT = "Webhook successfully validated as a subscription endpoint."
RESPONSE_QUOTE = 200  # characters of the subscriber's answer quoted in a failure message


def handshake_failed(url: str, detail: str) -> ArmError:
    return ArmError(400, VALIDATION_CODE, f"Webhook validation handshake failed for {url}. {detail} {TROUBLESHOOTING}")


def unanswered(method: str, failure: NoAnswer) -> str:
    if failure.kind == "not-installed":  # nothing was sent: the reason is this server's, said as it is
        return f"{failure}."
    return f"Http {method} request failed with response code Unknown."


def manual_validation_expired(subscription: EventSubscription, window_minutes: float) -> str:
    response = subscription.validation.response if subscription.validation else ""
    return (
        f"Webhook validation handshake failed for {subscription.destination.endpoint_url}. Http POST request "
        f"retuned 2XX response with response body {response}. When a validation request is accepted without "
        "validation code in the response body, Http GET is expected on the validation url included in the "
        f"validation event(within {window_minutes:g} minutes). {TROUBLESHOOTING}"
    )


def validation_token(seed: str, code: str) -> str:
    return hashlib.blake2b(f"{seed}:validation:{code}".encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Validated:
    state: str  # Succeeded or AwaitingManualAction
    validation: PendingValidation | None = None


ENDPOINT_MEMBER = "properties.destination.properties.endpointUrl"


async def checked_endpoint(url: str, own: OwnListeners | None) -> Destination:
    """Where to send a request for the subscription endpoint ``url``; Event Grid's 400 for a subscription request
    when it leads back to this server (net/own_listeners.py)."""
    if own is None:
        return Destination(url)
    try:
        return await own.destination(url)
    except SelfTarget as refused:
        raise invalid_subscription(str(refused), ENDPOINT_MEMBER) from None


async def validate(
    subscription: EventSubscription,
    topic: SystemTopic,
    *,
    seed: str,
    now: datetime,
    public_base: str,
    timeout: float,
    window,
    own: OwnListeners | None = None,
) -> Validated:
    """Run the handshake for ``subscription``; raise the ``Url validation`` ArmError if the endpoint refuses it, and
    Event Grid's InvalidRequest if it is this server's own (``own``: its listeners)."""
    url = subscription.destination.endpoint_url
    target = await checked_endpoint(url, own)
    if subscription.schema == CLOUD_EVENT_SCHEMA:
        await _options_handshake(url, target, subscription, timeout)
        log.info("event subscription %s: CloudEvents handshake with %s succeeded", subscription.name, url)
        return Validated(SUCCEEDED)
    code = derived_guid(seed, "validation-code", subscription.key, now.isoformat())
    manual_url = validation_url(public_base, subscription.name, code, validation_token(seed, code), now)
    body = json.dumps([validation_event(seed, topic.source, code, manual_url, now)])
    headers = {
        "content-type": "application/json; charset=utf-8",
        "aeg-event-type": "SubscriptionValidation",
        "aeg-subscription-name": subscription.name.upper(),
        "aeg-delivery-count": "0",
        "aeg-data-version": VALIDATION_DATA_VERSION,
        "aeg-metadata-version": METADATA_VERSION,
    }
    try:
        async with Outbound(timeout) as client:
            response = await client.send("POST", target.url, body=body.encode(), headers={**headers, **target.headers})
    except NoAnswer as failure:
        log.info("event subscription %s: validation POST to %s failed: %s", subscription.name, url, failure)
        raise handshake_failed(url, unanswered("POST", failure)) from None
    if not 200 <= response.status <= 299:
        raise handshake_failed(url, f"Http POST request failed with response code {status_name(response.status)}.")
    if response.status == 200 and _echoed(response) == code:
        log.info("event subscription %s: validation handshake with %s succeeded", subscription.name, url)
        return Validated(SUCCEEDED)
    # Accepted without the code: the subscriber may still GET the validation URL (the manual handshake).
    deadline = now + window
    log.info(
        "event subscription %s: %s answered the validation without its code; awaiting a GET of the validation "
        "URL until %s",
        subscription.name,
        url,
        deadline.isoformat(),
    )
    quoted = _text(response)[:RESPONSE_QUOTE]
    return Validated(AWAITING_MANUAL_ACTION, PendingValidation(code, manual_url, deadline, quoted))


def _text(response: Answer) -> str:
    """The answer's body as text, in the charset its Content-Type names (UTF-8 when none or an unknown one)."""
    charset = "utf-8"
    for parameter in response.headers.get("content-type", "").split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        return response.body.decode(charset, errors="replace")
    except LookupError:
        return response.body.decode("utf-8", errors="replace")


def _echoed(response: Answer) -> str | None:
    try:
        data = parse_json(response.body)
    except JsonInputError:
        return None
    # camel case only (as pm7y/AzureEventGridSimulator checks it)
    value = data.get("validationResponse") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


async def _options_handshake(url: str, target: Destination, subscription: EventSubscription, timeout: float) -> None:
    headers = {"webhook-request-origin": ORIGIN, "webhook-request-rate": "120", **target.headers}
    try:
        async with Outbound(timeout) as client:
            response = await client.send("OPTIONS", target.url, headers=headers)
    except NoAnswer as failure:
        log.info("event subscription %s: validation OPTIONS to %s failed: %s", subscription.name, url, failure)
        raise handshake_failed(url, unanswered("OPTIONS", failure)) from None
    if response.status != 200:
        raise handshake_failed(url, f"Http OPTIONS request failed with response code {status_name(response.status)}.")
    allowed = [part.strip().lower() for part in response.headers.get("webhook-allowed-origin", "").split(",")]
    if ORIGIN not in allowed and "*" not in allowed:
        raise handshake_failed(
            url, f"Http OPTIONS request returned 200 without a WebHook-Allowed-Origin header allowing {ORIGIN}."
        )
