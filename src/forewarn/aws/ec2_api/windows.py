"""The event-window actions: ``Create/Describe/Modify/Delete/Associate/DisassociateInstanceEventWindow`` ("Define
event windows for scheduled events"), their answers in the botocore shapes, and DescribeInstanceEventWindows's
filters and pages."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable

from starlette.responses import Response

from forewarn.aws.component import WindowCombination, WindowNotFound
from forewarn.aws.ec2_api.backend import Ec2Backend
from forewarn.aws.ec2_api.filters import FILTER_NAME, FILTER_VALUE, Filter, digest_of, read_filters
from forewarn.aws.ec2_api.paging import next_token, page, query_digest, resume_after
from forewarn.aws.ec2_api.params import N, Params
from forewarn.aws.ec2_api.protocol import (
    Ec2Error,
    answer,
    bad_value,
    dry_run,
    instances_not_found,
    items,
    missing,
    tag_set,
    text,
)
from forewarn.aws.ec2_api.registry import action
from forewarn.aws.ec2_api.window_params import (
    TAG_SPEC_TAG,
    TAG_SPEC_TYPE,
    TARGET_HOST,
    TARGET_INSTANCE,
    TARGET_TAG,
    TIME_RANGE,
    Tags,
    schedule,
    tag_specifications,
    targets,
    window_id,
)
from forewarn.aws.windows import EventWindow
from forewarn.core.errors import Conflict, CoreError, NotFound

WINDOW_NOT_FOUND = "InvalidInstanceEventWindowId.NotFound"  # the spelling of most emulators; docs/aws-api.md
MIN_WINDOW_RESULTS, MAX_WINDOW_RESULTS = 20, 500
DEFAULT_WINDOW_PAGE = 500  # a request without MaxResults (there are at most 200 windows: one page)

WINDOW_ID_N = re.compile(rf"^InstanceEventWindowId\.{N}$")

# DescribeInstanceEventWindows's filters (besides instance-id and tag:<key>, built per request) → a window's strings.
WINDOW_FILTERS: dict[str, Callable[[EventWindow], Iterable[str]]] = {
    "dedicated-host-id": lambda w: w.dedicated_host_ids,
    "event-window-name": lambda w: (w.name,),
    "instance-tag": lambda w: [f"{key}={value}" for key, value in w.instance_tags],
    "instance-tag-key": lambda w: [key for key, _ in w.instance_tags],
    "instance-tag-value": lambda w: [value for _, value in w.instance_tags],
    "tag-key": lambda w: [key for key, _ in w.tags],
    "tag-value": lambda w: [value for _, value in w.tags],
}


# ------------------------------------------------------------------------------------------------------ answers
def window_xml(window: EventWindow, tag: str, state: str) -> str:
    """An InstanceEventWindow, its elements in the botocore shape's order. The association target always carries its
    three lists; ``timeRangeSet``, ``name`` and ``cronExpression`` only when the window has them."""
    parts = [f"<{tag}><instanceEventWindowId>{window.window_id}</instanceEventWindowId>"]
    if window.time_ranges:
        parts.append(
            "<timeRangeSet>"
            + "".join(
                f"<item><startWeekDay>{r.start_weekday}</startWeekDay><startHour>{r.start_hour}</startHour>"
                f"<endWeekDay>{r.end_weekday}</endWeekDay><endHour>{r.end_hour}</endHour></item>"
                for r in window.time_ranges
            )
            + "</timeRangeSet>"
        )
    if window.name:
        parts.append(f"<name>{text(window.name)}</name>")
    if window.cron is not None:
        parts.append(f"<cronExpression>{text(window.cron)}</cronExpression>")
    parts.append(
        f"<associationTarget>{items(window.instance_ids, 'instanceIdSet')}{tag_set(window.instance_tags)}"
        f"{items(window.dedicated_host_ids, 'dedicatedHostIdSet')}</associationTarget>"
    )
    parts.append(f"<state>{state}</state>{tag_set(window.tags)}</{tag}>")
    return "".join(parts)


def _window_answer(action_name: str, window: EventWindow, request_id: str) -> Response:
    return answer(action_name, request_id, window_xml(window, "instanceEventWindow", "creating"))


def windows_not_found(window_ids: list[str]) -> Ec2Error:
    if len(window_ids) == 1:
        return Ec2Error(WINDOW_NOT_FOUND, f"The event window ID '{window_ids[0]}' does not exist")
    return Ec2Error(WINDOW_NOT_FOUND, f"The event window IDs '{', '.join(window_ids)}' do not exist")


async def _changed(command: Awaitable[EventWindow]) -> EventWindow:
    """Run a window command; the engine's refusals in EC2's codes."""
    try:
        return await command
    except WindowNotFound as error:
        raise Ec2Error(WINDOW_NOT_FOUND, str(error)) from None
    except WindowCombination as error:
        raise Ec2Error("InvalidParameterCombination", str(error)) from None
    except NotFound as error:
        message = str(error)
        code = "InvalidHostID.NotFound" if message.startswith("The host ID") else "InvalidInstanceID.NotFound"
        raise Ec2Error(code, message) from None
    except Conflict as error:
        raise Ec2Error("IncorrectState", str(error)) from None
    except CoreError as error:
        raise Ec2Error("InvalidParameterValue", str(error)) from None


# ------------------------------------------------------------------------------------------------------ actions
@action("CreateInstanceEventWindow")
async def create_instance_event_window(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    params.check_known(
        lambda name: (
            name in ("DryRun", "Name", "CronExpression")
            or bool(TIME_RANGE.match(name) or TAG_SPEC_TYPE.match(name) or TAG_SPEC_TAG.match(name))
        )
    )
    name = params.get("Name") or ""
    ranges, cron = schedule(params)
    if not ranges and cron is None:
        raise missing("TimeRange or CronExpression")
    tags = tag_specifications(params)
    if params.boolean("DryRun"):
        raise dry_run()
    window = await _changed(backend.create_window(name, ranges, cron, tags))
    return _window_answer("CreateInstanceEventWindow", window, request_id)


@action("ModifyInstanceEventWindow")
async def modify_instance_event_window(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    params.check_known(
        lambda name: (
            name in ("DryRun", "Name", "CronExpression", "InstanceEventWindowId") or bool(TIME_RANGE.match(name))
        )
    )
    window = window_id(params)
    name = params.get("Name")
    ranges, cron = schedule(params)
    if params.boolean("DryRun"):
        raise dry_run()
    changed = await _changed(backend.modify_window(window, name, ranges or None, cron))
    return _window_answer("ModifyInstanceEventWindow", changed, request_id)


@action("DeleteInstanceEventWindow")
async def delete_instance_event_window(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    params.check_known(lambda name: name in ("DryRun", "ForceDelete", "InstanceEventWindowId"))
    window = window_id(params)
    force = params.boolean("ForceDelete")
    if params.boolean("DryRun"):
        raise dry_run()
    deleted = await _changed(backend.delete_window(window, force))
    return answer(
        "DeleteInstanceEventWindow",
        request_id,
        f"<instanceEventWindowState><instanceEventWindowId>{deleted.window_id}</instanceEventWindowId>"
        "<state>deleting</state></instanceEventWindowState>",
    )


def _association_params(params: Params) -> None:
    params.check_known(
        lambda name: (
            name in ("DryRun", "InstanceEventWindowId")
            or bool(TARGET_INSTANCE.match(name) or TARGET_HOST.match(name) or TARGET_TAG.match(name))
        )
    )


def _association(backend: Ec2Backend, params: Params) -> tuple[str, tuple[str, ...], Tags, tuple[str, ...]]:
    """What both association actions check first: their parameters, DryRun, and that the window exists."""
    _association_params(params)
    window = window_id(params)
    instance_ids, tags, hosts = targets(params)
    if params.boolean("DryRun"):
        raise dry_run()
    backend.catch_up()
    if window not in backend.windows:
        raise windows_not_found([window])
    return window, instance_ids, tags, hosts


@action("AssociateInstanceEventWindow")
async def associate_instance_event_window(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    window, instance_ids, tags, hosts = _association(backend, params)
    now = backend.now()
    unknown = [iid for iid in instance_ids if not backend.visible(iid, params.region, now)]
    if unknown:
        raise instances_not_found(unknown)
    changed = await _changed(backend.associate_window(window, instance_ids, tags, hosts))
    return _window_answer("AssociateInstanceEventWindow", changed, request_id)


@action("DisassociateInstanceEventWindow")
async def disassociate_instance_event_window(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    window, instance_ids, tags, hosts = _association(backend, params)
    changed = await _changed(backend.disassociate_window(window, instance_ids, tags, hosts))
    return _window_answer("DisassociateInstanceEventWindow", changed, request_id)


# ------------------------------------------------------------------------------------ DescribeInstanceEventWindows
def _page_size(params: Params, ids: list[str]) -> int:
    max_text = params.get("MaxResults")
    if max_text is None:
        return DEFAULT_WINDOW_PAGE
    if ids:
        raise Ec2Error(
            "InvalidParameterCombination",
            "The parameter instanceEventWindowIdSet cannot be used with the parameter maxResults",
        )
    try:
        limit = int(max_text.strip())
    except ValueError:
        raise bad_value("maxResults", max_text, "Expecting an integer.") from None
    if not MIN_WINDOW_RESULTS <= limit <= MAX_WINDOW_RESULTS:
        raise bad_value(
            "maxResults", f" {limit} ", f"Expecting a value from {MIN_WINDOW_RESULTS} to {MAX_WINDOW_RESULTS}."
        )
    return limit


def window_filter(name: str, values: list[str]) -> Filter[EventWindow] | None:
    if name in WINDOW_FILTERS:
        return Filter(name, values, WINDOW_FILTERS[name])
    if name == "instance-id":
        return Filter(name, values, lambda window: ())  # matched by windows_of_instances
    if name.startswith("tag:") and len(name) > 4:
        key = name[4:]
        return Filter(name, values, lambda window: [value for k, value in window.tags if k == key])
    return None


def windows_of_instances(backend: Ec2Backend, found: Filter[EventWindow]) -> set[str]:
    """The windows of the instances an ``instance-id`` filter names: the windows an instance is associated with
    by its ID; an instance associated with none by ID falls back to the windows that take it in through its
    tags or its Dedicated Host (the API reference of DescribeInstanceEventWindows)."""
    windows = list(backend.windows.values())
    instances = backend.instances
    direct: dict[str, set[str]] = {}
    for window in windows:
        for instance_id in window.instance_ids:
            direct.setdefault(instance_id, set()).add(window.window_id)
    candidates = set(direct) | set(instances) if found.wild else found.literals
    selected: set[str] = set()
    for instance_id in candidates:
        if not found.matches_text(instance_id):
            continue
        if instance_id in direct:
            selected |= direct[instance_id]
            continue
        instance = instances.get(instance_id)
        if instance is None:
            continue
        for window in windows:
            if any(instance.tags.get(key) == value for key, value in window.instance_tags) or (
                instance.dedicated_host is not None and instance.dedicated_host in window.dedicated_host_ids
            ):
                selected.add(window.window_id)
    return selected


def _predicate(backend: Ec2Backend, found: Filter[EventWindow]) -> Callable[[EventWindow], bool]:
    if found.name != "instance-id":
        return found.matches
    selected = windows_of_instances(backend, found)
    return lambda window: window.window_id in selected


@action("DescribeInstanceEventWindows")
def describe_instance_event_windows(backend: Ec2Backend, params: Params, request_id: str) -> Response:
    params.check_known(
        lambda name: (
            name in ("DryRun", "MaxResults", "NextToken")
            or bool(WINDOW_ID_N.match(name) or FILTER_NAME.match(name) or FILTER_VALUE.match(name))
        )
    )
    ids = list(dict.fromkeys(value.strip() for _, value in params.numbered(WINDOW_ID_N)))
    filters = read_filters(params, window_filter)
    limit = _page_size(params, ids)
    digest = query_digest("windows", digest_of(filters), sorted(ids) if ids else None)
    token = params.get("NextToken")
    after = resume_after(backend.secret, token, digest) if token else ""
    if params.boolean("DryRun"):
        raise dry_run()

    backend.catch_up()
    windows = backend.windows
    if ids:
        unknown = [window for window in ids if window not in windows]
        if unknown:
            raise windows_not_found(unknown)
        candidates = sorted(ids)
    else:
        candidates = sorted(windows)
    predicates = [_predicate(backend, f) for f in filters]

    def render(key: str) -> str | None:
        window = windows[key]
        if not all(predicate(window) for predicate in predicates):
            return None
        return window_xml(window, "item", window.state)

    shown, last = page(candidates, after, limit, render)
    body = [
        "<instanceEventWindowSet>" + "".join(shown) + "</instanceEventWindowSet>"
        if shown
        else "<instanceEventWindowSet/>"
    ]
    if last is not None:
        body.append(f"<nextToken>{next_token(backend.secret, last, digest)}</nextToken>")
    return answer("DescribeInstanceEventWindows", request_id, "".join(body))
