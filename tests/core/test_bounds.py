"""Out-of-range durations and dates through every entry, on a real server: each is refused in its surface's style
(control API ``{"error": ...}`` 400, EC2 XML), the server keeps answering, and a restart on the same database works.
A database written before the bounds (values beyond them, written here row by row) still starts."""

from __future__ import annotations

import json
import sqlite3
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from unittest import mock

import requests

from helpers import SMALL_FLEET, T0, Server

# The documented bounds (docs/engine.md, "Bounds"), spelled out so that a change to them is a change to this test.
LATEST_TIME = datetime(9000, 1, 1, tzinfo=UTC)
MAX_DURATION_SECONDS = 7 * 86400
EBS = "i-0aaaaaaaaaaaaaaa1"
EC2_FLEET = (
    SMALL_FLEET
    + f"""
ec2_instances:
  - {{id: {EBS}, host: host-01, name: db}}
"""
)


def refused(response: requests.Response, *words: str) -> str:
    """A control API refusal: 400 with ``{"error": {"code", "message"}}``; returns the message."""
    assert response.status_code == 400, (response.status_code, response.text)
    message = response.json()["error"]["message"]
    for word in words:
        assert word in message, message
    return message


def still_serving(server: Server) -> None:
    """IMDS and the control API answer, and nothing is left half-done."""
    assert server.scheduled_events().status_code == 200
    assert requests.get(f"{server.control}/v1/events", params={"all": "true"}, timeout=10).status_code == 200
    assert requests.get(f"{server.control}/v1/clock", timeout=10).status_code == 200
    assert requests.post(f"{server.control}/v1/clock/advance", json={"by": "1m"}, timeout=10).status_code == 200


def restarted(server: Server, **options) -> Server:
    server.stop()
    again = Server(server.tmp_path, None, db=server.db, **options)
    return again.start()


def test_control_api_refuses_durations_and_counts_out_of_range(tmp_path):
    server = Server(tmp_path).start()
    try:
        freeze = {"type": "Freeze", "vms": ["solo"]}
        # The probe's request: a DurationInSeconds of 10**12 was accepted, then overflowed when the event started.
        refused(
            server.post("/v1/events", {**freeze, "duration_seconds": 10**12}),
            "duration_seconds",
            str(MAX_DURATION_SECONDS),
        )
        refused(server.post("/v1/waves", {"duration_seconds": 10**12}), "duration_seconds")
        for wrong in (False, True, 5.0, "5"):  # booleans are not numbers; nor are floats or strings here
            refused(server.post("/v1/waves", {"duration_seconds": wrong}), "duration_seconds")
            refused(server.post("/v1/events", {**freeze, "duration_seconds": wrong}), "duration_seconds")
        refused(server.post("/v1/waves", {"concurrency": True}), "concurrency")
        refused(server.post("/v1/events", {**freeze, "extra_impacts": True}), "extra_impacts")
        refused(
            server.post("/v1/events", {"type": "Freeze", "group": "westno", "update_domain": False}), "update_domain"
        )
        refused(server.post("/v1/scale-sets/myvmss/scale-in", {"count": True}), "count")
        refused(server.post("/v1/imds/faults", {"status": 500, "requests": True}), "requests")
        # Durations: in range for the parser, out of range for an event; the bounds read in ISO 8601.
        refused(server.post("/v1/events", {**freeze, "notice": "3000d"}), "notice", "P365D")
        refused(server.post("/v1/events", {**freeze, "impact_window": "30d"}), "impact window", "P7D")
        refused(server.post("/v1/events", {**freeze, "notice": "PT99999999999999999999M"}), "too long")
        refused(server.post("/v1/waves", {"notice": "3000d"}), "notice", "P365D")
        refused(server.post("/v1/waves", {"impact_window": "8d"}), "impact window", "P7D")
        refused(server.post("/v1/vms/restart", {"vms": ["solo"], "notice": "400d"}), "notice", "P365D")
        refused(server.post("/v1/platform/predicted-failure", {"hosts": ["host-01"], "notice": "400d"}), "P365D")
        # Dates: beyond the simulated range (this one overflowed when rounded up to the second), or too far ahead.
        refused(
            server.post("/v1/events", {**freeze, "not_before": "9999-12-31T23:59:59.5Z"}),
            "NotBefore",
            "outside the simulated time range",
        )
        refused(server.post("/v1/events", {**freeze, "not_before": "2028-01-01T00:00:00Z"}), "too far ahead")
        # Durations in messages are ISO 8601, not Python's 0:20:00.
        message = refused(
            requests.patch(
                f"{server.control}/v1/policies/myvmss",
                json={"terminate_notification": {"enable": True, "not_before_timeout": "PT20M"}},
                timeout=10,
            ),
            "PT20M",
        )
        assert "0:20:00" not in message
        assert server.get("/v1/events", all="true") == [] and server.get("/v1/waves") == []  # nothing half-done

        # The bounds themselves are accepted, and such an event runs its whole course.
        [event] = server.schedule(**freeze, duration_seconds=MAX_DURATION_SECONDS, notice="P365D", impact_window="P7D")
        server.post("/v1/clock/set", {"to": event["not_before"]}, expect=200)
        assert server.get(f"/v1/events/{event['event_id']}")["status"] == "Started"
        server.advance("P7D")
        assert server.get(f"/v1/events/{event['event_id']}")["status"] == "Completed"
        still_serving(server)
        server = restarted(server)
        still_serving(server)
    finally:
        server.stop()


