"""``DescribeInstanceStatus``: instances' states, status checks and scheduled events (the EC2 API Reference;
"Scheduled events for your instances"), with its filters and pages."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime

from starlette.responses import Response

from forewarn.aws.ec2_api.backend import Ec2Backend
from forewarn.aws.ec2_api.filters import FILTER_NAME, FILTER_VALUE, Filter, digest_of, read_filters
from forewarn.aws.ec2_api.paging import next_token, page, query_digest, resume_after
from forewarn.aws.ec2_api.params import N, Params, check_instance_ids
from forewarn.aws.ec2_api.protocol import Ec2Error, answer, bad_value, dry_run, instances_not_found, timestamp
from forewarn.aws.ec2_api.registry import action
from forewarn.aws.ec2_api.status import InstanceView
from forewarn.aws.model import Ec2Event

MAX_INSTANCE_IDS = 100
MIN_RESULTS, MAX_RESULTS = 5, 1000
DEFAULT_PAGE = 1000  # a request without MaxResults gets pages of this size (and a NextToken past it)

INSTANCE_ID_N = re.compile(rf"^InstanceId\.{N}$")
PARAMS = frozenset({"DryRun", "MaxResults", "NextToken", "IncludeAllInstances", "IncludeManagedResources"})


def _times(events: list[Ec2Event], pick: Callable[[Ec2Event], datetime | None]) -> list[str]:
    return [timestamp(moment) for moment in map(pick, events) if moment is not None]


# filter name → (the strings of an instance it compares with, whether the values are timestamps)
FILTERS: dict[str, tuple[Callable[[InstanceView], Iterable[str]], bool]] = {
    "availability-zone": (lambda v: (v.instance.availability_zone,), False),
    "availability-zone-id": (lambda v: (v.zone_id,), False),
    "event.code": (lambda v: [e.code.value for e in v.events], False),
    "event.description": (lambda v: [e.shown_description for e in v.events], False),
    "event.instance-event-id": (lambda v: [e.event_id for e in v.events], False),
    "event.not-after": (lambda v: _times(v.events, lambda e: e.not_after), True),
    "event.not-before": (lambda v: _times(v.events, lambda e: e.not_before), True),
    "event.not-before-deadline": (lambda v: _times(v.events, lambda e: e.not_before_deadline), True),
    "instance-state-code": (lambda v: (str(v.state.state.code),), False),
    "instance-state-name": (lambda v: (v.state.state.value,), False),
    "instance-status.reachability": (lambda v: (v.status.reachability,) if v.status.reachability else (), False),
    "instance-status.status": (lambda v: (v.status.status,), False),
    "system-status.reachability": (lambda v: (v.system.reachability,) if v.system.reachability else (), False),
    "system-status.status": (lambda v: (v.system.status,), False),
    "attached-ebs-status.status": (lambda v: (v.ebs.status,), False),
    "application-status.status": (lambda v: ("not-applicable",), False),  # no application health checks
    "operator.managed": (lambda v: ("false",), False),
    "operator.principal": (lambda v: (), False),
}


def instance_filter(name: str, values: list[str]) -> Filter[InstanceView] | None:
    if name not in FILTERS:
        return None
    strings, timestamps = FILTERS[name]
    return Filter(name, values, strings, timestamps)


def _page_size(params: Params, ids: list[str]) -> int:
    max_text = params.get("MaxResults")
    if max_text is None:
        return DEFAULT_PAGE
    if ids:
        raise Ec2Error(
            "InvalidParameterCombination",
            "The parameter instancesSet cannot be used with the parameter maxResults",
        )
    try:
        limit = int(max_text.strip())
    except ValueError:
        raise bad_value("maxResults", max_text, "Expecting an integer.") from None
    if limit < MIN_RESULTS:
        raise bad_value("maxResults", f" {limit} ", f"Expecting a value greater than {MIN_RESULTS}.")
    if limit > MAX_RESULTS:
        raise bad_value("maxResults", f" {limit} ", f"Expecting a value less than or equal to {MAX_RESULTS}.")
    return limit


@action("DescribeInstanceStatus")
def describe_instance_status(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    params.check_known(
        lambda name: (
            name in PARAMS or bool(INSTANCE_ID_N.match(name) or FILTER_NAME.match(name) or FILTER_VALUE.match(name))
        )
    )
    ids = list(dict.fromkeys(value for _, value in params.numbered(INSTANCE_ID_N)))
    check_instance_ids(ids)
    if len(ids) > MAX_INSTANCE_IDS:
        raise Ec2Error(
            "InvalidRequest",
            f"{len(ids)} exceeds the maximum number of instance IDs that can be "
            f"specificied ({MAX_INSTANCE_IDS}). Please specify fewer than {MAX_INSTANCE_IDS} instance IDs.",
        )
    filters = read_filters(params, instance_filter)
    limit = _page_size(params, ids)
    include_all = params.boolean("IncludeAllInstances")
    params.boolean("IncludeManagedResources")  # no managed instances exist: checked, then without effect
    dry = params.boolean("DryRun")
    digest = query_digest(digest_of(filters), include_all, sorted(ids) if ids else None, params.region)
    token = params.get("NextToken")
    after = resume_after(backend.secret, token, digest) if token else ""
    if dry:
        raise dry_run()

    backend.catch_up()
    now = backend.now()
    if ids:
        unknown = [instance_id for instance_id in ids if not backend.visible(instance_id, params.region, now)]
        if unknown:
            raise instances_not_found(unknown)
        candidates = sorted(ids)
    else:
        candidates = backend.ordered_ids()

    def keep(view: InstanceView) -> bool:
        return all(f.matches(view) for f in filters)

    def render(instance_id: str) -> str | None:
        # Asked-for IDs were checked visible above (an unknown one is an error), so no region applies to them.
        return backend.status_item(
            instance_id, now, None if ids else params.region, include_all, keep if filters else None
        )

    items, last = page(candidates, after, limit, render)
    body = ["<instanceStatusSet>" + "".join(items) + "</instanceStatusSet>" if items else "<instanceStatusSet/>"]
    if last is not None:
        body.append(f"<nextToken>{next_token(backend.secret, last, digest)}</nextToken>")
    return answer("DescribeInstanceStatus", request_id, "".join(body))
