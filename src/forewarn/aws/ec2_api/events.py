"""``ModifyInstanceEventStartTime``: move a scheduled event within its deadline ("Scheduled events for your
instances", "Reschedule a scheduled event")."""

from __future__ import annotations

from starlette.responses import Response

from forewarn.aws.component import RescheduleRefused
from forewarn.aws.ec2_api.backend import Ec2Backend
from forewarn.aws.ec2_api.params import Params, check_instance_ids, parse_time
from forewarn.aws.ec2_api.protocol import Ec2Error, answer, bad_value, dry_run, instances_not_found, missing
from forewarn.aws.ec2_api.registry import action
from forewarn.aws.ec2_api.status import event_xml
from forewarn.core.errors import Conflict, CoreError, NotFound

PARAMS = frozenset({"DryRun", "InstanceId", "InstanceEventId", "NotBefore"})


@action("ModifyInstanceEventStartTime")
async def modify_instance_event_start_time(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    params.check_known(lambda name: name in PARAMS)
    given = {}
    for name in ("InstanceId", "InstanceEventId", "NotBefore"):
        value = params.get(name)
        if value is None or not value.strip():
            raise missing(name)
        given[name] = value.strip()
    instance_id, event_id = given["InstanceId"], given["InstanceEventId"]
    check_instance_ids([instance_id])
    not_before = parse_time(given["NotBefore"])
    if not_before is None:
        raise bad_value(
            "NotBefore", given["NotBefore"], "Expecting an ISO 8601 date and time, such as 2019-03-25T10:00:00Z."
        )
    if params.boolean("DryRun"):
        raise dry_run()
    backend.catch_up()
    if not backend.visible(instance_id, params.region, backend.now()):
        raise instances_not_found([instance_id])
    try:
        event = await backend.reschedule_event(instance_id, event_id, not_before)
    except RescheduleRefused as refused:
        raise Ec2Error(
            "InvalidInstanceEventStartTime",
            "The specified scheduled event start time does not meet the requirements for rescheduling "
            f"a scheduled event: {refused}.",
        ) from None
    except NotFound as error:
        if instance_id not in backend.instances:
            raise instances_not_found([instance_id]) from None
        raise Ec2Error("InvalidInstanceEventIDNotFound", str(error)) from None
    except Conflict as error:
        raise Ec2Error("IncorrectState", str(error)) from None
    except CoreError as error:
        raise Ec2Error("InvalidParameterValue", str(error)) from None
    return answer("ModifyInstanceEventStartTime", request_id, event_xml(event, "event"))
