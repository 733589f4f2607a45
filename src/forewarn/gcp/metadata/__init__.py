"""The Compute Engine metadata server at each instance's endpoint."""
