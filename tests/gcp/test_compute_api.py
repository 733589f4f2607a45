"""The official google-cloud-compute client, with anonymous credentials, against forewarn's Compute Engine API."""

import pytest
import requests
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from helpers import Server

FLEET = """
hosts: [{name: host-a}, {name: host-b}]
defaults: {gcp_project: forewarn-demo, gce_zone: europe-west1-b}
gce_instances:
  - {name: web-1, host: host-a, imds: {address: 127.0.0.40}}
  - {name: gpu-1, host: host-b, gpus: {count: 2, type: nvidia-l4}}
  - {name: east-1, host: host-b, zone: us-east1-c}
"""
PROJECT, ZONE = "forewarn-demo", "europe-west1-b"


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("gceapi"), fleet_text=FLEET) as running:
        yield running


@pytest.fixture
def server(shared_server):
    return shared_server.reset()


def clients(server):
    options = ClientOptions(api_endpoint=server.gce)
    credentials = AnonymousCredentials()
    return (
        compute_v1.InstancesClient(credentials=credentials, client_options=options),
        compute_v1.ZoneOperationsClient(credentials=credentials, client_options=options),
    )


def test_get_reads_scheduling_and_upcoming_maintenance(server):
    instances, _ = clients(server)
    web = instances.get(project=PROJECT, zone=ZONE, instance="web-1")
    assert web.status == "RUNNING" and web.scheduling.on_host_maintenance == "MIGRATE"
    assert web.scheduling.automatic_restart is True
    assert not web.resource_status.upcoming_maintenance.window_start_time
    server.post("/v1/gce/maintenance", {"instances": ["web-1"], "notice": "7d", "window": "2h"}, expect=201)
    upcoming = instances.get(project=PROJECT, zone=ZONE, instance="web-1").resource_status.upcoming_maintenance
    assert upcoming.type_ == "SCHEDULED" and upcoming.maintenance_status == "PENDING"
    assert upcoming.can_reschedule is True
    assert upcoming.window_start_time.startswith("2026-04-27T22:11:58")
    assert upcoming.window_end_time.startswith("2026-04-28T00:11:58")
    gpu = instances.get(project=PROJECT, zone=ZONE, instance="gpu-1")
    assert gpu.scheduling.on_host_maintenance == "TERMINATE" and gpu.guest_accelerators[0].accelerator_count == 2


def test_list_and_aggregated_list(server):
    instances, _ = clients(server)
    assert [i.name for i in instances.list(project=PROJECT, zone=ZONE)] == ["web-1", "gpu-1"]
    aggregated = {
        scope: [i.name for i in found.instances] for scope, found in instances.aggregated_list(project=PROJECT)
    }
    assert aggregated == {"zones/europe-west1-b": ["web-1", "gpu-1"], "zones/us-east1-c": ["east-1"]}


def test_perform_maintenance_and_the_zone_operation(server):
    instances, operations = clients(server)
    requests.get(
        f"http://127.0.0.40:{server.imds_port}/computeMetadata/v1/instance/maintenance-event",
        headers={"Metadata-Flavor": "Google"},
        timeout=10,
    )
    server.post("/v1/gce/maintenance", {"instances": ["web-1"], "notice": "7d"}, expect=201)
    operation = instances.perform_maintenance(project=PROJECT, zone=ZONE, instance="web-1")
    operation.result(timeout=30)
    assert operation.done() and operation.error_code in (None, 0)
    assert server.get("/v1/gce/instances/web-1")["maintenance_event"] == "MIGRATE_ON_HOST_MAINTENANCE"
    fetched = operations.get(project=PROJECT, zone=ZONE, operation=operation.name)
    assert fetched.status == compute_v1.Operation.Status.DONE and fetched.operation_type == "performMaintenance"
    assert fetched.target_link.endswith("/zones/europe-west1-b/instances/web-1")
    assert operation.name in [op.name for op in operations.list(project=PROJECT, zone=ZONE)]
    # Nothing left to perform: Compute Engine's error, in its JSON shape.
    with pytest.raises(exceptions.BadRequest) as refused:
        instances.perform_maintenance(project=PROJECT, zone=ZONE, instance="web-1").result(timeout=30)
    assert "no pending maintenance" in str(refused.value)


def test_simulate_maintenance_event_terminates_a_gpu_instance(server):
    instances, _ = clients(server)
    instances.simulate_maintenance_event(project=PROJECT, zone=ZONE, instance="gpu-1").result(timeout=30)
    # gpu-1 never asked for maintenance-event: no notice, it is terminated at once.
    assert instances.get(project=PROJECT, zone=ZONE, instance="gpu-1").status == "TERMINATED"
    server.advance("5m")
    assert instances.get(project=PROJECT, zone=ZONE, instance="gpu-1").status == "RUNNING"


def test_simulate_maintenance_event_gives_a_watching_gpu_instance_its_hour(server):
    instances, _ = clients(server)
    server.post("/v1/gce/instances/gpu-1/watch", expect=200)  # as if it read maintenance-event
    instances.simulate_maintenance_event(project=PROJECT, zone=ZONE, instance="gpu-1").result(timeout=30)
    assert server.get("/v1/gce/instances/gpu-1")["maintenance_event"] == "TERMINATE_ON_HOST_MAINTENANCE"
    server.advance("59m59s")
    assert instances.get(project=PROJECT, zone=ZONE, instance="gpu-1").status == "RUNNING"
    server.advance("1s")  # "a 1-hour stopping notice" ("Handle GPU host maintenance events")
    assert instances.get(project=PROJECT, zone=ZONE, instance="gpu-1").status == "TERMINATED"


def test_set_scheduling_and_its_refusals(server):
    instances, _ = clients(server)
    scheduling = compute_v1.Scheduling(on_host_maintenance="TERMINATE", automatic_restart=False)
    instances.set_scheduling(project=PROJECT, zone=ZONE, instance="web-1", scheduling_resource=scheduling).result(
        timeout=30
    )
    web = instances.get(project=PROJECT, zone=ZONE, instance="web-1")
    assert web.scheduling.on_host_maintenance == "TERMINATE" and web.scheduling.automatic_restart is False
    with pytest.raises(exceptions.BadRequest) as refused:
        instances.set_scheduling(
            project=PROJECT,
            zone=ZONE,
            instance="gpu-1",
            scheduling_resource=compute_v1.Scheduling(on_host_maintenance="MIGRATE"),
        )
    assert "cannot live-migrate" in str(refused.value)
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="nobody")


def test_a_rescheduled_window_is_what_the_client_reads(server):
    instances, _ = clients(server)
    server.post("/v1/gce/maintenance", {"instances": ["gpu-1"], "notice": "7d", "latest": "3d"}, expect=201)
    upcoming = instances.get(project=PROJECT, zone=ZONE, instance="gpu-1").resource_status.upcoming_maintenance
    assert upcoming.latest_window_start_time.startswith("2026-04-30T22:11:58")
    server.post("/v1/gce/instances/gpu-1/reschedule-maintenance", {"notice": "9d"}, expect=200)
    upcoming = instances.get(project=PROJECT, zone=ZONE, instance="gpu-1").resource_status.upcoming_maintenance
    assert upcoming.window_start_time.startswith("2026-04-29T22:11:58")
    assert upcoming.window_end_time.startswith("2026-04-29T23:11:58")
    assert upcoming.latest_window_start_time.startswith("2026-04-30T22:11:58")
    too_late = server.post("/v1/gce/instances/gpu-1/reschedule-maintenance", {"notice": "11d"})
    assert too_late.status_code == 400 and "latest window start" in too_late.text
