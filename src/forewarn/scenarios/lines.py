"""The one-line texts a scenario run prints: a document, an EC2 instance's snapshot, a step."""

from __future__ import annotations

from forewarn.scenarios.spec import Step


def document_summary(document: dict) -> str:
    events = document.get("Events") or []
    if not events:
        return "no events"
    parts = []
    for event in events:
        text = (
            f"{event.get('EventStatus')} {event.get('EventType')} ({event.get('EventSource', '?')}) "
            f"{event.get('EventId')}"
        )
        if event.get("NotBefore"):
            text += f" NotBefore {event['NotBefore']}"
        resources = event.get("Resources") or []
        if len(resources) > 1:
            text += f" [{','.join(resources)}]"
        parts.append(text)
    return "; ".join(parts)


def instance_summary(snapshot: dict) -> str:
    text = f"{snapshot['state']} on {snapshot['host']}"
    if snapshot.get("spot_action"):
        text += f"; spot {snapshot['spot_action']} at {snapshot['spot_action_time']}"
    for event in snapshot["events"]:
        text += f"; {event['code']} {event['state']} NotBefore {event['not_before']}"
    return text


def describe_step(step: Step) -> str:
    parts = [f"as {step.actor}"] if step.actor else []
    for key, value in step.params.items():
        if isinstance(value, list):
            value = ",".join(map(str, value))
        elif isinstance(value, dict):
            value = "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
        text = str(value)
        parts.append(f"{key}={text if len(text) <= 40 else text[:37] + '...'}")
    return " ".join(parts)
