"""Amazon EC2's steps of a scenario file: a client of the server (HTTP and JSON only), given through its plugin."""
