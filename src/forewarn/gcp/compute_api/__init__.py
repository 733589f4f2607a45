"""The Compute Engine API subset the google-cloud-compute client uses for maintenance."""
