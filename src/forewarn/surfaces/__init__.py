"""Surfaces: thin adapters that translate a cloud's wire format to core calls, and serve read models."""
