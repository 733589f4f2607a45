"""imds."""
