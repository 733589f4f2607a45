"""The clouds this server speaks, each a plugin (``protocol.py``) found through one registry (``registry.py``)."""

from forewarn.clouds.protocol import Cloud, Component, Footing
from forewarn.clouds.registry import cloud_named, clouds

__all__ = ["Cloud", "Component", "Footing", "cloud_named", "clouds"]
