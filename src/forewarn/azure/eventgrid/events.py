"""The events Event Grid delivers, rendered: ``ScheduledEventEmitted`` in the Event Grid schema and as a CloudEvent,
and the subscription validation event. Pure.

Field order and values follow the sample of Microsoft's "Scheduled Events in Event Grid": ``id, topic, subject, data
{resourceInfo {id, name, type, location, properties {...}}, apiVersion}, eventType, dataVersion, metadataVersion,
eventTime``, with ``eventTime`` in seven fractional digits and ``Z``. The properties are those IMDS shows (NotBefore
in RFC 1123 GMT, "" once Started; the same function renders it) plus ``ScheduledEventApiVersion``. The CloudEvents form
is the Azure Resource Notifications one: ``{id, source, subject, type, time, specversion, data}``.

The Event Grid ``id`` is derived from the database's seed, the EventId and the transition, so a replayed run
publishes the same ids, and every subscription (and a duplicate) sees one id per publication.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

from forewarn.azure.eventgrid.model import CLOUD_EVENT_SCHEMA, EVENT_TYPE
from forewarn.azure.eventgrid.settings import EventGridSettings
from forewarn.azure.imds.scheduled_events import not_before_text
from forewarn.azure.model import Event
from forewarn.azure.vms import VM
from forewarn.core.ids import derived_guid

SCHEDULED_EVENT_API_VERSION = "2020-07-01"  # "Scheduled Events in Event Grid": "the only supported value is 2020-07-01"
METADATA_VERSION = "1"
CLOUD_EVENTS_SPEC_VERSION = "1.0"
VALIDATION_EVENT_TYPE = "Microsoft.EventGrid.SubscriptionValidationEvent"
VALIDATION_DATA_VERSION = "1"  # the sample of "Webhook event delivery"
# the apiVersion of the validationUrl in the sample of "Webhook event delivery"
VALIDATION_API_VERSION = "2018-05-01-preview"

# Which transitions publish ("Scheduled Events in Event Grid": Scheduled, Started, Completed, Canceled; an approval
# changes no status).
PUBLISHED = ("scheduled", "started", "completed", "canceled")


def event_time(moment: datetime) -> str:
    """``2017-06-26T18:41:00.9584103Z``: seven fractional digits, as .NET writes a DateTime."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"


def scheduled_event_id(event: Event, vm: VM) -> str:
    """The scheduled event's ARM id, under its policy owner (the sample of "Scheduled Events in Event Grid")."""
    return f"{vm.owner_resource_id}/providers/microsoft.maintenance/scheduledevents/{event.event_id}"


def publication_id(seed: str, event: Event, what: str) -> str:
    return derived_guid(seed, "eventgrid", event.event_id, what).lower()


def scheduled_event_emitted(
    event: Event, vm: VM, what: str, now: datetime, seed: str, settings: EventGridSettings
) -> dict:
    """The Event Grid schema event for one transition (``what``) of ``event``; ``vm`` is its first resource."""
    resource_id = scheduled_event_id(event, vm)
    if settings.subject_style == "vm":
        # The mock sample's subject: the VM's id, lower case. A scale set VM is addressed as a plain VM ("Scheduled
        # Events in Event Grid").
        subject = (
            f"/subscriptions/{vm.subscription_id}/resourcegroups/{vm.resource_group}/providers/"
            f"microsoft.compute/virtualmachines/{vm.name}"
        ).lower()
    else:
        subject = resource_id
    resource_info: dict = {
        "id": resource_id,
        "name": event.event_id,
        "type": settings.resource_type,
        "location": vm.location,
    }
    if settings.arn_extras:
        resource_info["tags"] = {}
    resource_info["properties"] = {
        "DurationInSeconds": event.duration_seconds,
        "Description": event.description,
        "EventId": event.event_id,
        "EventSource": event.source.value,
        "EventStatus": event.status.value,
        "EventType": event.event_type.value,
        "NotBefore": not_before_text(event),
        "Resources": list(event.resources),
        "ResourceType": "VirtualMachine",
        "ScheduledEventApiVersion": SCHEDULED_EVENT_API_VERSION,
    }
    data: dict = {"resourceInfo": resource_info, "apiVersion": settings.api_version}
    if settings.arn_extras:
        data["operationalInfo"] = {"resourceEventTime": event_time(now)}
    return {
        "id": publication_id(seed, event, what),
        "topic": f"/subscriptions/{vm.subscription_id}",
        "subject": subject,
        "data": data,
        "eventType": EVENT_TYPE,
        "dataVersion": settings.data_version,
        "metadataVersion": METADATA_VERSION,
        "eventTime": event_time(now),
    }


def as_cloud_event(event: dict) -> dict:
    """The same publication as a CloudEvents 1.0 event (Azure Resource Notifications' CloudEvents form)."""
    return {
        "id": event["id"],
        "source": event["topic"],
        "subject": event["subject"],
        "type": event["eventType"],
        "time": event["eventTime"],
        "specversion": CLOUD_EVENTS_SPEC_VERSION,
        "data": event["data"],
    }


def in_schema(event: dict, schema: str) -> dict:
    return as_cloud_event(event) if schema == CLOUD_EVENT_SCHEMA else event


def validation_event(seed: str, topic_source: str, code: str, url: str, now: datetime) -> dict:
    """The SubscriptionValidationEvent POSTed to a new Event Grid schema webhook ("Webhook event delivery")."""
    return {
        "id": derived_guid(seed, "validation-event", code).lower(),
        "topic": topic_source,
        "subject": "",
        "data": {"validationCode": code, "validationUrl": url},
        "eventType": VALIDATION_EVENT_TYPE,
        "eventTime": event_time(now),
        "metadataVersion": METADATA_VERSION,
        "dataVersion": VALIDATION_DATA_VERSION,
    }


def validation_url(base: str, name: str, code: str, token: str, now: datetime) -> str:
    """Shaped like Event Grid's (``.../eventsubscriptions/{name}/validate?id=&t=&apiVersion=&token=``), served on the
    ARM port under /eventgrid."""
    return (
        f"{base.rstrip('/')}/eventgrid/eventsubscriptions/{quote(name.lower())}/validate?id={code}"
        f"&t={quote(event_time(now))}&apiVersion={VALIDATION_API_VERSION}&token={token}"
    )
