"""Azure's commands of the forewarn CLI (given to the root group by azure/cloud.py): events, VMs, scale sets,
policies, the platform's own cases, Resource Graph and the maintenance acknowledge API. Light to import: click and
``cli/common.py`` only."""