def test_the_manual_clock_stays_inside_the_simulated_range(tmp_path):
    server = Server(tmp_path).start()
    try:
        refused(server.post("/v1/clock/set", {"to": "9999-12-31T00:00:00Z"}), "outside the simulated time range")
        refused(server.post("/v1/clock/set", {"to": "9999-12-31T23:59:59.999999Z"}), "outside")
        refused(server.post("/v1/clock/advance", {"by": str(10**30)}), "too long")
        refused(server.post("/v1/clock/advance", {"by": f"PT{10**30}S"}), "too long")
        refused(server.post("/v1/clock/advance", {"by": 10**30}), "by")
        refused(server.post("/v1/clock/advance", {"by": "3651d"}), "too long", "P3650D")
        assert server.get("/v1/clock")["now"] == "2026-04-20T22:11:58Z"

        # Near the end of the range: what still fits works, what would pass the end is refused.
        server.post("/v1/clock/set", {"to": "8999-12-31T00:00:00Z"}, expect=200)
        refused(server.post("/v1/clock/advance", {"by": "3650d"}), "outside the simulated time range")
        [event] = server.schedule(type="Freeze", vms=["solo"])
        assert server.post("/v1/clock/next", expect=200).json()["now"] == event["not_before"]
        refused(
            server.post("/v1/events", {"type": "Freeze", "vms": ["solo"], "notice": "365d"}),
            "NotBefore",
            "outside the simulated time range",
        )
        server.post("/v1/clock/set", {"to": LATEST_TIME.isoformat()}, expect=200)
        refused(server.post("/v1/events", {"type": "Reboot", "vms": ["WestNO_0"]}), "outside")
        refused(server.post("/v1/clock/advance", {"by": "1s"}), "outside")
        assert server.get("/v1/clock")["now"] == "9000-01-01T00:00:00Z"
        assert server.scheduled_events().status_code == 200
        assert requests.get(f"{server.control}/v1/events", timeout=10).status_code == 200
        server = restarted(server)
        assert server.get("/v1/clock")["now"] == "9000-01-01T00:00:00Z"
        assert server.scheduled_events().status_code == 200
    finally:
        server.stop()


