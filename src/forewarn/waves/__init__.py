"""waves."""
