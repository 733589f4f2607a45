"""Compute Engine in a running server: its Compute Engine API port, its rules' timings, its banner (``wiring.py``)."""