def test_ec2_entries_refuse_dates_and_durations_out_of_range(tmp_path):
    server = Server(tmp_path, EC2_FLEET).start()
    try:
        reboot = {"code": "system-reboot", "instances": [EBS]}
        refused(server.post("/v1/ec2/events", {**reboot, "notice": "400d"}), "notice", "P365D")
        refused(server.post("/v1/ec2/events", {**reboot, "window": "30d"}), "window", "P7D")
        refused(server.post("/v1/ec2/events", {**reboot, "deadline": "400d"}), "deadline", "P365D")
        refused(server.post("/v1/ec2/events", {**reboot, "not_before": "9999-12-31T23:59:59.5Z"}), "outside")
        [event] = server.post("/v1/ec2/events", {**reboot, "notice": "1d"}, expect=201).json()
        refused(
            server.post(f"/v1/ec2/events/{event['event_id']}/reschedule", {"not_before": "9999-12-31T23:59:59.5Z"}),
            "outside",
        )
        # The EC2 Query API, as boto3 would send it: an XML error, not a 500.
        response = requests.post(
            server.ec2,
            data={
                "Action": "ModifyInstanceEventStartTime",
                "Version": "2016-11-15",
                "InstanceId": EBS,
                "InstanceEventId": event["event_id"],
                "NotBefore": "9999-12-31T23:59:59.5Z",
            },
            timeout=10,
        )
        assert response.status_code == 400, response.text
        error = ET.fromstring(response.content).find("./Errors/Error")
        assert error.findtext("Code") == "InvalidParameterValue" and "outside" in error.findtext("Message")
        described = requests.post(
            server.ec2, data={"Action": "DescribeInstanceStatus", "Version": "2016-11-15"}, timeout=10
        )
        assert described.status_code == 200
        assert server.get("/v1/ec2/events")[0]["not_before"] == event["not_before"]  # unchanged
        still_serving(server)
        server = restarted(server)
        still_serving(server)
    finally:
        server.stop()


def test_signed_ec2_requests_dated_at_the_ends_of_time_are_refused_not_crashes(tmp_path):
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    server = Server(tmp_path, EC2_FLEET, extra=["--ec2-credential", "AKIDEXAMPLE:secret"]).start()
    try:
        body = "Action=DescribeInstanceStatus&Version=2016-11-15"

        def signed_at(moment: datetime) -> requests.Response:
            request = AWSRequest(
                "POST", server.ec2 + "/", data=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
            )
            with mock.patch.object(botocore.auth, "get_current_datetime", return_value=moment):
                botocore.auth.SigV4Auth(Credentials("AKIDEXAMPLE", "secret"), "ec2", "us-east-1").add_auth(request)
            return requests.post(server.ec2 + "/", data=body, headers=dict(request.headers), timeout=10)

        assert signed_at(datetime.now(UTC).replace(tzinfo=None)).status_code == 200
        late = signed_at(datetime(9999, 12, 31, 23, 59, 59))
        assert late.status_code in (400, 403), late.text
        assert ET.fromstring(late.content).find("./Errors/Error").findtext("Code") == "RequestExpired"
        # A Date header whose UTC form is before year 1 (no X-Amz-Date): refused, not an overflow.
        early = requests.post(
            server.ec2 + "/",
            data=body,
            timeout=10,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Date": "Mon, 01 Jan 0001 00:00:00 +0100",
                "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/00010101/us-east-1/ec2/aws4_request, "
                "SignedHeaders=host, Signature=00",
            },
        )
        assert 400 <= early.status_code < 500, early.text
        ET.fromstring(early.content)
        assert signed_at(datetime.now(UTC).replace(tzinfo=None)).status_code == 200
    finally:
        server.stop()


# --------------------------------------------------------------------------- databases written before the bounds
def _rewrite(db: str, table: str, key: str, value: str, **fields) -> None:
    """Write values straight into a stored record, as an older forewarn could have."""
    with sqlite3.connect(db) as connection:
        [data] = connection.execute(f"SELECT data FROM {table} WHERE {key} = ?", (value,)).fetchone()
        connection.execute(
            f"UPDATE {table} SET data = ? WHERE {key} = ?", (json.dumps({**json.loads(data), **fields}), value)
        )


