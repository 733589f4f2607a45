"""The fleet: hosts, Azure VMs and EC2 instances (model.py), the YAML fleet file (file.py) and generated fleets
(generate.py)."""
