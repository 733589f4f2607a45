"""The one-line text a scenario run prints for a step (each cloud's observer words its own machines' lines)."""

from __future__ import annotations

from forewarn.scenarios.spec import Step


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
