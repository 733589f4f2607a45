"""Compute Engine's commands of the forewarn CLI (``forewarn gce``, given to the root group by gcp/cloud.py)."""
