"""The Maintenance resource provider's scheduled-events acknowledge API, on the ARM port."""
