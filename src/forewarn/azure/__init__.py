"""azure."""
