"""Google Compute Engine: host maintenance, Spot preemption, the metadata server and the Compute Engine API."""
