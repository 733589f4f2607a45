"""The registry of clouds (registry.py): every built-in cloud in the order their deadlines fire, entries added
through FOREWARN_CLOUDS, and clear refusals of entries that name nothing or a name taken twice."""

from __future__ import annotations

import pytest

from forewarn.aws.component import Ec2Component
from forewarn.azure.component import AzureComponent
from forewarn.cloud import registered
from forewarn.engine.engine import Engine
from forewarn.fleet.file import parse_fleet
from forewarn.gcp.component import GcpComponent
from forewarn.registry import BUILT_IN, UnknownCloud, cloud_named, clouds, entries, loaded
from forewarn.waves.component import WaveRunner
from helpers import T0


def test_the_built_in_clouds_in_their_order():
    assert [cloud.name for cloud in clouds()] == ["azure", "aws", "gcp"]
    assert [cloud.title for cloud in registered()] == ["Azure", "Amazon EC2", "Compute Engine"]
    assert cloud_named("gcp") is registered()[2]


def test_an_engine_holds_one_component_per_cloud_reached_by_type():
    engine = Engine(parse_fleet("vms: [{name: solo}]"), "registry", T0)
    assert list(engine.components) == ["azure", "aws", "gcp"]
    for kind in (AzureComponent, Ec2Component, GcpComponent, WaveRunner):
        assert isinstance(engine.component(kind), kind)
    with pytest.raises(LookupError, match="this engine has no Engine"):
        engine.component(Engine)


def test_more_clouds_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("FOREWARN_CLOUDS", " example.cloud:CLOUD , ")
    assert entries() == (*BUILT_IN, "example.cloud:CLOUD")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("forewarn.azure.cloud", "a cloud entry is module:attribute"),
        (":AZURE", "a cloud entry is module:attribute"),
        ("forewarn.azure.cloud:NOTHING", "forewarn.azure.cloud has no 'NOTHING'"),
    ],
)
def test_an_entry_that_names_nothing_is_refused(entry, message):
    with pytest.raises(ValueError, match=message):
        loaded([entry])


def test_two_clouds_under_one_name_are_refused():
    with pytest.raises(ValueError, match="two clouds registered under one name: azure"):
        loaded([*BUILT_IN, "forewarn.azure.cloud:AZURE"])


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(UnknownCloud, match="no cloud named 'oracle': this server has azure, aws, gcp"):
        cloud_named("oracle")
