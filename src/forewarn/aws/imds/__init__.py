"""EC2 instance metadata (IMDSv1 and IMDSv2) at each instance's own endpoint."""
