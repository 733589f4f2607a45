"""EC2's commands of the forewarn CLI (``forewarn ec2``, given to the root group by aws/cloud.py)."""
