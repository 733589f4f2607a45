"""forewarn-agent through every case of azure's battery (tests/agent_battery.py)."""

import pytest

from agent_battery import agent_on_path, passes_every_case  # noqa: F401 (agent_on_path: the fixture used below)


@pytest.mark.usefixtures("agent_on_path")
def test_the_agent_passes_every_azure_case(forewarn_conformance):
    passes_every_case(forewarn_conformance, "azure")
