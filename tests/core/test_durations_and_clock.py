"""Duration spellings and the clock's arithmetic."""

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forewarn.core.clock import Clock
from forewarn.core.durations import parse_duration
from forewarn.core.errors import Conflict, Invalid
from helpers import T0


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30s", 30),
        ("15m", 900),
        ("1h30m", 5400),
        ("2d", 172800),
        ("PT15M", 900),
        ("pt30s", 30),
        ("P1DT2H", 93600),
        ("90", 90),
        ("1.5s", 1.5),
        ("500ms", 0.5),
        ("P2D", 172800),
        ("PT0S", 0),
    ],
)
def test_spellings(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "soon", "-5m", "5x", "m5", "PT", "P", "PT5", "1h30", "P1H", "PT1D"])
def test_refusals_say_what_is_accepted(text):
    with pytest.raises(Invalid, match="30s|PT15M"):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=59))
def test_minutes_and_seconds_agree_with_iso(minutes, seconds):
    assert parse_duration(f"{minutes}m{seconds}s") == parse_duration(f"PT{minutes}M{seconds}S")


def test_real_clock_follows_the_wall_at_its_speed():
    clock = Clock.start("real", 60, 1000.0, T0)
    assert clock.now(1010.0) == T0 + timedelta(minutes=10)
    assert clock.wall_when(T0 + timedelta(minutes=30)) == 1030.0
    faster = clock.reconfigured("real", 120, 1010.0)
    assert faster.now(1010.0) == T0 + timedelta(minutes=10) and faster.now(1011.0) == T0 + timedelta(minutes=12)
    with pytest.raises(Conflict, match="only a manual clock"):
        clock.moved_to(T0 + timedelta(hours=1), 1010.0)


def test_manual_clock_moves_only_when_told():
    clock = Clock.start("manual", 1, 1000.0, T0)
    assert clock.now(5000.0) == T0 and clock.wall_when(T0 + timedelta(seconds=1)) is None
    assert clock.moved_to(T0 + timedelta(minutes=5), 1001.0).now(9999.0) == T0 + timedelta(minutes=5)
    with pytest.raises(Invalid):
        Clock.start("sundial", 1, 0.0)
    with pytest.raises(Invalid):
        Clock.start("real", 0, 0.0)


@pytest.mark.parametrize("text", ["PT99999999999999999999M", "3651d", "99999999999999999999999"])
def test_absurd_durations_are_refused_not_crashes(text):
    with pytest.raises(Invalid, match="too long"):
        parse_duration(text)
