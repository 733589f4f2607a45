"""Azure in a running server: its ARM port, its IMDS settings, Event Grid's outbox, its banner (``wiring.py``)."""