def _set_meta(db: str, key: str, value: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE forewarn_meta SET value = ? WHERE key = ?", (value, key))


def test_a_stored_event_beyond_the_bounds_is_clamped_at_start_up_not_a_crash(tmp_path):
    server = Server(tmp_path).start()
    try:
        [event] = server.schedule(type="Freeze", vms=["solo"])
        [other] = server.schedule(type="Reboot", vms=["WestNO_0"], notice="1h")
    finally:
        server.stop()
    event_id = event["event_id"]
    # What the probe left behind: DurationInSeconds 10**12, and a NotBefore that has passed, so a real clock
    # starts the event while the server opens (that start overflowed: the server exited with a traceback).
    _rewrite(
        server.db,
        "forewarn_azure_events",
        "event_id",
        event_id,
        duration_seconds=10**12,
        impact_window=10**9,
        not_before=(T0 - timedelta(minutes=1)).isoformat(),
    )
    _rewrite(server.db, "forewarn_azure_events", "event_id", other["event_id"], extra_impacts=10**6)
    server = restarted(server, clock="real")
    try:
        log = server.log_path.read_text()
        assert f"event {event_id} repaired" in log and "duration_seconds 1000000000000 → 604800" in log, log
        assert f"event {other['event_id']} repaired" in log
        stored = server.get(f"/v1/events/{event_id}")
        assert stored["status"] == "Started" and stored["duration_seconds"] == MAX_DURATION_SECONDS
        assert stored["impact_window_seconds"] == MAX_DURATION_SECONDS
        document = server.scheduled_events(base=None)
        assert document.status_code == 200
        assert server.get("/v1/vms/solo")["power"] == "frozen"
        still_serving_real = requests.get(f"{server.control}/v1/events", timeout=10)
        assert still_serving_real.status_code == 200
        journal = server.get(f"/v1/events/{event_id}/journal")
        assert journal[-2]["what"] == "repaired" and journal[-1]["what"] == "started"
    finally:
        server.stop()
    with sqlite3.connect(server.db) as connection:  # written back: a further start has nothing to repair
        [data] = connection.execute("SELECT data FROM forewarn_azure_events WHERE event_id = ?", (event_id,)).fetchone()
    assert json.loads(data)["duration_seconds"] == MAX_DURATION_SECONDS
    server = restarted(server)
    try:
        assert server.log_path.read_text().count(f"event {event_id} repaired") == 1
        still_serving(server)
    finally:
        server.stop()


def test_a_stored_clock_at_the_end_of_datetime_is_brought_back_into_range(tmp_path):
    server = Server(tmp_path).start()
    try:
        [event] = server.schedule(type="Freeze", vms=["solo"])
    finally:
        server.stop()
    end = datetime(9999, 12, 31, tzinfo=UTC)
    with sqlite3.connect(server.db) as connection:
        [clock] = connection.execute("SELECT value FROM forewarn_meta WHERE key = 'clock'").fetchone()
    _set_meta(server.db, "clock", json.dumps({**json.loads(clock), "anchor_sim": end.isoformat()}))
    _set_meta(server.db, "now", end.isoformat())
    _rewrite(
        server.db,
        "forewarn_azure_events",
        "event_id",
        event["event_id"],
        not_before=(end + timedelta(minutes=15)).isoformat(),
    )
    server = restarted(server)
    try:
        log = server.log_path.read_text()
        assert "the stored clock (9999-12-31T00:00:00+00:00" in log and "continuing from 9000-01-01T00:00:00Z" in log
        assert server.get("/v1/clock")["now"] == "9000-01-01T00:00:00Z"
        assert server.get(f"/v1/events/{event['event_id']}")["not_before"] == "9000-01-01T00:00:00Z"
        # The event was due at the clamped time: the next step starts it, and nothing overflows.
        server.post("/v1/clock/next", expect=200)
        assert server.get(f"/v1/events/{event['event_id']}")["status"] == "Started"
        assert server.scheduled_events().status_code == 200
        refused(server.post("/v1/events", {"type": "Freeze", "vms": ["WestNO_1"]}), "outside")
    finally:
        server.stop()
