"""When the database fails: IMDS answers 500 (what real IMDS does for its own failures) and nothing changes."""

import asyncio

import httpx

from forewarn.core.engine import ScheduleRequest
from forewarn.core.model import EventType
from forewarn.service.runtime import Maintenance
from forewarn.store import StoreError, open_store
from forewarn.surfaces.azure_imds import AzureImds
from forewarn.surfaces.callers import CallerResolver
from helpers import T0, small_fleet


def test_store_failure_is_a_500_and_changes_nothing(tmp_path):
    service = Maintenance.open(open_store(str(tmp_path / "f.db")), small_fleet(), "manual", 1.0, T0, "seed")
    [event] = service.schedule(ScheduleRequest(EventType.FREEZE, vms=("solo",)))
    imds = AzureImds(service, CallerResolver(service.engine.fleet, shared_ports={8169}))

    def broken(*args, **kwargs):
        raise StoreError("sqlite: disk I/O error")

    service.store.commit = broken

    async def run():
        transport = httpx.ASGITransport(app=imds)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8169") as client:
            url = "/metadata/scheduledevents?api-version=2020-07-01"
            posted = await client.post(url, headers={"Metadata": "true"},
                                       json={"StartRequests": [{"EventId": event.event_id}]})
            fetched = await client.get(url, headers={"Metadata": "true"})
            return posted, fetched

    posted, fetched = asyncio.run(run())
    assert posted.status_code == 500 and posted.json() == {"error": "Internal server error. Retry the request."}
    assert fetched.status_code == 200
    assert fetched.json()["Events"][0]["EventStatus"] == "Scheduled"
    assert fetched.json()["DocumentIncarnation"] == 2
    assert service.engine.event(event.event_id).approvals == ()
