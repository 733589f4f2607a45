"""The Amazon EC2 Auto Scaling actions of lifecycle hooks, over the query protocol (``Action=...&Version=2011-01-01``,
XML answers in ``http://autoscaling.amazonaws.com/doc/2011-01-01/``, errors ``<ErrorResponse>`` with ``ValidationError``),
served on the EC2 API's port: PutLifecycleHook, DescribeLifecycleHooks, DeleteLifecycleHook, CompleteLifecycleAction,
RecordLifecycleActionHeartbeat, and the two a scale-in needs, TerminateInstanceInAutoScalingGroup and
DescribeAutoScalingInstances (the Amazon EC2 Auto Scaling API Reference). A group is the fleet file's
``auto_scaling_group`` of its instances."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from starlette.responses import Response

from forewarn.app.runtime import Maintenance
from forewarn.aws.component import Ec2Component
from forewarn.aws.lifecycle import TERMINATING, LifecycleAction, LifecycleHook
from forewarn.core.changes import Change
from forewarn.core.errors import CoreError
from forewarn.engine.engine import Engine

API_VERSION = "2011-01-01"
NAMESPACE = f"http://autoscaling.amazonaws.com/doc/{API_VERSION}/"
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class AutoScalingError(Exception):
    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def _text(value: object) -> str:
    return _NOT_XML.sub("", str(value)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def answer(action: str, inner: str, request_id: str) -> Response:
    body = (
        f'<{action}Response xmlns="{NAMESPACE}"><{action}Result>{inner}</{action}Result>'
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>"
    )
    return Response(body, media_type="text/xml", headers={"x-amzn-RequestId": request_id})


def error_response(error: AutoScalingError, request_id: str) -> Response:
    body = (
        f'<ErrorResponse xmlns="{NAMESPACE}"><Error><Type>Sender</Type><Code>{_text(error.code)}</Code>'
        f"<Message>{_text(error.message)}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return Response(body, status_code=error.status, media_type="text/xml", headers={"x-amzn-RequestId": request_id})


def _required(params: Mapping[str, str], name: str) -> str:
    value = params.get(name)
    if not value:
        raise AutoScalingError(
            "ValidationError",
            f"1 validation error detected: Value null at '{name}' failed to satisfy constraint: Member must not be null",
        )
    return value


class AutoScalingApi:
    def __init__(self, service: Maintenance):
        self.service = service
        self.actions: dict[str, Callable[[Mapping[str, str]], Any]] = {
            "PutLifecycleHook": self.put_lifecycle_hook,
            "DescribeLifecycleHooks": self.describe_lifecycle_hooks,
            "DeleteLifecycleHook": self.delete_lifecycle_hook,
            "CompleteLifecycleAction": self.complete_lifecycle_action,
            "RecordLifecycleActionHeartbeat": self.record_heartbeat,
            "TerminateInstanceInAutoScalingGroup": self.terminate_instance,
            "DescribeAutoScalingInstances": self.describe_instances,
        }

    @property
    def component(self) -> Ec2Component:
        return self.service.settled_engine().component(Ec2Component)

    async def call(self, params: Mapping[str, str], request_id: str) -> Response:
        action = params.get("Action") or ""
        try:
            handler = self.actions.get(action)
            if handler is None:
                raise AutoScalingError("InvalidAction", f"The action {action} is not valid for this web service.")
            try:
                inner = await handler(params)
            except CoreError as error:
                raise AutoScalingError("ValidationError", str(error)) from error
            return answer(action, inner, request_id)
        except AutoScalingError as error:
            return error_response(error, request_id)

    async def perform(self, command: Callable[[Ec2Component], list[Change]]) -> list[Change]:
        def run(engine: Engine) -> list[Change]:
            return command(engine.component(Ec2Component))

        return await self.service.perform_soon(run)

    async def put_lifecycle_hook(self, params: Mapping[str, str]) -> str:
        group, name = _required(params, "AutoScalingGroupName"), _required(params, "LifecycleHookName")
        known = self.component.lifecycle.hooks.get(f"{group}/{name}")
        if known is None and not params.get("LifecycleTransition"):
            raise AutoScalingError("ValidationError", "LifecycleTransition must be given for a new lifecycle hook")
        # PutLifecycleHook on an existing hook changes only what is given.
        hook = known or LifecycleHook(group=group, name=name, transition=TERMINATING)
        given: dict[str, Any] = {
            field: params[name]
            for name, field in (
                ("LifecycleTransition", "transition"),
                ("DefaultResult", "default_result"),
                ("NotificationTargetARN", "notification_target_arn"),
                ("RoleARN", "role_arn"),
                ("NotificationMetadata", "notification_metadata"),
            )
            if params.get(name)
        }
        if params.get("HeartbeatTimeout"):
            given["heartbeat_timeout"] = _whole(params["HeartbeatTimeout"], hook.heartbeat_timeout)
        hook = replace(hook, **given)
        await self.perform(lambda component: component.put_lifecycle_hook(hook))
        return ""

    async def describe_lifecycle_hooks(self, params: Mapping[str, str]) -> str:
        group = _required(params, "AutoScalingGroupName")
        self.service.catch_up()
        names = {value for key, value in params.items() if key.startswith("LifecycleHookNames.member.")}
        members = []
        for hook in sorted(self.component.lifecycle.of_group(group), key=lambda h: h.name):
            if names and hook.name not in names:
                continue
            fields = [
                ("LifecycleHookName", hook.name),
                ("AutoScalingGroupName", hook.group),
                ("LifecycleTransition", hook.transition),
                ("NotificationTargetARN", hook.notification_target_arn),
                ("RoleARN", hook.role_arn),
                ("NotificationMetadata", hook.notification_metadata),
                ("HeartbeatTimeout", hook.heartbeat_timeout),
                ("GlobalTimeout", hook.global_timeout),
                ("DefaultResult", hook.default_result),
            ]
            members.append("".join(f"<{k}>{_text(v)}</{k}>" for k, v in fields if v is not None))
        return "<LifecycleHooks>" + "".join(f"<member>{m}</member>" for m in members) + "</LifecycleHooks>"

    async def delete_lifecycle_hook(self, params: Mapping[str, str]) -> str:
        group, name = _required(params, "AutoScalingGroupName"), _required(params, "LifecycleHookName")
        await self.perform(lambda component: component.delete_lifecycle_hook(group, name))
        return ""

    async def complete_lifecycle_action(self, params: Mapping[str, str]) -> str:
        group, hook = _required(params, "AutoScalingGroupName"), _required(params, "LifecycleHookName")
        result = _required(params, "LifecycleActionResult")
        token, instance = params.get("LifecycleActionToken"), params.get("InstanceId")
        if token is None and instance is None:
            raise AutoScalingError("ValidationError", "Either LifecycleActionToken or InstanceId must be given")
        await self.perform(lambda c: c.complete_lifecycle_action(group, hook, token, instance, result))
        return ""

    async def record_heartbeat(self, params: Mapping[str, str]) -> str:
        group, hook = _required(params, "AutoScalingGroupName"), _required(params, "LifecycleHookName")
        token, instance = params.get("LifecycleActionToken"), params.get("InstanceId")
        if token is None and instance is None:
            raise AutoScalingError("ValidationError", "Either LifecycleActionToken or InstanceId must be given")
        await self.perform(lambda c: c.record_lifecycle_heartbeat(group, hook, token, instance))
        return ""

    async def terminate_instance(self, params: Mapping[str, str]) -> str:
        instance_id = _required(params, "InstanceId")
        decrement = _required(params, "ShouldDecrementDesiredCapacity").lower() == "true"
        await self.perform(lambda component: component.terminate_in_group(instance_id, decrement))
        group = self.component.ec2_instances[instance_id].auto_scaling_group or ""
        activity = [
            ("ActivityId", str(uuid.uuid4())),
            ("AutoScalingGroupName", group),
            ("Description", f"Terminating EC2 instance: {instance_id}"),
            (
                "Cause",
                f"At {self.service.now().isoformat()} instance {instance_id} was taken out of service in "
                "response to a user request" + (", shrinking the capacity." if decrement else "."),
            ),
            ("StartTime", self.service.now().strftime("%Y-%m-%dT%H:%M:%S.000Z")),
            ("StatusCode", "InProgress"),
            ("Progress", "0"),
        ]
        return "<Activity>" + "".join(f"<{k}>{_text(v)}</{k}>" for k, v in activity) + "</Activity>"

    async def describe_instances(self, params: Mapping[str, str]) -> str:
        self.service.catch_up()
        component = self.component
        wanted = [value for key, value in params.items() if key.startswith("InstanceIds.member.")]
        members = []
        for instance_id in sorted(wanted or component.ec2_instances):
            instance = component.ec2_instances.get(instance_id)
            state = component.ec2_states.get(instance_id)
            actions = component.lifecycle.waiting(instance_id)
            waiting = bool(actions)
            if instance is None or state is None or instance.auto_scaling_group is None or (state.gone and not waiting):
                continue  # an instance EC2 ended is its group's until its terminating hooks are done
            fields = [
                ("InstanceId", instance_id),
                ("InstanceType", instance.instance_type),
                ("AutoScalingGroupName", instance.auto_scaling_group),
                ("AvailabilityZone", instance.availability_zone),
                ("LifecycleState", _lifecycle_state(actions)),
                ("HealthStatus", "HEALTHY"),
                ("ProtectedFromScaleIn", "false"),
            ]
            members.append("".join(f"<{k}>{_text(v)}</{k}>" for k, v in fields))
        return "<AutoScalingInstances>" + "".join(f"<member>{m}</member>" for m in members) + "</AutoScalingInstances>"


def _lifecycle_state(actions: list[LifecycleAction]) -> str:
    """An instance's state in its group: waiting on a termination's hooks, a launch's, or in service."""
    if any(action.transition == TERMINATING for action in actions):
        return "Terminating:Wait"
    return "Pending:Wait" if actions else "InService"


def _whole(text: str | None, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise AutoScalingError("ValidationError", f"Value {text} is not a whole number") from None
