"""forewarn-agent: one maintenance handler for Azure, Amazon EC2 and Compute Engine VMs."""

__version__ = "0.1.0"
