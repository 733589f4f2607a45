"""When the database fails: IMDS answers 500 (what real IMDS does for its own failures) and nothing changes."""

import asyncio
import json

from forewarn.app.runtime import Maintenance
from forewarn.azure import commands as azure_commands
from forewarn.azure.component import AzureComponent
from forewarn.azure.imds.scheduled_events import AzureImds
from forewarn.azure.model import EventType, ScheduleRequest
from forewarn.net.callers import CallerResolver
from forewarn.net.http import Deferred, Request
from forewarn.store import StoreError
from helpers import T0, open_store, small_fleet


def test_store_failure_is_a_500_and_changes_nothing(tmp_path):
    service = Maintenance.open(open_store(str(tmp_path / "f.db")), small_fleet(), "manual", 1.0, T0, "seed")
    [event] = azure_commands.schedule(service, ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    imds = AzureImds(service, CallerResolver(service.settled_engine().fleet, shared_ports={8169}))

    def broken(*args, **kwargs):
        raise StoreError("sqlite: disk I/O error")

    service.store.commit = broken

    url_query = b"api-version=2020-07-01"
    headers = ((b"metadata", b"true"),)
    local, peer = ("127.0.0.1", 8169), ("127.0.0.1", 50000)
    body = json.dumps({"StartRequests": [{"EventId": event.event_id}]}).encode()

    async def post():
        # An approval is committed with the others of its turn of the event loop: the answer waits for that commit.
        waiting = imds.handle(Request("POST", "/metadata/scheduledevents", url_query, headers, body, local, peer))
        assert isinstance(waiting, Deferred)
        answered = asyncio.get_running_loop().create_future()
        waiting.attach(answered.set_result)
        return await answered

    posted = asyncio.run(post())
    fetched = imds.handle(Request("GET", "/metadata/scheduledevents", url_query, headers, b"", local, peer))
    assert posted[:2] == (500, b'{"error": "Internal server error. Retry the request."}')
    assert fetched[0] == 200
    document = json.loads(fetched[1])
    assert document["Events"][0]["EventStatus"] == "Scheduled" and document["DocumentIncarnation"] == 2
    assert service.settled_engine().component(AzureComponent).event(event.event_id).approvals == ()
