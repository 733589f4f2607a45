"""The Microsoft.EventGrid resource provider on the ARM port: system topics and their event subscriptions.

    PUT|GET|PATCH|DELETE /subscriptions/{s}/resourceGroups/{g}/providers/Microsoft.EventGrid/systemTopics/{topic}
    GET  /subscriptions/{s}[/resourceGroups/{g}]/providers/Microsoft.EventGrid/systemTopics
    PUT|GET|PATCH|DELETE .../systemTopics/{topic}/eventSubscriptions/{name}
    GET  .../systemTopics/{topic}/eventSubscriptions
    POST .../systemTopics/{topic}/eventSubscriptions/{name}/getDeliveryAttributes | getFullUrl
    GET  /eventgrid/eventsubscriptions/{name}/validate?id=...&token=...   (the validationUrl; no token needed)

Writes answer once committed: 201 for a creation, 200 for an update, with the resource and its
``provisioningState``; an event subscription PUT first runs the validation handshake (handshake.py), so a refused
handshake leaves nothing behind. docs/azure-eventgrid.md has the choices made where Azure's behaviour is unknown.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import replace
from datetime import datetime

from starlette.responses import PlainTextResponse, Response

from forewarn.azure.arm.router import ManagementCall
from forewarn.azure.arm.wire import (
    ArmError,
    dated_api_version,
    json_response,
    method_not_allowed,
    object_body,
    resource_not_found,
    subscription_not_found,
)
from forewarn.azure.eventgrid.handshake import VALIDATED_TEXT, manual_validation_expired, validation_token
from forewarn.azure.eventgrid.model import (
    EVENTGRID,
    FAILED,
    SUCCEEDED,
    TOPIC_TYPE,
    SystemTopic,
    check_subscription_name,
    check_topic_name,
    metric_resource_id,
    parse_subscription_body,
    parse_topic_body,
)

log = logging.getLogger("forewarn.azure.eventgrid")

# systemTopics exist from 2020-04-01-preview on; any well-formed later version is accepted (clients move faster than a
# list here would). Shown in errors, newest first.
SYSTEM_TOPICS_SINCE = "2020-04-01"
KNOWN_API_VERSIONS = (
    "2025-02-15",
    "2024-06-01-preview",
    "2023-12-15-preview",
    "2023-06-01-preview",
    "2022-06-15",
    "2021-12-01",
    "2021-10-15-preview",
    "2021-06-01-preview",
    "2020-10-15-preview",
    "2020-04-01-preview",
)
SKIP_VALIDATION_HEADER = "x-forewarn-skip-validation"  # ours, documented: no handshake for this PUT (tests)

TOPIC_ACTIONS = {"GET": "read", "PUT": "write", "PATCH": "write", "DELETE": "delete"}


def _route_error(path: str) -> ArmError:
    return ArmError(
        404,
        "NotFound",
        f"No Microsoft.EventGrid route matches {path!r}; forewarn serves systemTopics and their eventSubscriptions.",
    )


def _not_found(kind: str, name: str, group: str) -> ArmError:
    return resource_not_found(EVENTGRID, kind, name, group)


class EventGridArm:
    def __init__(self, eventgrid):
        self.eventgrid = eventgrid  # forewarn.azure.eventgrid.topics.EventGrid

    @property
    def registry(self):
        return self.eventgrid.registry

    def now(self) -> datetime:
        return self.eventgrid.now()

    # ---------------------------------------------------------------------------------------------- routing
    async def handle(self, call: ManagementCall) -> Response:
        segments, lower, method = call.segments, call.lower, call.method
        path = call.request.url.path
        if len(lower) < 5 or lower[0] != "subscriptions":
            raise _route_error(path)
        if lower[2:5] == ["providers", "microsoft.eventgrid", "systemtopics"] and len(lower) == 5:
            if method != "GET":
                raise method_not_allowed(method)
            call.authorize("Microsoft.EventGrid/systemTopics/read", "/" + "/".join(segments[:2]))
            self._api_version(call)
            sub = self._subscription(segments[1])
            return json_response(200, {"value": [t.to_arm() for t in self.registry.topics_in(sub)]})
        if lower[2] != "resourcegroups" or len(lower) < 7 or lower[4:6] != ["providers", "microsoft.eventgrid"]:
            raise _route_error(path)
        rest, lrest = segments[6:], lower[6:]
        group_scope = "/" + "/".join(segments[:4])
        if not lrest or lrest[0] != "systemtopics":
            kind = rest[0] if rest else ""
            self._api_version(call)
            raise ArmError(
                404,
                "InvalidResourceType",
                f"The resource type '{kind}' could not be found in the "
                f"namespace '{EVENTGRID}'; forewarn emulates systemTopics.",
            )
        if len(lrest) == 1:
            if method != "GET":
                raise method_not_allowed(method)
            call.authorize("Microsoft.EventGrid/systemTopics/read", group_scope)
            self._api_version(call)
            sub = self._subscription(segments[1])
            return json_response(200, {"value": [t.to_arm() for t in self.registry.topics_in(sub, segments[3])]})
        topic_scope = "/" + "/".join(segments[:8])
        if len(lrest) == 2:
            if method not in TOPIC_ACTIONS:
                raise method_not_allowed(method)
            call.authorize(f"Microsoft.EventGrid/systemTopics/{TOPIC_ACTIONS[method]}", topic_scope)
            self._api_version(call)
            sub = self._subscription(segments[1])
            return await self.system_topic(call, sub, segments[3], rest[1])
        if lrest[2] != "eventsubscriptions" or len(lrest) > 5:
            raise _route_error(path)
        action_base = "Microsoft.EventGrid/systemTopics/eventSubscriptions"
        if len(lrest) == 3:
            if method != "GET":
                raise method_not_allowed(method)
            call.authorize(f"{action_base}/read", "/" + "/".join(segments[:9]))
            self._api_version(call)
            topic = self._topic(self._subscription(segments[1]), segments[3], rest[1])
            now = self.now()
            return json_response(200, {"value": [s.to_arm(now) for s in self.registry.subscriptions_of(topic.key)]})
        scope = "/" + "/".join(segments[:10])
        if len(lrest) == 5:
            operation = {"getdeliveryattributes": "getDeliveryAttributes", "getfullurl": "getFullUrl"}.get(lrest[4])
            if operation is None:
                raise _route_error(path)
            if method != "POST":
                raise method_not_allowed(method)
            call.authorize(f"{action_base}/{operation}/action", scope)
            self._api_version(call)
            topic = self._topic(self._subscription(segments[1]), segments[3], rest[1])
            subscription = self._event_subscription(topic, rest[3])
            if operation == "getFullUrl":
                return json_response(200, {"endpointUrl": subscription.destination.endpoint_url})
            return json_response(200, {"value": [a.to_arm(reveal=True) for a in subscription.destination.attributes]})
        if method not in TOPIC_ACTIONS:
            raise method_not_allowed(method)
        call.authorize(f"{action_base}/{TOPIC_ACTIONS[method]}", scope)
        self._api_version(call)
        topic = self._topic(self._subscription(segments[1]), segments[3], rest[1])
        return await self.event_subscription(call, topic, rest[3])

    def _api_version(self, call: ManagementCall) -> str:
        version = dated_api_version(call.request, KNOWN_API_VERSIONS)
        text = version.text
        if not version.at_least(SYSTEM_TOPICS_SINCE):
            raise ArmError(
                400,
                "NoRegisteredProviderFound",
                f"No registered resource provider found for location 'global' and API version '{text}' "
                f"for type 'systemTopics'. The supported api-versions are "
                f"'{', '.join(reversed(KNOWN_API_VERSIONS))}'.",
            )
        return text.strip()

    def _subscription(self, text: str) -> str:
        found = self.eventgrid.azure_subscription(text)
        if found is None:
            raise subscription_not_found(text)
        return found

    def _topic(self, sub: str, group: str, name: str) -> SystemTopic:
        key = f"/subscriptions/{sub}/resourceGroups/{group}/providers/{EVENTGRID}/systemTopics/{name}".lower()
        topic = self.registry.topics.get(key)
        if topic is None:
            raise _not_found("systemTopics", name, group)
        return topic

    def _event_subscription(self, topic: SystemTopic, name: str):
        found = self.registry.subscriptions.get(f"{topic.key}/eventsubscriptions/{name.lower()}")
        if found is None:
            raise _not_found(f"systemTopics/{topic.name}/eventSubscriptions", name, topic.resource_group)
        return found

    # ------------------------------------------------------------------------------------------ system topics
    async def system_topic(self, call: ManagementCall, sub: str, group: str, name: str) -> Response:
        key = f"/subscriptions/{sub}/resourceGroups/{group}/providers/{EVENTGRID}/systemTopics/{name}".lower()
        existing = self.registry.topics.get(key)
        if call.method == "GET":
            if existing is None:
                raise _not_found("systemTopics", name, group)
            return json_response(200, existing.to_arm())
        if call.method == "DELETE":
            if existing is None:
                return Response(status_code=204)
            self.registry.delete_topic(key)
            return Response(status_code=200)
        body = await object_body(call.request, required=True)
        if call.method == "PATCH":  # SystemTopicUpdateParameters: tags (identity is not emulated)
            if existing is None:
                raise _not_found("systemTopics", name, group)
            tags = body.get("tags", existing.tags)
            if tags is not None and (not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values())):
                raise ArmError(
                    400,
                    "InvalidRequest",
                    "Invalid system topic request: 'tags' must be an object of string values.",
                    "tags",
                )
            updated = replace(existing, tags=tags)
            self.registry.put_topic(updated)
            return json_response(200, updated.to_arm())
        check_topic_name(name)
        tags = parse_topic_body(body, sub)
        if existing is not None:
            updated = replace(existing, tags=tags)
            self.registry.put_topic(updated)
            return json_response(200, updated.to_arm())
        other = self.registry.topic_of_source(sub)
        if other is not None:
            raise ArmError(
                400,
                "InvalidRequest",
                f"Invalid system topic request: only one system topic of type "
                f"{TOPIC_TYPE} is "
                f"allowed per source; /subscriptions/{sub} has {other.id}.",
            )

        # The path's spelling of the group and name is kept, as ARM keeps the creator's spelling.
        topic = SystemTopic(sub, group, name, metric_resource_id(key), tags)
        self.registry.put_topic(topic)
        log.info("system topic %s created", topic.id)
        return json_response(201, topic.to_arm())

    # ------------------------------------------------------------------------------------ event subscriptions
    async def event_subscription(self, call: ManagementCall, topic: SystemTopic, name: str) -> Response:
        key = f"{topic.key}/eventsubscriptions/{name.lower()}"
        existing = self.registry.subscriptions.get(key)
        now = self.now()
        if call.method == "GET":
            if existing is None:
                raise _not_found(f"systemTopics/{topic.name}/eventSubscriptions", name, topic.resource_group)
            return json_response(200, existing.to_arm(now))
        if call.method == "DELETE":
            if existing is None:
                return Response(status_code=204)
            self.registry.delete_subscription(key)
            log.info("event subscription %s deleted", existing.id)
            return Response(status_code=200)
        check_subscription_name(name)
        body = await object_body(call.request, required=True)
        if call.method == "PATCH":
            if existing is None:
                raise _not_found(f"systemTopics/{topic.name}/eventSubscriptions", name, topic.resource_group)
            # EventSubscriptionUpdateParameters carry the members at the top level; they replace the current ones.
            properties = existing.to_arm(now, full=True)["properties"]
            for member, value in body.items():
                for current in list(properties):
                    if current.lower() == member.lower():
                        del properties[current]
                properties[member] = value
            body = {"properties": properties}
        candidate = parse_subscription_body(body, topic.id, existing.name if existing else name, now)
        if existing is not None:
            candidate = replace(candidate, origin=existing.origin, skip_validation=existing.skip_validation)
        await self.eventgrid.check_endpoint(candidate)  # with or without a handshake to come
        skip = call.request.headers.get(SKIP_VALIDATION_HEADER, "").lower() == "true"
        if skip or not candidate.revalidates(existing):
            stored = replace(candidate, state=SUCCEEDED)
            if existing is None or existing.definition() != stored.definition():
                self.registry.put_subscription(stored)
                log.info(
                    "event subscription %s stored%s",
                    stored.id,
                    f" without validation ({SKIP_VALIDATION_HEADER})" if skip else " (same endpoint, validated)",
                )
        else:
            public_base = str(call.request.base_url).rstrip("/")
            stored = await self.eventgrid.validate_and_store(candidate, public_base)
        return json_response(200 if existing is not None else 201, stored.to_arm(self.now()))

    # -------------------------------------------------------------------------------------- validation URL
    async def validation_url(self, call: ManagementCall) -> Response:
        """``GET /eventgrid/eventsubscriptions/{name}/validate?id=CODE&token=T``: the manual handshake's last step."""
        lower = call.lower
        if len(lower) != 4 or lower[1] != "eventsubscriptions" or lower[3] != "validate":
            raise ArmError(404, "NotFound", f"No validation route matches {call.request.url.path!r}.")
        if call.method != "GET":
            raise method_not_allowed(call.method)
        code = call.request.query_params.get("id", "")
        token = call.request.query_params.get("token", "")
        subscription = self.registry.awaiting(code) if code else None
        seed = self.eventgrid.service.settled_engine().seed
        if (
            subscription is None
            or subscription.name.lower() != lower[2]
            or not hmac.compare_digest(token.encode(), validation_token(seed, code).encode())
        ):
            raise ArmError(
                404,
                "NotFound",
                "No event subscription awaits validation with this code and token; it may "
                "be validated already, or have expired.",
            )
        now = self.now()
        if now > subscription.validation.deadline:
            window = self.eventgrid.settings.validation_window.total_seconds() / 60
            message = manual_validation_expired(subscription, window)
            self.registry.put_subscription(replace(subscription, state=FAILED, validation=None, failure=message))
            log.info("event subscription %s: validation URL visited after its deadline; Failed", subscription.id)
            raise ArmError(400, "Url validation", message)
        self.registry.put_subscription(replace(subscription, state=SUCCEEDED, validation=None, failure=None))
        log.info("event subscription %s: validated through its validation URL", subscription.id)
        return PlainTextResponse(VALIDATED_TEXT)
