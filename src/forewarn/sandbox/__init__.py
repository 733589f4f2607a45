"""The VM sandbox: run any program as a VM or EC2 instance of a running forewarn, with the real metadata addresses
(169.254.169.254, [fd00:ec2::254], metadata.google.internal) and no route anywhere else. ``forewarn sandbox`` on
the command line; :class:`Sandbox` from Python. docs/sandbox.md tells how it works."""

from forewarn.sandbox.manager import Sandbox, VmNamespace
from forewarn.sandbox.namespaces import SandboxError, SandboxUnavailable, unavailable_reason

__all__ = ["Sandbox", "SandboxError", "SandboxUnavailable", "VmNamespace", "unavailable_reason"]
