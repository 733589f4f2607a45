"""The ``forewarn serve --event-grid FILE`` file: settings, and system topics with their event subscriptions declared
up front (as pm7y/AzureEventGridSimulator takes them from its configuration).

```yaml
settings:                                 # every key optional; defaults in settings.py
  dead_letter_dir: var/dead-letters
  dead_letter_delay: 5m
  duplicate_rate: 0.01
  non_retried_codes: [400, 401, 403, 413]
system_topics:
  - name: maintenance
    subscription: 6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01   # an Azure subscription of the fleet
    resource_group: events-rg
    event_subscriptions:
      - name: ops-webhook
        skip_validation: false            # true: no handshake (the subscriber is trusted, e.g. in tests)
        properties:                       # as in the ARM PUT body
          destination: {endpointType: WebHook, properties: {endpointUrl: "http://127.0.0.1:9000/events"}}
          filter: {includedEventTypes: [Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted]}
```

``properties`` is checked by the same code as an ARM PUT, so an error reads as Event Grid's, prefixed with where it is
in the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forewarn import yamlfile
from forewarn.azure.arm.wire import ArmError
from forewarn.azure.eventgrid.model import (
    EventSubscription,
    check_topic_name,
    parse_subscription_body,
)
from forewarn.azure.eventgrid.settings import EventGridSettings
from forewarn.core.durations import parse_duration
from forewarn.core.errors import Invalid
from forewarn.yamlfile import YamlFileError


class EventGridFileError(Exception):
    """The --event-grid file was refused; the message says where and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _SettingsSpec(_Strict):
    data_version: str | None = None
    api_version: str | None = None
    subject: Literal["scheduled-event", "vm"] | None = None
    resource_type: str | None = None
    arn_extras: bool | None = None
    duplicate_rate: float | None = Field(default=None, ge=0, le=1)
    duplicate_delay: str | None = None
    delivery_timeout: str | None = None
    non_retried_codes: list[int] | None = None
    dead_letter_dir: str | None = None
    dead_letter_delay: str | None = None
    ttl_dead_letter_reason: str | None = Field(default=None, min_length=1)
    handshake_timeout: str | None = None
    validation_window: str | None = None


class _SubscriptionSpec(_Strict):
    name: str
    skip_validation: bool = False
    properties: dict[str, Any]


class _TopicSpec(_Strict):
    name: str
    subscription: str = Field(min_length=1)
    resource_group: str = Field(min_length=1)
    tags: dict[str, str] | None = None
    event_subscriptions: list[_SubscriptionSpec] = Field(default_factory=list)


class _FileSpec(_Strict):
    settings: _SettingsSpec = Field(default_factory=_SettingsSpec)
    system_topics: list[_TopicSpec] = Field(default_factory=list)


@dataclass(frozen=True)
class DeclaredTopic:
    subscription: str  # the Azure subscription, as the file spells it (matched to the fleet's case-insensitively)
    resource_group: str
    name: str
    tags: dict[str, str] | None
    event_subscriptions: tuple[EventSubscription, ...]  # their topic_id is filled in when the topic is applied


@dataclass(frozen=True)
class EventGridFile:
    settings: EventGridSettings
    topics: tuple[DeclaredTopic, ...] = field(default_factory=tuple)


def load_event_grid_file(path: str | Path, base: EventGridSettings = EventGridSettings()) -> EventGridFile:
    try:
        data = yamlfile.load(path, "Event Grid file", yamlfile.MAX_SMALL_FILE_BYTES).data or {}
    except YamlFileError as error:
        raise EventGridFileError(str(error)) from None
    return parse_event_grid(data, str(path), base)


def parse_event_grid(data: Any, path: str, base: EventGridSettings = EventGridSettings()) -> EventGridFile:
    """The declarations of an ``--event-grid`` file, or of a fleet file's ``event_grid:`` section (``path`` says
    which, for the messages)."""
    try:
        spec = _FileSpec.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise EventGridFileError(f"{path}: {problems}") from None
    settings = _settings(spec.settings, base, path)
    topics = []
    seen_sources: dict[str, str] = {}
    for index, topic in enumerate(spec.system_topics):
        where = f"{path}: system_topics[{index}]"
        try:
            check_topic_name(topic.name)
        except ArmError as error:
            raise EventGridFileError(f"{where}.name: {error.message}") from None
        if topic.subscription.lower() in seen_sources:
            raise EventGridFileError(
                f"{where}: subscription {topic.subscription} already has system topic "
                f"{seen_sources[topic.subscription.lower()]}; Azure allows one per source"
            )
        seen_sources[topic.subscription.lower()] = topic.name
        topic_id = (
            f"/subscriptions/{topic.subscription}/resourceGroups/{topic.resource_group}/providers/"
            f"Microsoft.EventGrid/systemTopics/{topic.name}"
        )
        subscriptions = []
        names: set[str] = set()
        for number, item in enumerate(topic.event_subscriptions):
            place = f"{where}.event_subscriptions[{number}]"
            if item.name.lower() in names:
                raise EventGridFileError(f"{place}.name: {item.name} is declared twice")
            names.add(item.name.lower())
            try:
                parsed = parse_subscription_body({"properties": item.properties}, topic_id, item.name, None)
            except ArmError as error:
                raise EventGridFileError(f"{place}: {error.message}") from None
            subscriptions.append(replace(parsed, origin="file", skip_validation=item.skip_validation))
        topics.append(
            DeclaredTopic(topic.subscription, topic.resource_group, topic.name, topic.tags, tuple(subscriptions))
        )
    return EventGridFile(settings, tuple(topics))


def _settings(spec: _SettingsSpec, base: EventGridSettings, path) -> EventGridSettings:
    changes: dict[str, Any] = {}
    for name in (
        "data_version",
        "api_version",
        "resource_type",
        "arn_extras",
        "duplicate_rate",
        "ttl_dead_letter_reason",
    ):
        value = getattr(spec, name)
        if value is not None:
            changes[name] = value
    if spec.subject is not None:
        changes["subject_style"] = spec.subject
    if spec.non_retried_codes is not None:
        changes["non_retried_codes"] = frozenset(spec.non_retried_codes)
    if spec.dead_letter_dir is not None:
        changes["dead_letter_dir"] = Path(spec.dead_letter_dir)
    for name in ("duplicate_delay", "dead_letter_delay", "validation_window"):
        value = getattr(spec, name)
        if value is not None:
            changes[name] = _duration(value, f"{path}: settings.{name}")
    for name in ("delivery_timeout", "handshake_timeout"):
        value = getattr(spec, name)
        if value is not None:
            changes[name] = _duration(value, f"{path}: settings.{name}").total_seconds()
    try:
        return replace(base, **changes)
    except ValueError as error:
        raise EventGridFileError(f"{path}: settings: {error}") from None


def _duration(text: str, where: str) -> timedelta:
    try:
        return parse_duration(text)
    except Invalid as error:
        raise EventGridFileError(f"{where}: {error}") from None
