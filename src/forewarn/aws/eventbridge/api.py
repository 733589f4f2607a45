"""The Amazon EventBridge actions on rules of the default event bus, over the JSON protocol (``X-Amz-Target:
AWSEvents.<Action>``, ``application/x-amz-json-1.1``; errors ``{"__type": ..., "message": ...}``), served on the EC2
API's port: PutRule, DescribeRule, ListRules, EnableRule, DisableRule, DeleteRule, PutTargets, ListTargetsByRule,
RemoveTargets and TestEventPattern (the Amazon EventBridge API Reference). Targets are SQS queues, by ARN; the events
the rules match are those forewarn's EC2 changes make (events.py), delivered by delivery.py."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from starlette.responses import Response

from forewarn.app.runtime import Maintenance
from forewarn.aws.component import Ec2Component
from forewarn.aws.eventbus import (
    EventBus,
    PatternInvalid,
    Rule,
    RuleMissing,
    Target,
    TargetsExceeded,
    check_pattern,
    matches,
)
from forewarn.core.changes import Change
from forewarn.core.errors import CoreError

TARGET_PREFIX = "AWSEvents."
JSON_TYPE = "application/x-amz-json-1.1"
DEFAULT_ACCOUNT = "123456789012"
DEFAULT_REGION = "us-east-1"
CODES: list[tuple[type[CoreError], str]] = [
    (PatternInvalid, "InvalidEventPatternException"),
    (RuleMissing, "ResourceNotFoundException"),
    (TargetsExceeded, "LimitExceededException"),
    (CoreError, "ValidationException"),
]


class EventsError(Exception):
    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def events_error(error: CoreError) -> EventsError:
    code = next(code for kind, code in CODES if isinstance(error, kind))
    return EventsError(code, str(error))


def _validation(message: str) -> EventsError:
    return EventsError("ValidationException", message)


class EventsApi:
    def __init__(self, service: Maintenance):
        self.service = service
        self.actions: dict[str, Callable[[dict[str, Any], str | None], Awaitable[dict[str, Any]]]] = {
            "PutRule": self.put_rule,
            "DescribeRule": self.describe_rule,
            "ListRules": self.list_rules,
            "EnableRule": self.enable_rule,
            "DisableRule": self.disable_rule,
            "DeleteRule": self.delete_rule,
            "PutTargets": self.put_targets,
            "ListTargetsByRule": self.list_targets,
            "RemoveTargets": self.remove_targets,
            "TestEventPattern": self.test_event_pattern,
        }

    @property
    def bus(self) -> EventBus:
        return self.service.settled_engine().component(Ec2Component).bus

    async def perform(self, command: Callable[[EventBus], list[Change]]) -> list[Change]:
        return await self.service.perform_soon(lambda engine: command(engine.component(Ec2Component).bus))

    async def call(self, target: str, body: bytes, region: str | None, request_id: str) -> Response:
        try:
            handler = self.actions.get(target[len(TARGET_PREFIX) :])
            if handler is None:
                raise EventsError("UnknownOperationException", f"Unknown operation {target}")
            try:
                given = json.loads(body or b"{}")
            except ValueError:
                raise EventsError("SerializationException", "The request body is not valid JSON.") from None
            if not isinstance(given, dict):
                raise EventsError("SerializationException", "The request body must be a JSON object.")
            _default_bus(given)
            try:
                output = await handler(given, region)
            except CoreError as error:
                raise events_error(error) from error
            return Response(json.dumps(output), media_type=JSON_TYPE, headers={"x-amzn-RequestId": request_id})
        except EventsError as error:
            return error_response(error, request_id)

    # -------------------------------------------------------------------------------------------------- rules
    async def put_rule(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        name = _text(given, "Name")
        if given.get("ScheduleExpression"):
            raise _validation("Scheduled rules are not simulated by forewarn; give an EventPattern.")
        text = given.get("EventPattern")
        if not isinstance(text, str) or not text:
            raise _validation("Parameter(s) EventPattern or ScheduleExpression must be specified.")
        pattern = _pattern(text)
        self.service.catch_up()
        component = self.service.settled_engine().component(Ec2Component)
        account = next((i.account_id for i in component.ec2_instances.values()), DEFAULT_ACCOUNT)
        rule = Rule(
            name=name,
            pattern=pattern,
            pattern_text=text,
            region=region or DEFAULT_REGION,
            account_id=account,
            created_at=self.service.now(),
            state=str(given.get("State") or "ENABLED"),
            description=str(given.get("Description") or ""),
        )
        await self.perform(lambda bus: bus.put_rule(rule))
        return {"RuleArn": self.bus.rule(name).arn}

    async def describe_rule(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        rule = self.bus.rule(_text(given, "Name"))
        return {**_rule_out(rule), "CreatedBy": rule.account_id}

    async def list_rules(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        prefix = str(given.get("NamePrefix") or "")
        rules = [self.bus.rules[name] for name in sorted(self.bus.rules) if name.startswith(prefix)]
        return {"Rules": [_rule_out(rule) for rule in rules]}

    async def enable_rule(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        return await self.set_state(_text(given, "Name"), "ENABLED")

    async def disable_rule(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        return await self.set_state(_text(given, "Name"), "DISABLED")

    async def set_state(self, name: str, state: str) -> dict[str, Any]:
        rule = replace(self.bus.rule(name), state=state)
        await self.perform(lambda bus: bus.put_rule(rule))
        return {}

    async def delete_rule(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        name = _text(given, "Name")
        await self.perform(lambda bus: bus.delete_rule(name))
        return {}

    # ------------------------------------------------------------------------------------------------ targets
    async def put_targets(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        name = _text(given, "Rule")
        entries = given.get("Targets")
        if not isinstance(entries, list) or not entries:
            raise _validation("Targets must contain at least one target.")
        accepted: list[Target] = []
        failed: list[dict[str, Any]] = []
        for entry in entries:
            target_id, arn = str(entry.get("Id") or ""), str(entry.get("Arn") or "")
            if not target_id or not arn:
                raise _validation("Each target needs an Id and an Arn.")
            if not arn.startswith("arn:aws:sqs:"):
                failed.append(
                    {
                        "TargetId": target_id,
                        "ErrorCode": "ValidationException",
                        "ErrorMessage": "forewarn delivers to SQS queue targets only.",
                    }
                )
            else:
                accepted.append(Target(target_id, arn))
        if accepted:
            await self.perform(lambda bus: bus.put_targets(name, accepted))
        else:
            self.bus.rule(name)
        return {"FailedEntryCount": len(failed), "FailedEntries": failed}

    async def list_targets(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        rule = self.bus.rule(_text(given, "Rule"))
        return {"Targets": [{"Id": t.target_id, "Arn": t.arn} for t in rule.targets]}

    async def remove_targets(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        name = _text(given, "Rule")
        ids = given.get("Ids")
        if not isinstance(ids, list) or not ids:
            raise _validation("Ids must contain at least one target id.")
        await self.perform(lambda bus: bus.remove_targets(name, [str(i) for i in ids]))
        return {"FailedEntryCount": 0, "FailedEntries": []}

    async def test_event_pattern(self, given: dict[str, Any], region: str | None) -> dict[str, Any]:
        pattern = _pattern(_text(given, "EventPattern"))
        try:
            event = json.loads(_text(given, "Event"))
        except ValueError:
            raise _validation("Event is not valid JSON.") from None
        if not isinstance(event, dict):
            raise _validation("Event must be a JSON object.")
        return {"Result": matches(pattern, event)}


def error_response(error: EventsError, request_id: str) -> Response:
    body = json.dumps({"__type": error.code, "message": error.message})
    return Response(body, status_code=error.status, media_type=JSON_TYPE, headers={"x-amzn-RequestId": request_id})


def _text(given: dict[str, Any], name: str) -> str:
    value = given.get(name)
    if not isinstance(value, str) or not value:
        raise _validation(
            f"1 validation error detected: Value null at '{name[0].lower() + name[1:]}' failed to "
            "satisfy constraint: Member must not be null"
        )
    return value


def _pattern(text: str) -> dict[str, Any]:
    try:
        pattern = json.loads(text)
    except ValueError:
        raise EventsError("InvalidEventPatternException", "Event pattern is not valid JSON.") from None
    check_pattern(pattern)
    return pattern


def _default_bus(given: dict[str, Any]) -> None:
    bus = given.get("EventBusName")
    if bus not in (None, "", "default") and not str(bus).endswith(":event-bus/default"):
        raise EventsError("ResourceNotFoundException", f"Event bus {bus} does not exist.")


def _rule_out(rule: Rule) -> dict[str, Any]:
    out = {
        "Name": rule.name,
        "Arn": rule.arn,
        "EventPattern": rule.pattern_text,
        "State": rule.state,
        "EventBusName": "default",
    }
    if rule.description:
        out["Description"] = rule.description
    return out
