"""forewarn: self-hosted cloud maintenance notices (Azure Scheduled Events, Amazon EC2 scheduled events, Compute
Engine host maintenance)."""

__version__ = "0.1.0"
