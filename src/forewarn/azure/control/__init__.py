"""The control API's Azure routes: events, approvals, the fleet's VMs and scopes, platform operations (the cloud's part
of forewarn's own API, given to the control app by azure/cloud.py)."""
