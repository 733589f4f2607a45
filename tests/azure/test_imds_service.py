"""The service around the endpoint: profiles, enabling by first request, rate limit, injected faults, VMs that are
down. A real server process on loopback in each test."""

import time

import pytest
import requests

from helpers import Server


def start(tmp_path, *extra):
    return Server(tmp_path, extra=list(extra)).start()


@pytest.fixture
def stop_later():
    servers = []
    yield servers.append
    for server in servers:
        server.stop()


def test_lenient_profile_accepts_what_the_mock_accepts(tmp_path, stop_later):
    server = start(tmp_path, "--imds-profile", "lenient")
    stop_later(server)
    server.schedule(type="Preempt", vms=["solo"])
    bare = requests.get(f"{server.imds}/metadata/scheduledevents")
    assert bare.status_code == 200 and list(bare.json()["Events"][0])[-1] == "DurationInSeconds"
    assert (
        requests.get(
            f"{server.imds}/metadata/scheduledevents?api-version=1999-01-01&api-version=x",
            headers={"X-Forwarded-For": "1.2.3.4"},
        ).status_code
        == 200
    )
    settings = server.get("/v1/imds/settings")
    assert settings["lenient"] is True and settings["unknown_event_ids"] == "accept"


def test_enabling_by_first_request_and_disabling_after_idle_time(tmp_path, stop_later):
    server = start(tmp_path, "--require-enabling", "--first-call-delay", "0.4s", "--disable-after", "1h")
    stop_later(server)
    # Nobody of solo's scope ever asked: no notice, the event starts at once.
    [unwarned] = server.schedule(type="Reboot", vms=["solo"])
    assert unwarned["status"] == "Started"
    journal = server.get(f"/v1/events/{unwarned['event_id']}/journal")
    assert "Scheduled Events not enabled" in journal[-1]["reason"]
    began = time.monotonic()
    first = server.scheduled_events()
    assert first.status_code == 200 and time.monotonic() - began >= 0.4  # the enabling call is slow
    began = time.monotonic()
    server.scheduled_events()
    assert time.monotonic() - began < 0.4  # later calls are not
    [warned] = server.schedule(type="Reboot", vms=["solo"])
    assert warned["status"] == "Scheduled"
    server.advance("2h")  # no request for two hours: disabled again
    [again] = server.schedule(type="Freeze", vms=["solo"])
    assert again["status"] == "Started"


@pytest.mark.parametrize("delay", ["0s", "0.2s"], ids=["at-once", "after-the-first-call-delay"])
def test_a_scope_enabled_by_its_first_request_is_durable_before_the_answer(tmp_path, stop_later, delay):
    """The first request enables its scope through the group commit, and is answered once that is durable: killed
    (kill -9) right after the answer, the server comes back with the scope enabled."""
    server = start(tmp_path, "--require-enabling", "--first-call-delay", delay)
    stop_later(server)
    assert server.scheduled_events().status_code == 200
    server.kill()
    server.start()
    [event] = server.schedule(type="Reboot", vms=["solo"])
    assert event["status"] == "Scheduled"  # notice given: solo's scope was enabled


def test_rate_limit_answers_429(tmp_path, stop_later):
    server = start(tmp_path, "--rate-limit", "5")
    stop_later(server)
    with requests.Session() as session:
        statuses = [
            session.get(
                f"{server.imds}/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"}
            ).status_code
            for _ in range(12)
        ]
    assert statuses[:5] == [200] * 5 and 429 in statuses
    too_many = requests.get(
        f"{server.imds}/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"}
    )
    assert too_many.status_code in (200, 429)


def test_injected_faults(tmp_path, stop_later):
    server = start(tmp_path)
    stop_later(server)
    fault = server.post("/v1/imds/faults", {"status": 410, "requests": 2}, expect=201).json()
    assert fault["requests_left"] == 2
    assert [server.scheduled_events().status_code for _ in range(3)] == [410, 410, 200]
    server.post("/v1/imds/faults", {"status": 500, "duration": "1m", "vms": ["solo"]}, expect=201)
    failed = server.scheduled_events()
    assert failed.status_code == 500 and failed.json() == {"error": "Internal server error. Retry the request."}
    server.advance("1m")
    assert server.scheduled_events().status_code == 200
    server.post("/v1/imds/faults", {"delay": "300ms", "requests": 1}, expect=201)
    began = time.monotonic()
    assert server.scheduled_events().status_code == 200 and time.monotonic() - began >= 0.3
    assert server.post("/v1/imds/faults", {"status": 404, "requests": 1}).status_code == 400
    assert server.post("/v1/imds/faults", {"status": 500}).status_code == 400  # forever is not a fault
    server.post("/v1/imds/faults", {"status": 500, "requests": 5}, expect=201)
    assert requests.delete(f"{server.control}/v1/imds/faults").json() == {"cleared": 1}
    assert server.scheduled_events().status_code == 200


def test_a_vm_that_is_down_cannot_ask(tmp_path, stop_later):
    server = start(tmp_path, "--while-down", "drop")
    stop_later(server)
    server.post("/v1/platform/hardware-failure", {"hosts": ["host-02"]}, expect=200)  # solo is redeploying
    with pytest.raises(requests.ConnectionError):
        server.scheduled_events()
    server.advance("3m")
    doc = server.scheduled_events().json()
    assert doc["Events"][0]["EventStatus"] == "Started" and doc["Events"][0]["EventType"] == "Redeploy"
