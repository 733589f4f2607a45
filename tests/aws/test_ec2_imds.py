"""The EC2 instance metadata service (IMDSv1 and IMDSv2), in process: Ec2Imds.handle(Request) for simulated
instances — wire bytes of maintenance events, listings, tokens, Spot and rebalance notices, Auto Scaling lifecycle,
errors."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from datetime import timedelta

import pytest

from forewarn.app.runtime import Maintenance
from forewarn.aws.changes import Ec2EventChanged
from forewarn.aws.component import Ec2Component, Ec2Request
from forewarn.aws.imds.metadata import Ec2Imds, Ec2ImdsSettings, imds_time, pretty_json
from forewarn.aws.model import Ec2Code, availability_zone_id
from forewarn.core.changes import Rebuilt
from forewarn.fleet.file import parse_fleet
from forewarn.net.callers import CallerResolver
from forewarn.net.http import DROP, Deferred, Request
from helpers import T0, HeldCommits, open_store

EBS = "i-0aaaaaaaaaaaaaaa1"
STORE = "i-0bbbbbbbbbbbbbbb2"
ASG = "i-0ccccccccccccccc3"
SPOT = "i-0ddddddddddddddd4"
ADDRESS = {EBS: "127.0.0.21", STORE: "127.0.0.22", ASG: "127.0.0.23", SPOT: "127.0.0.24", "azure": "127.0.0.30"}
FLEET = f"""
hosts: [{{name: h1}}, {{name: h2}}, {{name: h3}}]
vms:
  - {{name: azvm, host: h1, imds: {{address: 127.0.0.30}}}}
ec2_instances:
  - {{id: {EBS}, host: h1, name: db, tags: {{Env: dev}}, imds: {{address: 127.0.0.21}}}}
  - {{id: {STORE}, host: h1, root_device: instance-store, availability_zone: eu-west-1b, imds: {{address: 127.0.0.22}}}}
  - {{id: {ASG}, host: h2, auto_scaling_group: web-asg, imds: {{address: 127.0.0.23}}}}
  - {{id: {SPOT}, host: h3, spot: true, instance_type: m6g.large, imds: {{address: 127.0.0.24}}}}
"""

NOT_FOUND_PAGE = b"""<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>404 - Not Found</title>
 </head>
 <body>
  <h1>404 - Not Found</h1>
 </body>
