"""The control API's Compute Engine routes (the cloud's part of forewarn's own API, given to the control app by
gcp/cloud.py)."""
