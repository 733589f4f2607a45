"""Plain-data encoding of core records for the store (JSON text in one column, same for every database)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from forewarn.aws.model import Ec2Code, Ec2Event, Ec2EventState, Ec2State, InstanceState
from forewarn.aws.windows import EventWindow, TimeRange
from forewarn.azure.model import Event, EventSource, EventStatus, EventType, Impact
from forewarn.azure.vms import NotificationProfile, Policy, Power, VmState, policies_from_records, policy_records
from forewarn.core.clock import Clock
from forewarn.waves.component import UnitRun, Wave, WaveOrder, WaveSpec, WaveStatus


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def encode_event(event: Event) -> str:
    return json.dumps(
        {
            "event_id": event.event_id,
            "seq": event.seq,
            "operation_id": event.operation_id,
            "scope": event.scope,
            "event_type": event.event_type.value,
            "source": event.source.value,
            "resources": list(event.resources),
            "description": event.description,
            "duration_seconds": event.duration_seconds,
            "not_before": _time(event.not_before),
            "impact_window": event.impact_window.total_seconds(),
            "status": event.status.value,
            "created_at": _time(event.created_at),
            "started_at": _time(event.started_at),
            "ends_at": _time(event.ends_at),
            "ended_at": _time(event.ended_at),
            "approvals": list(event.approvals),
            "impact": None if event.impact is None else event.impact.value,
            "extra_impacts": event.extra_impacts,
            "central": event.central,
        },
        separators=(",", ":"),
    )


def decode_event(text: str) -> Event:
    data = json.loads(text)
    return Event(
        event_id=data["event_id"],
        seq=data["seq"],
        operation_id=data["operation_id"],
        scope=data["scope"],
        event_type=EventType(data["event_type"]),
        source=EventSource(data["source"]),
        resources=tuple(data["resources"]),
        description=data["description"],
        duration_seconds=data["duration_seconds"],
        not_before=_parse_time(data["not_before"]),
        impact_window=timedelta(seconds=data["impact_window"]),
        status=EventStatus(data["status"]),
        created_at=_parse_time(data["created_at"]),
        started_at=_parse_time(data["started_at"]),
        ends_at=_parse_time(data["ends_at"]),
        ended_at=_parse_time(data["ended_at"]),
        approvals=tuple(data["approvals"]),
        impact=None if data.get("impact") is None else Impact(data["impact"]),
        extra_impacts=data.get("extra_impacts", 0),
        central=data.get("central", False),
    )


def encode_clock(clock: Clock) -> str:
    return json.dumps(
        {
            "mode": clock.mode,
            "speed": clock.speed,
            "anchor_wall": clock.anchor_wall,
            "anchor_sim": _time(clock.anchor_sim),
        }
    )


def decode_clock(text: str) -> Clock:
    data = json.loads(text)
    return Clock(data["mode"], data["speed"], data["anchor_wall"], _parse_time(data["anchor_sim"]))


def encode_vm_state(state: VmState) -> str:
    return json.dumps(
        {
            "name": state.name,
            "power": state.power.value,
            "host": state.host,
            "booted_at": _time(state.booted_at),
            "temp_disk_generation": state.temp_disk_generation,
            "os_disk_generation": state.os_disk_generation,
            "memory_generation": state.memory_generation,
            "impacted_by": state.impacted_by,
            "impact_until": _time(state.impact_until),
            "terminate": [state.terminate.enable, state.terminate.not_before_timeout.total_seconds()],
            "os_image": [state.os_image.enable, state.os_image.not_before_timeout.total_seconds()],
            "model_version": state.model_version,
            "deleted_at": _time(state.deleted_at),
        },
        separators=(",", ":"),
    )


def decode_vm_state(text: str) -> VmState:
    data = json.loads(text)
    return VmState(
        name=data["name"],
        power=Power(data["power"]),
        host=data["host"],
        booted_at=_parse_time(data["booted_at"]),
        temp_disk_generation=data["temp_disk_generation"],
        os_disk_generation=data["os_disk_generation"],
        memory_generation=data["memory_generation"],
        impacted_by=data["impacted_by"],
        impact_until=_parse_time(data["impact_until"]),
        terminate=NotificationProfile(data["terminate"][0], timedelta(seconds=data["terminate"][1])),
        os_image=NotificationProfile(data["os_image"][0], timedelta(seconds=data["os_image"][1])),
        model_version=data["model_version"],
        deleted_at=_parse_time(data["deleted_at"]),
    )


def encode_policy(policy: Policy) -> str:
    return json.dumps(policy_records([policy])[0], separators=(",", ":"))


def decode_policy(text: str) -> Policy:
    return policies_from_records([json.loads(text)])[0]


def encode_ec2_event(event: Ec2Event) -> str:
    return json.dumps(
        {
            "event_id": event.event_id,
            "seq": event.seq,
            "instance_id": event.instance_id,
            "code": event.code.value,
            "description": event.description,
            "not_before": _time(event.not_before),
            "not_after": _time(event.not_after),
            "not_before_deadline": _time(event.not_before_deadline),
            "state": event.state.value,
            "created_at": _time(event.created_at),
            "started_at": _time(event.started_at),
            "ends_at": _time(event.ends_at),
            "ended_at": _time(event.ended_at),
        },
        separators=(",", ":"),
    )


def decode_ec2_event(text: str) -> Ec2Event:
    data = json.loads(text)
    return Ec2Event(
        event_id=data["event_id"],
        seq=data["seq"],
        instance_id=data["instance_id"],
        code=Ec2Code(data["code"]),
        description=data["description"],
        not_before=_parse_time(data["not_before"]),
        not_after=_parse_time(data["not_after"]),
        not_before_deadline=_parse_time(data["not_before_deadline"]),
        state=Ec2EventState(data["state"]),
        created_at=_parse_time(data["created_at"]),
        started_at=_parse_time(data["started_at"]),
        ends_at=_parse_time(data["ends_at"]),
        ended_at=_parse_time(data["ended_at"]),
    )


_EC2_TIMES = ("launched_at", "booted_at", "impact_until", "spot_action_time", "rebalance_at", "terminated_at")


def encode_ec2_state(state: Ec2State) -> str:
    data = {key: getattr(state, key) for key in Ec2State.__dataclass_fields__}
    data["state"] = state.state.value
    for key in _EC2_TIMES:
        data[key] = _time(data[key])
    return json.dumps(data, separators=(",", ":"))


def decode_ec2_state(text: str) -> Ec2State:
    data = json.loads(text)
    data["state"] = InstanceState(data["state"])
    for key in _EC2_TIMES:
        data[key] = _parse_time(data.get(key))
    return Ec2State(**data)


def encode_window(window: EventWindow) -> str:
    data = {key: getattr(window, key) for key in EventWindow.__dataclass_fields__}
    data["time_ranges"] = [list(vars(r).values()) for r in window.time_ranges]
    return json.dumps(data, separators=(",", ":"))


def decode_window(text: str) -> EventWindow:
    data = json.loads(text)
    data["time_ranges"] = tuple(TimeRange(*r) for r in data["time_ranges"])
    for key in ("instance_ids", "dedicated_host_ids"):
        data[key] = tuple(data[key])
    for key in ("instance_tags", "tags"):
        data[key] = tuple(tuple(pair) for pair in data[key])
    return EventWindow(**data)


# Waves: the plan (targets, units: up to one per host of the fleet) is written once, the progress on every change, so
# that a 10,000-unit wave does not rewrite its unit list 10,000 times.
def encode_wave_plan(wave: Wave) -> str:
    spec = wave.spec
    return json.dumps(
        {
            "wave_id": wave.wave_id,
            "event_type": spec.event_type.value,
            "order": spec.order.value,
            "concurrency": spec.concurrency,
            "groups": list(spec.groups),
            "source": spec.source.value,
            "notice": None if spec.notice is None else spec.notice.total_seconds(),
            "duration_seconds": spec.duration_seconds,
            "impact_window": None if spec.impact_window is None else spec.impact_window.total_seconds(),
            "description": spec.description,
            "name": spec.name,
            "owners": list(wave.owners),
            "units": list(wave.units),
            "created_at": _time(wave.created_at),
        },
        separators=(",", ":"),
    )


def encode_wave_progress(wave: Wave) -> str:
    return json.dumps(
        {
            "status": wave.status.value,
            "next_unit": wave.next_unit,
            "in_flight": [[run.unit, list(run.operations)] for run in wave.in_flight],
            "done": wave.done,
            "skipped": list(wave.skipped),
            "finished_at": _time(wave.finished_at),
        },
        separators=(",", ":"),
    )


def decode_wave(plan_text: str, progress_text: str) -> Wave:
    plan, progress = json.loads(plan_text), json.loads(progress_text)

    def seconds(value: float | None) -> timedelta | None:
        return None if value is None else timedelta(seconds=value)

    spec = WaveSpec(
        event_type=EventType(plan["event_type"]),
        order=WaveOrder(plan["order"]),
        concurrency=plan["concurrency"],
        groups=tuple(plan["groups"]),
        source=EventSource(plan["source"]),
        notice=seconds(plan["notice"]),
        duration_seconds=plan["duration_seconds"],
        impact_window=seconds(plan["impact_window"]),
        description=plan["description"],
        name=plan["name"],
    )
    return Wave(
        wave_id=plan["wave_id"],
        spec=spec,
        owners=tuple(plan["owners"]),
        units=tuple(plan["units"]),
        created_at=datetime.fromisoformat(plan["created_at"]),
        status=WaveStatus(progress["status"]),
        next_unit=progress["next_unit"],
        in_flight=tuple(UnitRun(unit, tuple(operations)) for unit, operations in progress["in_flight"]),
        done=progress["done"],
        skipped=tuple(progress["skipped"]),
        finished_at=_parse_time(progress["finished_at"]),
    )
