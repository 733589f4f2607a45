"""The metadata port's Date header tells the cloud's time: the simulated clock's, moved when it moves."""

from datetime import timedelta
from email.utils import parsedate_to_datetime

import requests

from helpers import T0, Server, forewarn


def date_of(server: Server, client=requests) -> object:
    answer = client.get(
        server.imds + "/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"}, timeout=5
    )
    return parsedate_to_datetime(answer.headers["Date"])


def test_the_metadata_date_is_the_simulated_time(tmp_path):
    with Server(tmp_path) as server:
        assert date_of(server) == T0  # the manual clock stands at its start, months before the wall's time
        forewarn(server, "clock", "advance", "1h")
        assert date_of(server) == T0 + timedelta(hours=1)  # at once, not after the wall's next second


def test_the_same_request_again_on_a_kept_alive_connection_tells_the_moved_time(tmp_path):
    with Server(tmp_path) as server, requests.Session() as agent:  # one connection, the same bytes every time
        assert date_of(server, agent) == T0
        assert date_of(server, agent) == T0
        forewarn(server, "clock", "advance", "1h")
        assert date_of(server, agent) == T0 + timedelta(hours=1)
