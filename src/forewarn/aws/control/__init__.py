"""The control API's EC2 routes (the cloud's part of forewarn's own API, given to the control app by aws/cloud.py)."""
