"""The pure, deterministic core: fleet, events, rules and clock.

Nothing in this package does I/O, reads the wall clock or knows a wire format. Commands go in, changes come out.
"""
