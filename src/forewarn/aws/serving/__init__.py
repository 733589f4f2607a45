"""Amazon EC2 in a running server: its EC2 API port, the AWS Health outbox, its banner (``wiring.py``)."""
