"""The control API's routes for the AWS queue path: the SQS queues and what they hold, the lifecycle actions
instances wait on, and the faults of the path (throttled API actions, delayed or duplicated deliveries;
aws/faults.py)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from forewarn.app.runtime import Maintenance
from forewarn.aws.component import Ec2Component
from forewarn.aws.faults import MAX_BURST, MAX_RATE, SERVICES, DeliveryFaults, QueueFaults, Throttle, faults_of
from forewarn.aws.lifecycle import LifecycleAction
from forewarn.aws.queues import Message, Queue, Queues
from forewarn.control.models import ERRORS
from forewarn.control.service import ControlService
from forewarn.core.durations import parse_duration
from forewarn.core.times import format_optional_time, format_time


class QueueOut(BaseModel):
    name: str
    arn: str
    visible: int
    in_flight: int
    delayed: int
    visibility_timeout: int
    dead_letter_target_arn: str | None
    max_receive_count: int | None

    @classmethod
    def of(cls, queue: Queue, queues: Queues) -> QueueOut:
        visible, in_flight, delayed = queues.counts(queue.name)
        redrive = queue.settings.redrive
        return cls(
            name=queue.name,
            arn=queue.arn,
            visible=visible,
            in_flight=in_flight,
            delayed=delayed,
            visibility_timeout=queue.settings.visibility_timeout,
            dead_letter_target_arn=None if redrive is None else redrive.dead_letter_target_arn,
            max_receive_count=None if redrive is None else redrive.max_receive_count,
        )


class MessageOut(BaseModel):
    message_id: str
    body: str
    sent_at: str
    visible_at: str
    receive_count: int
    first_received_at: str | None
    in_flight: bool

    @classmethod
    def of(cls, message: Message, now: datetime) -> MessageOut:
        return cls(
            message_id=message.message_id,
            body=message.body,
            sent_at=format_time(message.sent_at),
            visible_at=format_time(message.visible_at),
            receive_count=message.receive_count,
            first_received_at=format_optional_time(message.first_received_at),
            in_flight=message.in_flight(now),
        )


class QueueShown(QueueOut):
    messages: list[MessageOut]


class LifecycleActionOut(BaseModel):
    token: str
    group: str
    hook: str
    instance_id: str
    transition: str
    started_at: str
    timeout_at: str
    global_at: str

    @classmethod
    def of(cls, action: LifecycleAction) -> LifecycleActionOut:
        return cls(
            token=action.token,
            group=action.group,
            hook=action.hook,
            instance_id=action.instance_id,
            transition=action.transition,
            started_at=format_time(action.started_at),
            timeout_at=format_time(action.timeout_at),
            global_at=format_time(action.global_at),
        )


class ThrottleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    service: str = Field(description=f"the service throttled: {', '.join(SERVICES)}", examples=["ec2"])
    actions: list[str] = Field(
        default_factory=list,
        description="its actions throttled (every one when empty)",
        examples=[["DescribeInstanceStatus"]],
    )
    rate: float = Field(
        default=0.0,
        ge=0,
        le=MAX_RATE,
        description="requests a second let through, wall-clock time (0: none after the burst)",
    )
    burst: int = Field(
        default=0, ge=0, le=MAX_BURST, strict=True, description="requests let through at once before throttling starts"
    )


class ThrottleOut(BaseModel):
    throttle_id: int
    service: str
    actions: list[str]
    rate: float
    burst: int
    refused: int

    @classmethod
    def of(cls, throttle: Throttle) -> ThrottleOut:
        return cls(
            throttle_id=throttle.throttle_id,
            service=throttle.service,
            actions=sorted(throttle.actions),
            rate=throttle.rate,
            burst=throttle.burst,
            refused=throttle.refused,
        )


class DeliveryFaultsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    duplicate: float = Field(
        default=0.0, ge=0, le=1, description="the fraction of deliveries to queues sent twice (0 to 1)"
    )
    delayed: float = Field(default=0.0, ge=0, le=1, description="the fraction of deliveries held back (0 to 1)")
    delay: str | None = Field(default=None, description="how long a delayed delivery waits, forewarn's clock (≤ 15m)")


class DeliveryFaultsOut(BaseModel):
    duplicate: float
    delayed: float
    delay_seconds: int

    @classmethod
    def of(cls, faults: DeliveryFaults) -> DeliveryFaultsOut:
        return cls(duplicate=faults.duplicate, delayed=faults.delayed, delay_seconds=faults.delay_seconds)


class FaultsOut(BaseModel):
    throttles: list[ThrottleOut]
    deliveries: DeliveryFaultsOut

    @classmethod
    def of(cls, faults: QueueFaults) -> FaultsOut:
        return cls(
            throttles=[ThrottleOut.of(t) for t in faults.throttles], deliveries=DeliveryFaultsOut.of(faults.deliveries)
        )


def _queues(service: Maintenance) -> Queues:
    service.catch_up()
    return service.settled_engine().component(Ec2Component).queues


router = APIRouter()


@router.get("/v1/ec2/queues", tags=["ec2 queues"], response_model=list[QueueOut])
async def list_queues(service: ControlService):
    held = _queues(service)
    return [QueueOut.of(held.queues[name], held) for name in sorted(held.queues)]


@router.get("/v1/ec2/queues/{name}", tags=["ec2 queues"], response_model=QueueShown, responses=ERRORS)
async def show_queue(service: ControlService, name: str):
    """A queue and every message it holds, oldest first (reading them receives nothing)."""
    held = _queues(service)
    queue = held.queue(name)
    messages = sorted(held.messages[name].values(), key=lambda m: m.seq)
    now = service.now()
    return QueueShown(**QueueOut.of(queue, held).model_dump(), messages=[MessageOut.of(m, now) for m in messages])


@router.get("/v1/ec2/lifecycle-actions", tags=["ec2 queues"], response_model=list[LifecycleActionOut])
async def lifecycle_actions(service: ControlService):
    """The lifecycle actions instances wait on now (Terminating:Wait, Pending:Wait), oldest first."""
    service.catch_up()
    actions = service.settled_engine().component(Ec2Component).lifecycle.actions.values()
    return [LifecycleActionOut.of(a) for a in sorted(actions, key=lambda a: (a.started_at, a.token))]


@router.get("/v1/ec2/faults", tags=["ec2 queues"], response_model=FaultsOut)
async def list_faults(service: ControlService):
    return FaultsOut.of(faults_of(service))


@router.post(
    "/v1/ec2/faults/throttles", tags=["ec2 queues"], status_code=201, response_model=ThrottleOut, responses=ERRORS
)
async def throttle(service: ControlService, body: ThrottleIn):
    """Throttle a service's actions on the EC2 API's port (a token bucket: ``burst`` at once, then ``rate`` a
    second); a throttled request gets its service's throttling error (EC2's RequestLimitExceeded, SQS's
    RequestThrottled, EventBridge's ThrottlingException, Auto Scaling's Throttling). In memory only."""
    return ThrottleOut.of(faults_of(service).throttle(body.service, body.actions, body.rate, body.burst))


@router.put("/v1/ec2/faults/deliveries", tags=["ec2 queues"], response_model=DeliveryFaultsOut, responses=ERRORS)
async def deliveries(service: ControlService, body: DeliveryFaultsIn):
    """Duplicate or delay a fraction of the deliveries rules and lifecycle hooks make to queues (replaces the
    previous setting). In memory only."""
    seconds = 0 if body.delay is None else int(parse_duration(body.delay).total_seconds())
    faults = faults_of(service)
    faults.deliveries = DeliveryFaults(body.duplicate, body.delayed, seconds).check()
    return DeliveryFaultsOut.of(faults.deliveries)


@router.delete("/v1/ec2/faults", tags=["ec2 queues"])
async def clear_faults(service: ControlService):
    return {"cleared": faults_of(service).clear()}
