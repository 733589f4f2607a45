"""forewarn: self-hosted cloud maintenance notifications (Azure Scheduled Events, EC2 scheduled events)."""

__version__ = "0.1.0"