</html>"""


class Wall:
    """A wall clock the test moves by hand (token expiry, real-clock catch-up)."""

    def __init__(self, start: float = 1_800_000_000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


class Env:
    def __init__(self, tmp_path, settings: Ec2ImdsSettings = Ec2ImdsSettings(), clock: str = "manual"):
        self.wall = Wall()
        self.service = Maintenance.open(
            open_store(str(tmp_path / "f.db")), parse_fleet(FLEET), clock, 1.0, T0, "seed", wall=self.wall
        )
        self.imds = Ec2Imds(
            self.service, CallerResolver(self.service.settled_engine().fleet, shared_ports={8169}), settings
        )

    def request(self, path: str, who: str = EBS, method: str = "GET", headers=(), peer_port: int = 50000):
        request = Request(
            method,
            path,
            b"",
            [(k.lower(), v) for k, v in headers],
            b"",
            ("127.0.0.1", 8169),
            (ADDRESS.get(who, who), peer_port),
        )
        return self.imds.handle(request)

    def get(self, path: str, who: str = EBS, **kwargs) -> tuple[int, bytes]:
        status, body, _, _ = self.request(path, who, **kwargs)
        return status, body

    def token(self, who: str = EBS, ttl: bytes = b"21600") -> bytes:
        status, body, _, headers = self.request(
            "/latest/api/token", who, "PUT", [(b"x-aws-ec2-metadata-token-ttl-seconds", ttl)]
        )
        assert status == 200 and dict(headers)[b"x-aws-ec2-metadata-token-ttl-seconds"] == ttl
        return body

    def schedule(self, code: Ec2Code, instance: str = EBS, **fields):
        changes = self.service.perform(
            lambda engine: engine.component(Ec2Component).schedule_ec2(Ec2Request(code, (instance,), **fields))
        )
        [event] = [c.event for c in changes if isinstance(c, Ec2EventChanged)]
        return event


@pytest.fixture
def env(tmp_path):
    return Env(tmp_path)


SCHEDULED = "/latest/meta-data/events/maintenance/scheduled"
HISTORY = "/latest/meta-data/events/maintenance/history"


# ------------------------------------------------------------------------------------------ maintenance events
def test_scheduled_events_exact_bytes_with_an_unpadded_day(env):
    assert env.get(SCHEDULED) == (200, b"[ ]")
    # T0 is 20 Apr 2026 22:11:58: twelve days later is 2 May, a single-digit day.
    reboot = env.schedule(Ec2Code.SYSTEM_REBOOT, notice=timedelta(days=12))
    stop = env.schedule(Ec2Code.INSTANCE_STOP, notice=timedelta(days=13))
    status, body, content_type, _ = env.request(SCHEDULED)
    assert (status, content_type) == (200, b"text/plain")
    assert (
        body
        == (
            "[ {\n"
            '  "NotBefore" : "2 May 2026 22:11:58 GMT",\n'
            '  "Code" : "system-reboot",\n'
            '  "Description" : "The instance is scheduled for a reboot",\n'
            f'  "EventId" : "{reboot.event_id}",\n'
            '  "NotAfter" : "3 May 2026 00:11:58 GMT",\n'
            '  "State" : "active"\n'
            "}, {\n"
            '  "NotBefore" : "3 May 2026 22:11:58 GMT",\n'
            '  "Code" : "instance-stop",\n'
            '  "Description" : "The instance is running on degraded hardware",\n'
            f'  "EventId" : "{stop.event_id}",\n'
            '  "State" : "active"\n'  # an instance-stop has no NotAfter: the key is omitted
            "} ]"
        ).encode()
    )
    assert env.get(SCHEDULED, ASG) == (200, b"[ ]")  # events belong to their instance


def test_not_before_deadline_is_opt_in(tmp_path):
    env = Env(tmp_path, Ec2ImdsSettings(not_before_deadline=True))
    env.schedule(Ec2Code.SYSTEM_REBOOT, notice=timedelta(days=12))
    body = env.get(SCHEDULED)[1].decode()
    assert (
        '"NotAfter" : "3 May 2026 00:11:58 GMT",\n  "NotBeforeDeadline" : "23 May 2026 22:11:58 GMT",\n'
        '  "State" : "active"' in body
    )


def test_in_progress_events_stay_scheduled_then_move_to_history(env):
    reboot = env.schedule(Ec2Code.SYSTEM_REBOOT, notice=timedelta(hours=1))
    canceled = env.schedule(Ec2Code.INSTANCE_REBOOT, notice=timedelta(days=3))
    assert env.get(HISTORY) == (200, b"[ ]")
    env.service.perform(lambda engine: engine.component(Ec2Component).cancel_ec2(canceled.event_id))
    env.service.advance_clock(timedelta(hours=1))  # the reboot migration is in progress: still active
    assert f'"EventId" : "{reboot.event_id}"'.encode() in env.get(SCHEDULED)[1]
    env.service.advance_clock(timedelta(minutes=5))  # done
    assert env.get(SCHEDULED) == (200, b"[ ]")
    assert (
        env.get(HISTORY)[1]
        == (
            "[ {\n"
            '  "NotBefore" : "20 Apr 2026 23:11:58 GMT",\n'
            '  "Code" : "system-reboot",\n'
            '  "Description" : "[Completed] The instance is scheduled for a reboot",\n'
            f'  "EventId" : "{reboot.event_id}",\n'
            '  "NotAfter" : "21 Apr 2026 01:11:58 GMT",\n'
            '  "State" : "completed"\n'
            "}, {\n"
            '  "NotBefore" : "23 Apr 2026 22:11:58 GMT",\n'
            '  "Code" : "instance-reboot",\n'
            '  "Description" : "[Canceled] The instance is scheduled for a reboot",\n'
            f'  "EventId" : "{canceled.event_id}",\n'
            '  "NotAfter" : "24 Apr 2026 00:11:58 GMT",\n'
            '  "State" : "canceled"\n'
            "} ]"
        ).encode()
    )


def test_an_ended_event_leaves_memory_a_week_after_it_ended_and_the_history_still_shows_it(tmp_path):
    env = Env(tmp_path)
    old = env.schedule(Ec2Code.INSTANCE_REBOOT, notice=timedelta(days=3))
    env.service.perform(lambda engine: engine.component(Ec2Component).cancel_ec2(old.event_id))
    env.service.advance_clock(timedelta(days=6))
    recent = env.schedule(Ec2Code.SYSTEM_REBOOT, notice=timedelta(hours=1))
    live = env.schedule(Ec2Code.SYSTEM_REBOOT, notice=timedelta(days=5))
    env.service.advance_clock(timedelta(hours=2))  # recent done; old canceled 6 days 2 hours ago: still shown
    component = env.service.settled_engine().component(Ec2Component)
    assert set(component.ec2_events) == {old.event_id, recent.event_id, live.event_id}
    env.service.advance_clock(timedelta(days=1))  # old ended over a week ago: DescribeInstanceStatus shows it no more
    component = env.service.settled_engine().component(Ec2Component)
    assert set(component.ec2_events) == {recent.event_id, live.event_id}
    assert [e.event_id for e in component.ec2_events_of(EBS)] == [recent.event_id, live.event_id]
    assert component.ec2_event(old.event_id).description == old.description
    assert [e.event_id for e in component.all_ec2_events()] == [old.event_id, recent.event_id, live.event_id]
    history = env.get(HISTORY)[1]  # from the database and memory, in the order they were created
    assert history.index(old.event_id.encode()) < history.index(recent.event_id.encode())
    assert b'"State" : "canceled"' in history and b'"State" : "completed"' in history
    env.service.store.close()

    restarted = Env(tmp_path)  # loads the active events and those that ended within the week
    component = restarted.service.settled_engine().component(Ec2Component)
    assert set(component.ec2_events) == {recent.event_id, live.event_id}
    assert restarted.get(HISTORY)[1] == history
    restarted.service.store.close()


def test_a_history_get_during_a_commit_is_answered_as_it_lands_not_read_from_the_database_under_it(env):
    """The history reads the database, whose connection the commit under way holds: the GET waits for the landing
    (a Deferred), not the event loop."""
    env.get(SCHEDULED)  # the instance's tree is kept: only the history's own read could meet the commit
    held = HeldCommits(env.service)
    request = Ec2Request(Ec2Code.SYSTEM_REBOOT, (ASG,), notice=timedelta(hours=1))

    async def read_during_a_commit() -> list:
        made = env.service.perform_soon(lambda engine: engine.component(Ec2Component).schedule_ec2(request))
        await held.wait_entered()
        answer = env.request(HISTORY)
        got: list = []
        assert isinstance(answer, Deferred) and not answer.done
        answer.attach(got.append)
        held.release.set()
        await made
        await asyncio.sleep(0.01)  # the landing's callbacks
        return got

    [(status, body, _, _)] = asyncio.run(read_during_a_commit())
    assert (status, body) == (200, b"[ ]")


def test_answers_are_cached_until_the_instance_changes(env):
    first = env.request(SCHEDULED)
    assert env.request(SCHEDULED) is first  # rendered once: a dict lookup per request
    other = env.request(SCHEDULED, ASG)
    env.schedule(Ec2Code.SYSTEM_MAINTENANCE, notice=timedelta(hours=1))
    assert env.request(SCHEDULED) is not first and env.request(SCHEDULED)[1] != b"[ ]"
    assert env.request(SCHEDULED, ASG) is other  # another instance's change does not touch this one
    env.imds._on_change([Rebuilt("a failed commit")])  # the service rebuilt its engine: all rendered again
    assert env.request(SCHEDULED, ASG) is not other


def test_a_real_clock_applies_due_events_before_answering(tmp_path):
    env = Env(tmp_path, clock="real")
    event = env.schedule(Ec2Code.SYSTEM_MAINTENANCE, notice=timedelta(minutes=1))
    assert f'"EventId" : "{event.event_id}"'.encode() in env.get(SCHEDULED)[1]
    env.wall.now += 10 * 60  # ten real minutes: started at 1 min, done 2 min later; nobody advanced the engine
    assert env.get(SCHEDULED) == (200, b"[ ]")
    assert b'"State" : "completed"' in env.get(HISTORY)[1]


def test_imds_time_and_pretty_json():
    assert imds_time(T0 + timedelta(days=11)) == "1 May 2026 22:11:58 GMT"
    assert pretty_json([]) == "[ ]" and pretty_json({}) == "{ }"
    assert pretty_json([{"a": 1}, {"b": None}]) == '[ {\n  "a" : 1\n}, {\n  "b" : null\n} ]'


# --------------------------------------------------------------------------------------------------- listings
def test_listings(env):
    versions = env.get("/")[1].split(b"\n")
    assert versions[0] == b"1.0" and versions[-1] == b"latest" and b"2021-03-23" in versions
    assert env.get("/latest") == env.get("/latest/") == (200, b"dynamic\nmeta-data")
    meta = env.get("/latest/meta-data/")
    assert meta == env.get("/latest/meta-data")
    assert meta[1] == (
        b"ami-id\nami-launch-index\nami-manifest-path\nblock-device-mapping/\nevents/\nhostname\n"
        b"identity-credentials/\ninstance-action\ninstance-id\ninstance-life-cycle\ninstance-type\n"
        b"local-hostname\nlocal-ipv4\nmac\nnetwork/\nplacement/\nprofile\nreservation-id\n"
        b"security-groups\nservices/\nsystem\ntags/"
    )
    assert env.get("/latest/meta-data/events/") == (200, b"maintenance/\nrecommendations/")
    assert env.get("/latest/meta-data/events/maintenance/") == (200, b"history\nscheduled")
    assert env.get("/latest/meta-data/events/recommendations/") == (200, b"")
    assert env.get("/latest/meta-data/placement/") == (200, b"availability-zone\navailability-zone-id\nregion")
    assert env.get("/latest/dynamic/") == (200, b"fws/\ninstance-identity/")
    assert env.get("/latest/dynamic/instance-identity/") == (200, b"document")
    # An ASG instance has autoscaling/; a Spot instance has spot/ only once interrupted.
    assert b"\nami-manifest-path\nautoscaling/\nblock-device-mapping/\n" in env.get("/latest/meta-data/", ASG)[1]
    assert b"spot/" not in env.get("/latest/meta-data/", SPOT)[1]


def test_dated_versions_show_the_categories_of_their_time(env):
    """A category appears from the version that introduced it (the AWS page "Instance metadata categories")."""
    assert env.get("/2021-03-23/meta-data/instance-id") == (200, EBS.encode())
    assert env.get("/2009-04-04/meta-data/") == (
        200,
        b"ami-id\nami-launch-index\nami-manifest-path\n"
        b"block-device-mapping/\nhostname\ninstance-action\n"
        b"instance-id\ninstance-type\nlocal-hostname\nlocal-ipv4\n"
        b"placement/\nprofile\nreservation-id\nsecurity-groups",
    )
    assert env.get("/1.0/meta-data/") == (
        200,
        b"ami-id\nami-launch-index\nami-manifest-path\nhostname\n"
        b"instance-id\nlocal-ipv4\nprofile\nreservation-id\nsecurity-groups",
    )
    assert env.get("/1.0/") == (200, b"meta-data")  # dynamic/ is 2009-04-04
    assert env.get("/2008-09-01/dynamic/fws/instance-monitoring")[0] == 404
    assert env.get("/2009-04-04/dynamic/fws/instance-monitoring") == (200, b"disabled")
    assert env.get("/2018-03-28/meta-data/events/")[0] == 404  # events/maintenance/ is 2018-08-17
    assert env.get("/2019-10-01/meta-data/events/") == (200, b"maintenance/")  # recommendations/: 2020-10-27
    assert env.get("/2019-10-01/meta-data/placement/") == (200, b"availability-zone\navailability-zone-id")
    assert env.get("/2014-11-05/meta-data/services/") == (200, b"domain")  # partition is 2015-10-20
    assert (
        env.get(
            "/2016-04-19/meta-data/network/interfaces/macs/"
            + env.get("/latest/meta-data/mac")[1].decode()
            + "/vpc-ipv4-cidr-blocks"
        )[0]
        == 404
    )  # 2016-06-30
    # Tags are 2021-03-23; target-lifecycle-state (2021-07-15) and system (2022-09-24) are newer than every dated
    # version, so only latest has them.
    assert b"tags/" in env.get("/2021-03-23/meta-data/")[1] and b"tags/" not in env.get("/2021-01-03/meta-data/")[1]
    assert env.get("/2021-03-23/meta-data/system")[0] == 404
    assert env.get("/2021-03-23/meta-data/autoscaling/target-lifecycle-state", ASG)[0] == 404
    assert env.get("/latest/meta-data/autoscaling/target-lifecycle-state", ASG) == (200, b"InService")
    assert env.get("/2030-01-01/meta-data/instance-id")[0] == 404
    assert env.get("/latest/user-data")[0] == 404  # no user data


def test_instance_values(env):
    meta = "/latest/meta-data/"
    assert env.get(meta + "instance-id") == (200, EBS.encode())
    assert env.get(meta + "instance-type") == (200, b"m5.large")
    assert env.get(meta + "ami-id") == (200, b"ami-0abcdef1234567890")
    assert env.get(meta + "local-ipv4") == (200, b"10.0.0.10")
    assert env.get(meta + "local-hostname") == env.get(meta + "hostname") == (200, b"ip-10-0-0-10.ec2.internal")
    assert env.get(meta + "local-hostname", STORE) == (200, b"ip-10-0-0-11.eu-west-1.compute.internal")
    assert env.get(meta + "placement/availability-zone", STORE) == (200, b"eu-west-1b")
    assert env.get(meta + "placement/region", STORE) == (200, b"eu-west-1")
    assert env.get(meta + "placement/availability-zone-id", STORE) == (200, b"euw1-az2")
    assert env.get(meta + "instance-life-cycle") == (200, b"on-demand")
    assert env.get(meta + "instance-life-cycle", SPOT) == (200, b"spot")
    mac = env.get(meta + "mac")[1].decode()
    assert len(mac.split(":")) == 6 and mac.startswith("02:") and mac == env.get(meta + "mac")[1].decode()
    assert env.get(meta + "services/partition") == (200, b"aws")
    assert env.get(meta + "tags/instance") == env.get(meta + "tags/instance/") == (200, b"Env\nName")
    assert env.get(meta + "tags/instance/Name") == (200, b"db")
    assert env.get(meta + "tags/instance/Env") == (200, b"dev")
    assert env.get(meta + "tags/instance/Missing")[0] == 404


def test_identity_document(env):
    body = env.get("/latest/dynamic/instance-identity/document", SPOT)[1].decode()
    assert body.startswith('{\n  "accountId" : "123456789012",\n  "architecture" : "arm64",\n')
    assert f'  "instanceId" : "{SPOT}",\n' in body and '  "kernelId" : null,\n' in body
    assert body.endswith('  "region" : "us-east-1",\n  "version" : "2017-09-30"\n}')


def test_tags_can_be_disabled(tmp_path):
    env = Env(tmp_path, Ec2ImdsSettings(instance_tags=False))
    assert env.get("/latest/meta-data/tags/instance")[0] == 404
    assert b"tags/" not in env.get("/latest/meta-data/")[1]


def test_availability_zone_ids():
    assert availability_zone_id("us-east-1a") == "use1-az1"
    assert availability_zone_id("ap-southeast-2c") == "apse2-az3"
    assert availability_zone_id("us-gov-west-1a") == "usgw1-az1"


# ----------------------------------------------------------------------------------------- Spot, rebalance, ASG
def test_spot_instance_action_and_termination_time(env):
    for path in ("spot/instance-action", "spot/termination-time", "spot/"):
        assert env.get("/latest/meta-data/" + path, SPOT)[:1] == (404,)
    env.service.perform(lambda engine: engine.component(Ec2Component).interrupt_spot([SPOT], "terminate"))
    assert env.get("/latest/meta-data/spot/instance-action", SPOT) == (
        200,
        b'{"action": "terminate", "time": "2026-04-20T22:13:58Z"}',
    )
    assert env.get("/latest/meta-data/spot/termination-time", SPOT) == (200, b"2026-04-20T22:13:58Z")
    assert env.get("/latest/meta-data/spot/", SPOT) == (200, b"instance-action\ntermination-time")
    assert b"\nservices/\nspot/\nsystem\ntags/" in env.get("/latest/meta-data/", SPOT)[1]


def test_spot_stop_has_no_termination_time_and_is_gone_after_a_restart(env):
    env.service.perform(lambda engine: engine.component(Ec2Component).interrupt_spot([SPOT], "stop"))
    assert env.get("/latest/meta-data/spot/instance-action", SPOT)[1].startswith(b'{"action": "stop", ')
    assert env.get("/latest/meta-data/spot/termination-time", SPOT)[0] == 404
    env.service.advance_clock(timedelta(minutes=3))  # stopped
    env.service.perform(lambda engine: engine.component(Ec2Component).start_instance(SPOT))
    assert env.get("/latest/meta-data/spot/instance-action", SPOT)[0] == 404


def test_rebalance_recommendation(env):
    path = "/latest/meta-data/events/recommendations/rebalance"
    assert env.get(path, SPOT) == (404, NOT_FOUND_PAGE)
    env.service.advance_clock(timedelta(minutes=1))
    env.service.perform(lambda engine: engine.component(Ec2Component).recommend_rebalance([SPOT]))
    assert env.get(path, SPOT) == (200, b'{"noticeTime": "2026-04-20T22:12:58Z"}')
    assert env.get("/latest/meta-data/events/recommendations/", SPOT) == (200, b"rebalance")


def test_auto_scaling_target_lifecycle_state(env):
    path = "/latest/meta-data/autoscaling/target-lifecycle-state"
    assert env.get(path, ASG) == (200, b"InService")
    assert env.get(path, EBS) == (404, NOT_FOUND_PAGE)  # not in an Auto Scaling group
    env.schedule(Ec2Code.INSTANCE_RETIREMENT, ASG, notice=timedelta(minutes=10))
    env.service.advance_clock(timedelta(minutes=10))
    assert env.get(path, ASG) == (200, b"Terminated")


# ------------------------------------------------------------------------------------------------------ IMDSv2
TOKEN = "/latest/api/token"


def test_token_flow_optional_mode(env):
    token = env.token()
    assert len(token) >= 40
    assert env.get("/latest/meta-data/instance-id", headers=[(b"x-aws-ec2-metadata-token", token)]) == (
        200,
        EBS.encode(),
    )
    assert env.get("/latest/meta-data/instance-id") == (200, EBS.encode())  # IMDSv1 still works
    status, body = env.get("/latest/meta-data/instance-id", headers=[(b"x-aws-ec2-metadata-token", b"bogus")])
    assert status == 401 and b"<title>401 - Unauthorized</title>" in body  # a token that is sent must be valid
    # Tokens are bound to the instance that got them.
    assert env.get("/latest/meta-data/instance-id", ASG, headers=[(b"x-aws-ec2-metadata-token", token)])[0] == 401


def test_token_required_mode(tmp_path):
    env = Env(tmp_path, Ec2ImdsSettings(tokens="required"))
    status, body, content_type, _ = env.request("/latest/meta-data/")
    assert (status, content_type) == (401, b"text/html") and b"<h1>401 - Unauthorized</h1>" in body
    assert env.get("/", headers=[(b"x-aws-ec2-metadata-token", b"nope")])[0] == 401
    token = env.token(ttl=b"5")
    header = [(b"x-aws-ec2-metadata-token", token)]
    assert env.get("/latest/meta-data/instance-id", headers=header) == (200, EBS.encode())
    env.wall.now += 4.9
    assert env.get("/latest/meta-data/instance-id", headers=header)[0] == 200
    env.wall.now += 0.1  # the TTL has elapsed (wall time; the simulated clock did not move)
    assert env.get("/latest/meta-data/instance-id", headers=header)[0] == 401


def test_token_ttl_must_be_1_to_21600(env):
    page = (
        b'<?xml version="1.0" encoding="iso-8859-1"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 '
        b'Transitional//EN"\n\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n<html xmlns="http://'
        b'www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n <head>\n  <title>400 - Missing or Invalid Parameters'
        b"</title>\n </head>\n <body>\n  <h1>400 - Missing or Invalid Parameters</h1>\n </body>\n</html>"
    )
    assert env.get(TOKEN, method="PUT") == (400, page)
    for ttl in (b"0", b"21601", b"abc", b"-5", b"", b"1.5"):
        assert env.get(TOKEN, method="PUT", headers=[(b"x-aws-ec2-metadata-token-ttl-seconds", ttl)]) == (400, page)
    assert env.token(ttl=b"1") and env.token(ttl=b"21600")


def test_token_refusals(env):
    ttl = (b"x-aws-ec2-metadata-token-ttl-seconds", b"60")
    forwarded = env.get(TOKEN, method="PUT", headers=[ttl, (b"x-forwarded-for", b"10.1.1.1")])
    assert forwarded[0] == 403 and b"<title>403 - Forbidden</title>" in forwarded[1]
    assert env.get("/2021-03-23/api/token", method="PUT", headers=[ttl])[0] == 403  # versioned token path
    status, _, _, headers = env.request(TOKEN, method="GET")
    assert status == 405 and dict(headers)[b"allow"] == b"OPTIONS, PUT"
    assert env.get(TOKEN, "azure", method="PUT", headers=[ttl]) == (404, NOT_FOUND_PAGE)


# ------------------------------------------------------------------------------------------ errors and methods
def test_unknown_paths_get_the_real_404_page(env):
    status, body, content_type, _ = env.request("/latest/meta-data/no-such-thing")
    assert (status, body, content_type) == (404, NOT_FOUND_PAGE, b"text/html")
    assert env.get("/latest/meta-data/instance-id/nope")[0] == 404  # a value has no children


def test_azure_vms_and_unknown_callers_get_404(env):
    assert env.get("/latest/meta-data/", "azure") == (404, NOT_FOUND_PAGE)
    assert env.get("/latest/meta-data/", "127.0.0.99") == (404, NOT_FOUND_PAGE)  # no default machine


def test_methods(env):
    head = env.request("/latest/meta-data/instance-id", method="HEAD")
    assert head[:3] == (200, b"", b"text/plain")
    assert env.request("/latest/meta-data/nope", method="HEAD")[:2] == (404, b"")
    status, body, _, headers = env.request("/latest/meta-data/", method="POST")
    assert status == 405 and b"405 - Method Not Allowed" in body and dict(headers)[b"allow"] == b"GET, HEAD, OPTIONS"
    options = env.request(TOKEN, method="OPTIONS")
    assert options[:2] == (200, b"") and dict(options[3])[b"allow"] == b"OPTIONS, PUT"
    assert env.get("/latest/meta-data/", method="PUT")[0] == 405


def test_endpoint_disabled_is_403(tmp_path):
    env = Env(tmp_path, Ec2ImdsSettings(endpoint="disabled"))
    assert env.get("/latest/meta-data/")[0] == 403
    assert env.get(TOKEN, method="PUT", headers=[(b"x-aws-ec2-metadata-token-ttl-seconds", b"60")])[0] == 403


def test_instances_that_are_down_can_be_dropped(tmp_path):
    env = Env(tmp_path, Ec2ImdsSettings(while_down="drop"))
    env.schedule(Ec2Code.INSTANCE_STOP, notice=timedelta(minutes=5))
    assert env.get("/latest/meta-data/instance-id")[0] == 200
    env.service.advance_clock(timedelta(minutes=5))  # stopped
    assert env.get("/latest/meta-data/instance-id")[0] == DROP


def test_a_get_answers_what_is_committed_without_waiting_for_a_commit_under_way(tmp_path):
    """A GET does not wait for the group commit under way (its transaction runs in a worker thread; waiting would
    hold the event loop, and every instance's GET with it, for the rest of that transaction): it answers what the
    database holds. Whether the instance is down (asked on every GET when down instances are dropped) and its
    maintenance events are read from what was committed, and dropped once the change that moves them is."""
    env = Env(tmp_path, Ec2ImdsSettings(while_down="drop"))
    assert env.get(SCHEDULED) == (200, b"[ ]")
    assert env.get("/latest/meta-data/instance-id", ASG) == (200, ASG.encode())  # its tree, not yet its events
    held = HeldCommits(env.service)

    def reboot(instance: str):
        request = Ec2Request(Ec2Code.SYSTEM_REBOOT, (instance,), notice=timedelta(hours=1))
        return lambda engine: engine.component(Ec2Component).schedule_ec2(request)

    async def step_and_read() -> list:
        scheduled = env.service.perform_soon(reboot(EBS)), env.service.perform_soon(reboot(ASG))
        await held.wait_entered()
        # The transaction is held until the reads are done: a read that waited for it would fail it (held's 10 s).
        during = [env.get(SCHEDULED), env.get(SCHEDULED, ASG), [made.done() for made in scheduled]]
        held.release.set()
        await asyncio.wait(scheduled)
        return during

    assert asyncio.run(step_and_read()) == [(200, b"[ ]"), (200, b"[ ]"), [False, False]]
    [event] = env.service.settled_engine().component(Ec2Component).ec2_events_of(EBS)
    assert f'"EventId" : "{event.event_id}"'.encode() in env.get(SCHEDULED)[1]
    assert b'"Code" : "system-reboot"' in env.get(SCHEDULED, ASG)[1]


def test_a_kept_answer_a_commit_changed_is_rendered_as_it_lands_and_answered_during_the_next(tmp_path):
    """An instance that asked before a commit changed it is answered at once during the next transaction: its kept
    answers are rendered again as the commit lands, not dropped to be rendered after the next one."""
    env = Env(tmp_path, Ec2ImdsSettings(while_down="drop"))
    assert env.get(SCHEDULED) == (200, b"[ ]")

    def reboot(instance: str):
        request = Ec2Request(Ec2Code.SYSTEM_REBOOT, (instance,), notice=timedelta(hours=1))
        return lambda engine: engine.component(Ec2Component).schedule_ec2(request)

    async def schedule_and_read() -> tuple:
        await env.service.perform_soon(reboot(EBS))
        held = HeldCommits(env.service)
        other = env.service.perform_soon(reboot(ASG))
        await held.wait_entered()
        # The transaction is held until the read is done: a read that waited for it would fail it (held's 10 s).
        during = env.request(SCHEDULED)
        assert not isinstance(during, Deferred) and not other.done()
        held.release.set()
        await other
        return during[:2]

    status, body = asyncio.run(schedule_and_read())
    assert status == 200 and b'"Code" : "system-reboot"' in body


def test_settings_are_checked():
    with pytest.raises(ValueError, match="tokens"):
        Ec2ImdsSettings(tokens="sometimes")


# ------------------------------------------------------------------------------------- paths as clients build them
def test_repeated_slashes_count_as_one(env):
    """Clients that build paths by concatenation send ``//``; real IMDS serves them."""
    for path in (
        "//latest/meta-data/instance-id",
        "/latest//meta-data/instance-id",
        "/latest/meta-data//instance-id",
        "///latest///meta-data///instance-id",
    ):
        assert env.get(path) == (200, EBS.encode()), path
    assert env.get("//latest/meta-data/placement//") == env.get("/latest/meta-data/placement/")
    ttl = [(b"x-aws-ec2-metadata-token-ttl-seconds", b"60")]
    status, token = env.get("//latest//api/token", method="PUT", headers=ttl)
    assert status == 200
    assert env.get("/latest//meta-data/ami-id", headers=[(b"x-aws-ec2-metadata-token", token)])[0] == 200


def test_a_value_asked_with_a_trailing_slash_is_the_value(env):
    """botocore's region lookup asks ``placement/availability-zone/``; real IMDS answers the value."""
    assert env.get("/latest/meta-data/placement/availability-zone/", STORE) == (200, b"eu-west-1b")
    assert env.get("/latest/meta-data/instance-id/") == (200, EBS.encode())
    assert env.get("/latest/dynamic/instance-identity/document/") == env.get(
        "/latest/dynamic/instance-identity/document"
    )
    assert env.get("/latest/meta-data/no-such-thing/")[0] == 404


def test_categories_every_instance_has(env):
    meta = "/latest/meta-data/"
    mac = env.get(meta + "mac")[1].decode()
    assert env.get(meta + "network/") == (200, b"interfaces/")
    assert env.get(meta + "network/interfaces/") == (200, b"macs/")
    assert env.get(meta + "network/interfaces/macs/") == (200, f"{mac}/".encode())
    interface = meta + f"network/interfaces/macs/{mac}/"
    assert env.get(interface)[1].split(b"\n") == [
        b"device-number",
        b"interface-id",
        b"local-hostname",
        b"local-ipv4s",
        b"mac",
        b"owner-id",
        b"security-group-ids",
        b"security-groups",
        b"subnet-id",
        b"subnet-ipv4-cidr-block",
        b"vpc-id",
        b"vpc-ipv4-cidr-block",
        b"vpc-ipv4-cidr-blocks",
    ]
    value = {name: env.get(interface + name)[1].decode() for name in env.get(interface)[1].decode().split("\n")}
    assert value["device-number"] == "0" and value["mac"] == mac and value["owner-id"] == "123456789012"
    assert value["local-ipv4s"] == "10.0.0.10" and value["local-hostname"] == "ip-10-0-0-10.ec2.internal"
    assert value["subnet-ipv4-cidr-block"] == "10.0.0.0/24"
    assert value["vpc-ipv4-cidr-block"] == value["vpc-ipv4-cidr-blocks"] == "10.0.0.0/16"
    assert re.fullmatch(r"eni-[0-9a-f]{17}", value["interface-id"])
    assert re.fullmatch(r"subnet-[0-9a-f]{17}", value["subnet-id"])
    assert re.fullmatch(r"vpc-[0-9a-f]{17}", value["vpc-id"])
    assert re.fullmatch(r"sg-[0-9a-f]{17}", value["security-group-ids"])
    assert value["security-groups"] == "default" == env.get(meta + "security-groups")[1].decode()
    assert re.fullmatch(rb"r-[0-9a-f]{17}", env.get(meta + "reservation-id")[1])
    # Instances of one account and region share the VPC (and its default security group); interfaces are their own.
    spot_mac = env.get(meta + "mac", SPOT)[1].decode()
    spot = meta + f"network/interfaces/macs/{spot_mac}/"
    assert env.get(spot + "vpc-id", SPOT)[1].decode() == value["vpc-id"]
    assert env.get(spot + "security-group-ids", SPOT)[1].decode() == value["security-group-ids"]
    assert env.get(spot + "interface-id", SPOT)[1].decode() != value["interface-id"]
    assert env.get(meta + "reservation-id", SPOT) != env.get(meta + "reservation-id")
    # eu-west-1 is another VPC; the values are derived, so a restart gives the same ones.
    store_mac = env.get(meta + "mac", STORE)[1].decode()
    assert env.get(meta + f"network/interfaces/macs/{store_mac}/vpc-id", STORE)[1].decode() != value["vpc-id"]
    assert env.get(meta + "ami-manifest-path") == (200, b"(unknown)")
    assert env.get(meta + "block-device-mapping/") == (200, b"ami\nroot")
    assert env.get(meta + "block-device-mapping/root") == (200, b"/dev/xvda")
    assert env.get(meta + "block-device-mapping/", STORE) == (200, b"ami\nephemeral0\nroot")
    assert env.get(meta + "profile") == (200, b"default-hvm") and env.get(meta + "system") == (200, b"nitro")
    assert env.get(meta + "identity-credentials/ec2/") == (200, b"info\nsecurity-credentials/")
    info = json.loads(env.get(meta + "identity-credentials/ec2/info")[1])
    assert info == {"Code": "Success", "LastUpdated": "2026-04-20T22:11:58Z", "AccountId": "123456789012"}
    assert env.get(meta + "identity-credentials/ec2/security-credentials/") == (200, b"ec2-instance")
    credentials = json.loads(env.get(meta + "identity-credentials/ec2/security-credentials/ec2-instance")[1])
    assert list(credentials) == ["Code", "LastUpdated", "Type", "AccessKeyId", "SecretAccessKey", "Token", "Expiration"]
    assert re.fullmatch(r"ASIA[A-Z2-7]{16}", credentials["AccessKeyId"]) and len(credentials["SecretAccessKey"]) == 40
    assert b"not valid at AWS" in base64.b64decode(credentials["Token"])  # fake, and says so
    assert credentials["Expiration"] == "2026-04-21T04:11:58Z"


def test_signatures_of_the_identity_document_are_not_offered(env):
    """forewarn cannot sign as AWS; a fake signature would fail at the verifier, so there is none (404)."""
    for name in ("pkcs7", "signature", "rsa2048"):
        assert env.get("/latest/dynamic/instance-identity/" + name)[0] == 404


# ---------------------------------------------------------------------------------------------- token bounds
def test_one_instance_flooding_tokens_never_costs_another_its_token(env):
    """Token limits are per instance: 100,001 tokens from one instance leave another instance's token valid."""
    header = [(b"x-aws-ec2-metadata-token", env.token(EBS))]
    ttl = [(b"x-aws-ec2-metadata-token-ttl-seconds", b"21600")]
    first = env.get(TOKEN, ASG, method="PUT", headers=ttl)[1]
    for _ in range(100_000):
        env.imds.handle(Request("PUT", TOKEN, b"", ttl, b"", ("127.0.0.1", 8169), (ADDRESS[ASG], 50000)))
    assert env.get("/latest/meta-data/instance-id", EBS, headers=header) == (200, EBS.encode())
    # The flooding instance loses its own oldest tokens, not its newest.
    assert env.get("/latest/meta-data/instance-id", ASG, headers=[(b"x-aws-ec2-metadata-token", first)])[0] == 401
    latest = env.token(ASG)
    assert env.get("/latest/meta-data/instance-id", ASG, headers=[(b"x-aws-ec2-metadata-token", latest)])[0] == 200
    assert env.imds.tokens_held(ASG) == Ec2ImdsSettings().tokens_per_instance


def test_the_fleet_wide_token_bound_takes_from_the_biggest_holder(tmp_path):
    env = Env(tmp_path, Ec2ImdsSettings(tokens_per_instance=20, tokens_total=30))
    quiet = [env.token(EBS) for _ in range(5)]
    for who in (ASG, SPOT, ASG, SPOT):
        for _ in range(10):
            env.token(who)
    assert env.imds.tokens_held(EBS) == 5
    assert env.imds.tokens_held(ASG) + env.imds.tokens_held(SPOT) == 25  # 30 in all
    for token in quiet:
        assert env.get("/latest/meta-data/instance-id", headers=[(b"x-aws-ec2-metadata-token", token)])[0] == 200
    # Expired tokens are swept before anything alive is dropped.
    env.wall.now += 21600
    fresh = env.token(EBS)
    assert env.imds.tokens_held(EBS) == 1 and env.imds.tokens_held(ASG) == 0
    assert env.get("/latest/meta-data/instance-id", headers=[(b"x-aws-ec2-metadata-token", fresh)])[0] == 200
    with pytest.raises(ValueError, match="tokens_per_instance"):
        Ec2ImdsSettings(tokens_per_instance=10, tokens_total=5)


def test_a_get_that_reads_the_engine_waits_for_the_transaction_under_way_off_the_event_loop(tmp_path):
    """A GET whose answer must be read from the engine (an instance's first, or the first after a change to it)
    while a transaction is under way is answered once that transaction has landed, with what it committed; the
    others are answered meanwhile."""
    env = Env(tmp_path)
    assert env.get(SCHEDULED) == (200, b"[ ]")  # EBS's tree and answer kept; ASG's not yet
    held = HeldCommits(env.service)
    request = Ec2Request(Ec2Code.SYSTEM_REBOOT, (ASG,), notice=timedelta(hours=1))

    async def schedule_and_read() -> tuple:
        scheduled = env.service.perform_soon(lambda engine: engine.component(Ec2Component).schedule_ec2(request))
        await held.wait_entered()
        waiting = env.request(SCHEDULED, ASG)
        assert isinstance(waiting, Deferred) and not scheduled.done()
        assert env.get(SCHEDULED) == (200, b"[ ]")  # a kept answer, meanwhile
        answered = asyncio.get_running_loop().create_future()
        waiting.attach(answered.set_result)
        held.release.set()
        return await answered, scheduled.done()

    (status, body, _, _), done = asyncio.run(schedule_and_read())
    assert (status, done) == (200, True) and b'"Code" : "system-reboot"' in body
